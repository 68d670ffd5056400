from tools.bench_text import WORDS_KNOWN, hiding_cost


def test_the_hiding_cost_compares_the_best_fusion_with_word_only_with_the_words_known():
    runs = [{"name": "word", "test_new_words_accuracy": 0.80}, {"name": "char", "test_new_words_accuracy": 0.81},
            {"name": "mean", "test_new_words_accuracy": 0.83}, {"name": WORDS_KNOWN, "test_new_words_accuracy": 0.84}]
    assert hiding_cost(runs) == ("Hiding the new words costs word-only 4.00 points on their sentences; the best "
                                 "fusion (mean, +3.00) wins back 75% of that.")
