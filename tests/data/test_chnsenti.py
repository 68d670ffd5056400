import numpy as np
import pytest

from paddle_edo.config import load_config
from paddle_edo.data import load_chnsenti, load_reviews
from paddle_edo.engine import Engine
from paddle_edo.schema import ConfigError

from conftest import ROOT


@pytest.fixture(scope="module")
def reviews():
    return load_reviews()


def test_reviews_are_deduplicated_and_no_sentence_has_both_labels(reviews):
    texts, labels = reviews
    assert len(texts) == len(set(texts)) == len(labels) > 17000
    assert 0.45 < labels.mean() < 0.5  # 8,3xx positive of 17,3xx


def config(tmp_path, **text):
    return load_config(ROOT / "configs" / "chnsenti_charword.yaml",
                       [f"train.output_dir={tmp_path}", "train.epochs=1", "train.num_threads=1",
                        *(f"data.text.{k}={v}" for k, v in text.items())])


def test_vocabularies_come_from_training_and_the_oov_subset_is_exact(tmp_path):
    splits = load_chnsenti(config(tmp_path, max_words=16)["data"])
    words = splits.vocabularies["words"]
    assert splits.fields[0].vocab_size == len(words) and splits.fields[1].max_len == 16 * 4
    train_ids = splits.train.ids["words"]
    assert not (train_ids == 1).any()  # min_freq 1, no cap: every training word has its own id
    test_unknown = (splits.test.ids["words"] == 1).any(axis=1)
    oov = splits.extra["test_oov"]
    assert len(oov) == test_unknown.sum() > 100
    assert (oov.ids["words"] == 1).any(axis=1).all()
    capped = load_chnsenti(config(tmp_path, max_words=16, max_word_vocab=len(words) // 2)["data"])
    assert capped.fields[0].vocab_size == len(words) // 2
    assert len(capped.extra["test_oov"]) == len(oov)  # the subset is about training, not about the cap


def test_char_word_training_learns_sentiment_and_reports_the_oov_subset(tmp_path):
    results = Engine(config(tmp_path, max_words=24)).fit()
    assert results["test_accuracy"] > 0.75 and results["test_oov_accuracy"] > 0.7
    assert results["test_oov_rows"] > 100


def test_pretrained_word_vectors_from_the_config_fill_the_word_table(tmp_path):
    vectors = tmp_path / "words.txt"
    vectors.write_text("3 64\n" + "".join(f"{w} " + " ".join(["0.5"] * 64) + "\n" for w in ("很", "好", "不存在的词")),
                       encoding="utf-8")
    engine = Engine(config(tmp_path, max_words=24))
    plain = engine.model.embedding.words.weight.numpy()
    cfg = config(tmp_path, max_words=24)
    cfg["model"]["pretrained"]["words"] = str(vectors)
    loaded = Engine(cfg)
    words = loaded.splits.vocabularies["words"]
    table = loaded.model.embedding.words.weight.numpy()
    assert (table[[words.id("很"), words.id("好")]] == 0.5).all()
    others = [i for i in range(len(words)) if i not in (words.id("很"), words.id("好"))]
    np.testing.assert_array_equal(table[others], plain[others])  # same seed: only the two rows changed
    cfg["model"]["name"], cfg["data"]["name"] = "deepfm", "synthetic"
    with pytest.raises(ConfigError, match="model.pretrained.words = .* no words table"):
        Engine(cfg)
