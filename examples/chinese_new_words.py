"""Words coined after the vocabulary was fixed: char+word embeddings read them from their characters.

    python examples/chinese_new_words.py [--epochs 2] [--vectors FILE]

Half of HowNet's sentiment words found in the reviews (configs/chnsenti_charword.yaml with
data.text.new_words) are left out of the word vocabulary, as words coined after it was built would be:
a word-only model maps them to [UNK], the gated char+word model still reads their characters. Both are
trained; the script prints accuracy on all test sentences and on those holding a new word, scores
sentences built around new words, and prints the nearest known words of a few unseen words, composed
from their characters by a composer fit to word vectors (the gate model's own word table, or a word2vec
``--vectors`` file such as ``python tools/get_data.py word-vectors`` writes).
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from paddle_edo import load_config
from paddle_edo.data import text_encoder
from paddle_edo.engine import Engine
from paddle_edo.text import fit_composer, read_word2vec

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "chnsenti_charword.yaml"
SENTENCES = ["这款手机真给力，续航超出预期", "客服太坑爹了，退款拖了一个月", "被朋友种草了，果然没让我失望",
             "房间又脏又破，简直糟透了"]
UNSEEN = ["给力", "坑爹", "种草", "糟透", "超值", "性价比"]


def score(engine: Engine, sentences: list[str]) -> tuple[list[float], list[list[str]]]:
    """The trained model's P(positive) of each sentence, and the words of each the word table lacks."""
    encoder = text_encoder(engine.config["data"], engine.splits.vocabularies)
    return engine.model.predict_texts(encoder, sentences).tolist(), [encoder.unknown_words(s) for s in sentences]


def nearest_known_words(tokens: list[str], vectors: np.ndarray, words: list[str], k: int = 5) -> dict[str, list[str]]:
    """The k known tokens nearest (cosine) to each word's vector composed from its characters."""
    fit = fit_composer(tokens, vectors, "mean", epochs=20)
    composed = fit.composer.compose_vectors(words)
    known = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    queries = composed.vectors / np.maximum(np.linalg.norm(composed.vectors, axis=1, keepdims=True), 1e-12)
    nearest = np.argsort(-queries @ known.T, axis=1)[:, :k]
    return {w: ([tokens[i] for i in row] if not flagged else ["(no known character)"])
            for w, row, flagged in zip(words, nearest, composed.no_known_char)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--vectors", help="a word2vec file for the nearest-word lookup (default: the gate model's "
                                          "word table)")
    parser.add_argument("--sentences", nargs="+", default=SENTENCES)
    parser.add_argument("--words", nargs="+", default=UNSEEN)
    args = parser.parse_args(argv)
    results, engines = {}, {}
    with tempfile.TemporaryDirectory() as scratch:
        for fusion in ("word", "gate"):
            config = load_config(CONFIG, [f"model.fusion={fusion}", f"train.epochs={args.epochs}",
                                          "data.text.new_words.lexicon=[hownet]", "data.text.new_words.share=0.5",
                                          f"train.output_dir={scratch}/{fusion}"])
            engines[fusion] = Engine(config)
            results[fusion] = engines[fusion].fit()
    print("| embedding | test accuracy | test sentences with a new word | how many |")
    for fusion, r in results.items():
        print(f"| {fusion} | {r['test_accuracy']:.4f} | {r['test_new_words_accuracy']:.4f} | "
              f"{r['test_new_words_rows']} |")
    word_only, unseen = score(engines["word"], args.sentences)
    gated, _ = score(engines["gate"], args.sentences)
    for sentence, p_word, p_gate, lacking in zip(args.sentences, word_only, gated, unseen):
        print(f"{sentence}: P(positive) word-only {p_word:.2f}, char+word {p_gate:.2f} "
              f"(words the table lacks: {', '.join(lacking) or 'none'})")
    if args.vectors:
        tokens, vectors = read_word2vec(args.vectors)
    else:
        words = engines["gate"].splits.vocabularies["words"]
        tokens = words.tokens[2:]
        vectors = engines["gate"].model.embedding.words.weight.numpy()[2:]
    known = set(tokens)
    for word in args.words:
        if word in known:
            print(f"{word} is known: it has its own vector")
    nearest = nearest_known_words(tokens, vectors, [w for w in args.words if w not in known])
    for word, neighbours in nearest.items():
        print(f"{word} (unseen) is nearest to: {', '.join(neighbours)}")
    return {"accuracy": {fusion: {"all": r["test_accuracy"], "new_words": r["test_new_words_accuracy"]}
                         for fusion, r in results.items()}, "nearest": nearest}


if __name__ == "__main__":
    main()
