import numpy as np
import paddle
import paddle.nn.functional as F
import pytest

from paddle_edo.config import load_config
from paddle_edo.data import load_chnsenti, load_reviews, split_rows, text_encoder
from paddle_edo.engine import Engine
from paddle_edo.errors import DataError
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


def test_new_words_leave_the_word_vocabulary_but_keep_their_characters(tmp_path):
    (tmp_path / "lexicon.txt").write_text("不错\n满意\n失望\n好\n从没出现过的词\n", encoding="utf-8")
    overrides = {"new_words.lexicon": f"[{tmp_path / 'lexicon.txt'}]", "new_words.share": 1.0}
    splits = load_chnsenti(config(tmp_path, max_words=16, **overrides)["data"])
    words, chars = splits.vocabularies["words"], splits.vocabularies["chars"]
    assert not {"不错", "满意", "失望"} & set(words.tokens) and "好" in words  # one character: too short to choose
    plain = load_chnsenti(config(tmp_path, max_words=16)["data"])
    assert "test_new_words" not in plain.extra and {"不错", "满意", "失望"} <= set(plain.vocabularies["words"].tokens)
    assert chars == plain.vocabularies["chars"]
    new = splits.extra["test_new_words"]
    flat = plain.test.ids["words"]
    new_ids = [plain.vocabularies["words"].index[w] for w in ("不错", "满意", "失望")]
    assert len(new) == np.isin(flat, new_ids).any(axis=1).sum() > 50
    assert (new.ids["words"] == 1).any(axis=1).all()   # each holds an unknown word: a new one
    half = load_chnsenti(config(tmp_path, max_words=16, **{**overrides, "new_words.share": 0.5,
                                                          "new_words.seed": 3})["data"])
    assert len({"不错", "满意", "失望"} - set(half.vocabularies["words"].tokens)) == 2  # round(0.5 x 3)
    known = load_chnsenti(config(tmp_path, max_words=16, **{**overrides, "new_words.hidden": False})["data"])
    assert known.vocabularies == plain.vocabularies   # the reference: the same subset, its words known
    np.testing.assert_array_equal(known.extra["test_new_words"].ids["words"], flat[np.isin(flat, new_ids).any(axis=1)])


def test_a_lexicon_without_a_word_of_the_corpus_is_refused(tmp_path):
    (tmp_path / "lexicon.txt").write_text("从没出现过的词\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"new_words.lexicon = .*lexicon.txt.*: none of its words of 2\+ characters"):
        load_chnsenti(config(tmp_path, **{"new_words.lexicon": f"[{tmp_path / 'lexicon.txt'}]"})["data"])


def test_char_word_training_learns_sentiment_and_reports_the_oov_subset(tmp_path):
    engine = Engine(config(tmp_path, max_words=24))
    results = engine.fit()
    assert results["test_accuracy"] > 0.75 and results["test_oov_accuracy"] > 0.7
    assert results["test_oov_rows"] > 100
    # raw sentences score as the encoded test split does
    texts, _ = load_reviews()
    rows = split_rows(len(texts), engine.config["data"]["split"], engine.config["data"]["seed"])[2][:64]
    encoder = text_encoder(engine.config["data"], engine.splits.vocabularies)
    engine.model.train()
    scored = engine.model.predict_texts(encoder, [texts[i] for i in rows])
    assert engine.model.training  # the mode it had
    test = engine.splits.test.take(np.arange(64))
    engine.model.eval()
    with paddle.no_grad():
        logits = engine.model([paddle.to_tensor(test.ids["words"]), paddle.to_tensor(test.ids["chars"])])
    np.testing.assert_allclose(scored, F.sigmoid(logits).numpy(), rtol=1e-6)
    assert engine.model.predict_texts(encoder, []).shape == (0,)


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


def test_compose_chars_starts_the_character_table_from_the_word_vectors(tmp_path):
    rng = np.random.default_rng(0)
    words = ["很好", "不好", "好看", "难看", "满意", "失望", "不错", "很差"]
    vectors = tmp_path / "words.txt"
    vectors.write_text(f"{len(words)} 64\n" + "".join(f"{w} " + " ".join(f"{v:.4f}" for v in rng.normal(size=64))
                                                     + "\n" for w in words), encoding="utf-8")
    cfg = config(tmp_path, max_words=24)
    cfg["model"]["pretrained"].update(words=str(vectors), compose_chars=True)
    engine = Engine(cfg)
    chars, table = engine.splits.vocabularies["chars"], engine.model.embedding.chars.weight.numpy()
    plain = Engine(config(tmp_path, max_words=24)).model.embedding.chars.weight.numpy()
    composed = [chars.id(c) for c in "很好不看难满意失望错差"]
    untouched = [i for i in range(len(chars)) if i not in composed]
    np.testing.assert_array_equal(table[untouched], plain[untouched])
    assert not np.allclose(table[composed], plain[composed])
    cfg["model"]["pretrained"]["words"] = None
    with pytest.raises(ConfigError, match="compose_chars = true needs model.pretrained.words"):
        Engine(cfg)
