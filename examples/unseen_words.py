"""Char+word embeddings for words the vocabulary has never seen: a word-only model maps them all to
[UNK]; CharWordEmbedding gives each a vector from its characters.

    python examples/unseen_words.py [--epochs 2] [--max-word-vocab 3000]

Trains the review-sentiment classifier (configs/chnsenti_charword.yaml) twice, word-only and with the
gated char+word fusion, with a word vocabulary capped so that many test words are unseen, and prints
accuracy on all test sentences and on those with an unseen word, then scores a few new sentences.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from paddle_edo import load_config
from paddle_edo.data import text_encoder
from paddle_edo.engine import Engine

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "chnsenti_charword.yaml"


def score(engine: Engine, sentences: list[str]) -> tuple[list[float], list[list[str]]]:
    """The trained model's P(positive) of each sentence, and the words of each the word table lacks."""
    encoder = text_encoder(engine.config["data"], engine.splits.vocabularies)
    return engine.model.predict_texts(encoder, sentences).tolist(), [encoder.unknown_words(s) for s in sentences]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--max-word-vocab", type=int, default=3000)
    parser.add_argument("--sentences", nargs="+", default=["这家店的菜难吃死了", "房间干净，服务周到，性价比超高",
                                                          "电池续航拉胯，客服敷衍"])
    args = parser.parse_args(argv)
    results, engines = {}, {}
    with tempfile.TemporaryDirectory() as scratch:
        for fusion in ("word", "gate"):
            config = load_config(CONFIG, [f"model.fusion={fusion}", f"train.epochs={args.epochs}",
                                          f"data.text.max_word_vocab={args.max_word_vocab}",
                                          f"train.output_dir={scratch}/{fusion}"])
            engines[fusion] = Engine(config)
            results[fusion] = engines[fusion].fit()
    print("| embedding | test accuracy | test sentences with an unseen word | how many |")
    for fusion, r in results.items():
        print(f"| {fusion} | {r['test_accuracy']:.4f} | {r['test_oov_accuracy']:.4f} | {r['test_oov_rows']} |")
    word_only, unseen = score(engines["word"], args.sentences)
    gated, _ = score(engines["gate"], args.sentences)
    for sentence, p_word, p_gate, lacking in zip(args.sentences, word_only, gated, unseen):
        print(f"{sentence}: P(positive) word-only {p_word:.2f}, char+word {p_gate:.2f} "
              f"(unseen words: {', '.join(lacking) or 'none'})")
    return {fusion: {"accuracy": r["test_accuracy"], "oov_accuracy": r["test_oov_accuracy"]}
            for fusion, r in results.items()}


if __name__ == "__main__":
    main()
