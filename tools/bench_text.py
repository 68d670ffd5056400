"""Char+word benchmarks for tools/bench.py: sentiment accuracy of each fusion against word-only and
char-only (whole test set and its out-of-vocabulary subset), and tokenising throughput against jieba's."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import jieba
import numpy as np

from paddle_edo import load_config
from paddle_edo.data import load_chnsenti, load_reviews
from paddle_edo.engine import Engine
from paddle_edo.text import CharWordEncoder, JiebaTokenizer

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "chnsenti_charword.yaml"


def runs(word_vocab: int) -> list[tuple[str, list[str]]]:
    """(name, config overrides): every fusion on the full word vocabulary, and the word-only and gated
    char+word models on half of it."""
    full = [(fusion, [f"model.fusion={fusion}"]) for fusion in ("word", "char", "concat", "add", "mean", "gate")]
    half = [(f"{fusion}, half word vocab", [f"model.fusion={fusion}", f"data.text.max_word_vocab={word_vocab // 2}"])
            for fusion in ("word", "gate")]
    return full + half


def accuracy_benchmark(seeds: list[int], epochs: int | None) -> dict:
    word_vocab = load_chnsenti(load_config(CONFIG)["data"]).fields[0].vocab_size
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, overrides in runs(word_vocab):
            per_seed = []
            for seed in seeds:
                extra = [f"train.seed={seed}", f"train.output_dir={tmp}/{len(results)}-{seed}",
                         "train.log_every_steps=100000", *([f"train.epochs={epochs}"] if epochs else [])]
                engine = Engine(load_config(CONFIG, overrides + extra))
                fit = engine.fit()
                per_seed.append({"seed": seed, **{k: fit[k] for k in ("test_accuracy", "test_oov_accuracy",
                                                                      "test_auc", "test_oov_auc")}})
            held = engine.memory_report().held_bytes
            entry = {"name": name, "held_bytes": held, "runs": per_seed, "test_oov_rows": fit["test_oov_rows"],
                     "word_vocab": engine.fields[0].vocab_size, "char_vocab": engine.fields[1].vocab_size}
            for key in ("test_accuracy", "test_oov_accuracy", "test_auc", "test_oov_auc"):
                entry[key] = float(np.mean([r[key] for r in per_seed]))
                entry[f"{key}_std"] = float(np.std([r[key] for r in per_seed]))
            print(f"  {name:24s} acc {entry['test_accuracy']:.4f}  oov acc {entry['test_oov_accuracy']:.4f}  "
                  f"bytes {held:,}", flush=True)
            results.append(entry)
    word = next(r for r in results if r["name"] == "word")
    for r in results:
        r["accuracy_delta_vs_word_pts"] = 100 * (r["test_accuracy"] - word["test_accuracy"])
        r["oov_accuracy_delta_vs_word_pts"] = 100 * (r["test_oov_accuracy"] - word["test_oov_accuracy"])
        r["bytes_vs_word"] = r["held_bytes"] / word["held_bytes"]
    return {"settings": {"config": str(CONFIG.relative_to(ROOT)), "seeds": seeds, "epochs": epochs or "config"},
            "runs": results}


def throughput_benchmark(repeats: int = 3) -> dict:
    """Sentences per second over the whole review corpus: jieba.lcut alone, JiebaTokenizer.cut, and
    cut + encoding into padded word and character ids (median of repeats, dictionary already loaded)."""
    texts, _ = load_reviews()
    tokenizer = JiebaTokenizer()
    splits = load_chnsenti(load_config(CONFIG)["data"])
    encoder = CharWordEncoder(tokenizer, splits.vocabularies["words"], splits.vocabularies["chars"], 48, 4)
    jieba_default = jieba.Tokenizer()
    jieba_default.initialize()
    candidates = {"jieba.lcut": lambda: [jieba_default.lcut(t) for t in texts],
                  "JiebaTokenizer.cut": lambda: tokenizer.cut_many(texts),
                  "cut + encode (CharWordEncoder)": lambda: encoder.encode_batch(texts)}
    seconds = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, fn in candidates.items():
            start = time.perf_counter()
            fn()
            seconds[name].append(time.perf_counter() - start)
    rates = {name: len(texts) / float(np.median(s)) for name, s in seconds.items()}
    return {"sentences": len(texts), "sentences_per_second": rates,
            "vs_jieba": {name: rate / rates["jieba.lcut"] for name, rate in rates.items()}}


def markdown(accuracy: dict, throughput: dict) -> str:
    lines = ["| embedding | word ids | table bytes | bytes vs word-only | test accuracy | OOV-subset accuracy | "
             "vs word-only (all / OOV, points) |", "|---|---|---|---|---|---|---|"]
    for r in accuracy["runs"]:
        lines.append(f"| {r['name']} | {r['word_vocab']:,} | {r['held_bytes']:,} | {r['bytes_vs_word']:.2f}x | "
                     f"{r['test_accuracy']:.4f} ± {r['test_accuracy_std']:.4f} | {r['test_oov_accuracy']:.4f} ± "
                     f"{r['test_oov_accuracy_std']:.4f} | {r['accuracy_delta_vs_word_pts']:+.2f} / "
                     f"{r['oov_accuracy_delta_vs_word_pts']:+.2f} |")
    lines += ["", "| tokenising | sentences / s | vs jieba.lcut |", "|---|---|---|"]
    for name, rate in throughput["sentences_per_second"].items():
        lines.append(f"| {name} | {rate:,.0f} | {throughput['vs_jieba'][name]:.2f}x |")
    return "\n".join(lines)
