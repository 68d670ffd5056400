"""Benchmarks, reported as ratios measured side by side in one run.

  python tools/bench.py quantized [--quick] [--out docs/benchmarks]
  python tools/bench.py shared [--data movielens|synthetic|lookups]
  python tools/bench.py monitor [--repeats 5]
  python tools/bench.py cache [--quick] [--skip-hit-rates]
  python tools/bench.py text [--seeds 1 2 3] [--epochs N] [--parts baseline new_words ...] [--accuracy-seeds 1]
  python tools/bench.py ps
  python tools/bench.py data [--rows 1000000] [--scale-rows 20000000]
  python tools/bench.py serving [--rate 500] [--seconds 60]
  python tools/bench.py redis [--rows 1000000] [--rate 500] [--seconds 30]
  python tools/bench.py sharded [--fields 4] [--rows 500000] [--dim 64] [--samples 400000] [--only placement peers]
  python tools/bench.py training_memory [--seeds 1 2 3] [--data movielens criteo] [--criteo-rows 1000000]
  python tools/bench.py capacity [--configs ...] [--ids zipf uniform] [--limit-gib 20] [--steps 200]
      [--at-rows N ...] [--speed-rows N]
  python tools/bench.py planner [--data movielens synthetic]
  python tools/bench.py packing
"""
from __future__ import annotations

import argparse
import functools
import gc
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paddle_edo.benchmark import steady_malloc  # noqa: E402

MALLOC = steady_malloc()  # before Paddle allocates anything

import numpy as np  # noqa: E402
import paddle  # noqa: E402
import paddle.nn.functional as F  # noqa: E402

from paddle_edo import load_config, memory_report, quantize  # noqa: E402
from paddle_edo.benchmark import side_by_side  # noqa: E402
from paddle_edo.data import zipf_ids  # noqa: E402
from paddle_edo.engine import Engine  # noqa: E402
from paddle_edo.nn import QuantizedEmbedding  # noqa: E402
from paddle_edo.quant import FORMATS  # noqa: E402
from paddle_edo.runtime import gpu_available, processor_name, select_device, set_num_threads  # noqa: E402
from tools.bench_lookups import inference_lookup_times  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
_PEERS = ROOT / ".venv-peers" / "bin" / "python"
PEERS_PYTHON = str(_PEERS) if _PEERS.exists() else None  # the peer columns' Python (make setup-peers), if there


def lookup_benchmark(rows: int, dim: int, batch: int, fields: int, alpha: float, repeats: int) -> dict:
    """Lookup time of each format against paddle.nn.Embedding fp32 on the same Zipf ids, in dygraph
    and under to_static; bytes held of each table."""
    paddle.seed(0)
    baseline = paddle.nn.Embedding(rows, dim)
    ids = paddle.to_tensor(zipf_ids(rows, (batch, fields), alpha, np.random.default_rng(0)))
    spec = [paddle.static.InputSpec([None, fields], "int64")]

    def tables() -> dict[str, paddle.nn.Layer]:
        """Fresh layers: to_static converts a layer in place, so dygraph and static need their own."""
        fp32 = paddle.nn.Embedding(rows, dim)
        fp32.weight.set_value(baseline.weight)
        made = {"fp32": fp32}
        for name in FORMATS:
            made[name] = QuantizedEmbedding.from_embedding(baseline, name)
            made[name].eval()
        return made

    layers = tables()
    held = {name: memory_report(paddle.nn.Sequential(layer)).held_bytes for name, layer in layers.items()}
    static = {name: paddle.jit.to_static(layer, input_spec=spec, full_graph=True) for name, layer in tables().items()}
    int8 = layers["int8"]
    params = F.embedding(ids, int8.row_params).astype("float32")
    candidates = {f"dygraph {n}": (lambda layer=layer: layer(ids)) for n, layer in layers.items()}
    candidates.update({f"to_static {n}": (lambda layer=layer: layer(ids)) for n, layer in static.items()})
    # how low a pure-Paddle int8 path can go: the gather and cast alone, no scale or bias yet
    candidates["dygraph int8 gather+cast only"] = lambda: F.embedding(ids, int8.codes).astype("float32")
    candidates["dygraph int8 lerp decode"] = lambda: paddle.lerp(
        params[..., 1:] + 128.0 * params[..., :1], params[..., 1:] + 129.0 * params[..., :1],
        F.embedding(ids, int8.codes).astype("float32"))
    sync = paddle.device.synchronize if gpu_available() else None
    ms = side_by_side(candidates, repeats=repeats, sync=sync)
    return {"settings": {"rows": rows, "dim": dim, "ids": [batch, fields], "zipf_alpha": alpha, "repeats": repeats,
                         "malloc": MALLOC, "device": paddle.get_device()},
            "ms": ms, "held_bytes": held,
            "speed_vs_fp32": {k: ms[f"{k.split()[0]} fp32"] / v for k, v in ms.items()},
            "bytes_ratio_vs_fp32": {n: held["fp32"] / b for n, b in held.items()}}


QUALITY_RUNS = [("fp32", "adam", {"type": "dense"})] + [
    (f"{dtype} {mode}", "adam", {"type": "quantized", "storage_format": dtype, "mode": mode})
    for mode in ("ptq", "qat") for dtype in FORMATS] + [
    ("fp32 (adagrad)", "adagrad", {"type": "dense"})] + [
    (f"{dtype} low_precision", "adagrad", {"type": "quantized", "storage_format": dtype, "mode": "low_precision"})
    for dtype in ("fp16", "bf16", "int8")]
QUICK_RUNS = {"fp32", "int8 ptq", "int4 qat", "fp32 (adagrad)", "int8 low_precision"}


def default_experiment(output_dir: str, overrides: list[str]) -> Engine:
    """The engine of configs/movielens_dense.yaml with overrides (progress lines off)."""
    return Engine(load_config(ROOT / "configs" / "movielens_dense.yaml",
                              [f"train.output_dir={output_dir}", "train.log_every_steps=100000", *overrides]))


def train_default_experiment(output_dir: str, overrides: list[str]) -> tuple[Engine, dict[str, float]]:
    """Train the default experiment with overrides; the engine and its results."""
    engine = default_experiment(output_dir, overrides)
    return engine, engine.fit()


def to_static_benchmark(repeats: int) -> dict:
    """Training examples/s of the MovieLens DeepFM (1 epoch) in dynamic graph and with train.to_static (SOT:
    tables in dynamic graph, the rest compiled; the first epoch includes the compilation), rounds alternated,
    medians; and the test AUC of each."""
    runs: dict[str, list[dict]] = {"dygraph": [], "to_static": []}
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(repeats):
            for name in runs:
                engine, results = train_default_experiment(f"{scratch}/{name}{round_}", [
                    "train.epochs=1", "monitor.enable=false", f"train.to_static={name == 'to_static'}"])
                runs[name].append({"examples_per_second": len(engine.splits.train) / results["train_seconds"],
                                   "test_auc": results["test_auc"]})
    medians = {name: float(np.median([r["examples_per_second"] for r in rs])) for name, rs in runs.items()}
    return {"settings": {"data": "MovieLens-100K", "model": "DeepFM", "epochs": 1, "rounds": repeats},
            "examples_per_second": medians, "to_static_vs_dygraph": medians["to_static"] / medians["dygraph"],
            "test_auc": {name: rs[0]["test_auc"] for name, rs in runs.items()}, "runs": runs}


def add_deltas(results: list[dict], baseline_of) -> None:
    """AUC delta and bytes ratio of each result against its baseline result."""
    for r in results:
        base = baseline_of(r)
        r["auc_delta"] = r["test_auc"] - base["test_auc"]
        r["bytes_ratio"] = base["held_bytes"] / r["held_bytes"]


def quality_benchmark(quick: bool, epochs: int | None) -> list[dict]:
    """Test AUC and bytes held on MovieLens-100K for every format and mode, same seed and model."""
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, optimizer, embedding in QUALITY_RUNS:
            if quick and name not in QUICK_RUNS:
                continue
            overrides = [f"train.optimizer={optimizer}", "monitor.enable=false"]
            if optimizer == "adagrad":
                overrides.append("train.learning_rate=0.02")
            if epochs:
                overrides.append(f"train.epochs={epochs}")
            overrides += [f"embedding.{k}={v}" for k, v in embedding.items()]
            engine, metrics = train_default_experiment(f"{tmp}/{len(results)}", overrides)
            held = engine.memory_report().held_bytes
            results.append({"name": name, "optimizer": optimizer, "test_auc": metrics["test_auc"],
                            "test_logloss": metrics["test_logloss"], "held_bytes": held})
            print(f"  {name:22s} auc {metrics['test_auc']:.4f}  tables {held:,} B", flush=True)
    baselines = {r["optimizer"]: r for r in results if r["name"].startswith("fp32")}
    add_deltas(results, lambda r: baselines[r["optimizer"]])
    return results


# Compressed methods apply to tables of at least 100 rows (user, item, zip): smaller fields stay fp32.
SHARED_RUNS = [("fp32 dense", {"type": "dense"})] + [
    (name, {**embedding, "min_rows": 100}) for name, embedding in [
        ("int8", {"type": "quantized", "storage_format": "int8"}),
        ("int4 qat", {"type": "quantized", "storage_format": "int4", "mode": "qat"}),
        ("int2 qat", {"type": "quantized", "storage_format": "int2", "mode": "qat"}),
        ("binary qat", {"type": "quantized", "storage_format": "binary", "mode": "qat"}),
        ("hash 1/4", {"type": "hash", "bucket_fraction": 0.25}),
        ("hash 1/10", {"type": "hash", "bucket_fraction": 0.1}),
        ("hash 1/50", {"type": "hash", "bucket_fraction": 0.02}),
        ("qr m=4", {"type": "qr", "num_collisions": 4}),
        ("qr m=10", {"type": "qr", "num_collisions": 10}),
        ("qr m=sqrt(N)", {"type": "qr"}),
        ("qr m=sqrt(N) add", {"type": "qr", "operation": "add"}),
        ("mixed_dim a=0.3", {"type": "mixed_dim", "alpha": 0.3}),
        ("mixed_dim a=1", {"type": "mixed_dim", "alpha": 1.0}),
        ("clustered 1/4", {"type": "clustered", "cluster_fraction": 0.25}),
        ("clustered 1/20", {"type": "clustered", "cluster_fraction": 0.05}),
        ("clustered 1/100", {"type": "clustered", "cluster_fraction": 0.01}),
        ("qr m=sqrt(N) + int8", {"type": "qr"}),
    ]]


# Synthetic: 4 fields of 1,000,000 ids each, Zipf(1.05), 300,000 samples, one epoch.
SYNTHETIC_DATA = ["data.name=synthetic", "data.synthetic.num_fields=4", "data.synthetic.rows_per_field=1000000",
                  "data.synthetic.num_samples=300000", "train.epochs=1", "train.batch_size=1024",
                  "train.learning_rate=0.002", "model.hidden_units=[64, 32]"]
SYNTHETIC_RUNS = {"fp32 dense", "int8", "int4 qat", "hash 1/10", "hash 1/50", "qr m=sqrt(N)", "mixed_dim a=1",
                  "qr m=sqrt(N) + int8"}


def shared_benchmark(data: list[str] | None = None, names: set[str] | None = None) -> list[dict]:
    """Test AUC against table bytes for every compression method, same seed and model; MovieLens-100K
    unless ``data`` overrides the data section."""
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, embedding in SHARED_RUNS:
            if names is not None and name not in names:
                continue
            overrides = ["monitor.enable=false", *(data or []), *[f"embedding.{k}={v}" for k, v in embedding.items()]]
            engine, metrics = train_default_experiment(f"{tmp}/{len(results)}", overrides)
            if name.endswith("+ int8"):  # compose: quantize the inner tables of the trained layers
                quantize(engine.model, "int8")
                metrics = {f"test_{k}": v for k, v in engine.evaluate("test").items()}
            held = engine.memory_report().held_bytes
            results.append({"name": name, "test_auc": metrics["test_auc"], "held_bytes": held})
            print(f"  {name:18s} auc {metrics['test_auc']:.4f}  tables {held:,} B", flush=True)
    add_deltas(results, lambda r: results[0])
    return results


def shared_lookup_benchmark(rows: int, dim: int, batch: int, fields: int, alpha: float, repeats: int,
                            threads: int) -> dict:
    """Lookup time of each row-sharing layer against paddle.nn.Embedding fp32 on the same Zipf ids, side by
    side in each mode: dygraph forward passes that need no gradient (evaluation, serving: the fused
    kernels on the CPU), dygraph forward passes recorded for training (composite ops, sparse row
    gradients, lookups through the batch's distinct ids), whole training steps (that forward pass, its
    backward pass from a fixed upstream gradient, and a lazy Adam step), and on the CPU Paddle Inference
    over saved programs with composite and with fused ops."""
    from paddle_edo.kernels import fused_ops
    from paddle_edo.nn import ClusteredEmbedding, DenseEmbedding, HashEmbedding, MixedDimEmbedding, QREmbedding

    paddle.seed(0)
    ids = paddle.to_tensor(zipf_ids(rows, (batch, fields), alpha, np.random.default_rng(0)))
    frequencies = np.arange(1, rows + 1, dtype=np.float64) ** -alpha  # ids ranked by their Zipf rank
    shared_rows = rows // 100
    mapping = np.random.default_rng(1).integers(0, shared_rows, rows)
    layers = {"fp32": paddle.nn.Embedding(rows, dim, sparse=True),
              "dense (fp32, deduplicated)": DenseEmbedding(rows, dim),
              "hash (rows/10, 2 hashes)": HashEmbedding(rows, dim, rows // 10),
              "qr (m = sqrt(N))": QREmbedding(rows, dim, int(np.sqrt(rows))),
              "mixed_dim (4 blocks)": MixedDimEmbedding(rows, dim, frequencies),
              "clustered (rows/100)": ClusteredEmbedding(
                  rows, dim, mapping=mapping, rows=np.zeros((shared_rows, dim), np.float32))}
    sync = paddle.device.synchronize if gpu_available() else None
    upstream = paddle.randn([batch, fields, dim])
    optimizers = {name: paddle.optimizer.Adam(1e-3, parameters=layer.parameters(), lazy_mode=True)
                  for name, layer in layers.items()}

    def without_gradient(layer):
        with paddle.no_grad():
            return layer(ids)

    def training_step(name):
        (layers[name](ids) * upstream).sum().backward()
        optimizers[name].step()
        optimizers[name].clear_grad()

    ms = {"no gradient": side_by_side({name: (lambda layer=layer: without_gradient(layer))
                                       for name, layer in layers.items()}, repeats, sync=sync),
          "training forward": side_by_side({name: (lambda layer=layer: layer(ids)) for name, layer in layers.items()},
                                           repeats, sync=sync),
          "training step": side_by_side({name: (lambda name=name: training_step(name)) for name in layers},
                                        repeats, sync=sync)}
    if not gpu_available():  # Paddle Inference on the CPU: saved programs with composite ops, and with fused ones
        ms.update(inference_lookup_times(layers, ids.numpy(), repeats, threads))
    return {"settings": {"rows": rows, "dim": dim, "ids": [batch, fields], "zipf_alpha": alpha, "repeats": repeats,
                         "malloc": MALLOC, "fused_kernels": fused_ops() is not None and not gpu_available(),
                         "training step": "sum(out x fixed upstream) backward, Adam(lazy_mode=True) step"},
            "ms": ms, "speed_vs_fp32": {mode: {k: times["fp32"] / v for k, v in times.items()}
                                        for mode, times in ms.items()}}


def plot_pareto(results: list[dict], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for r in results:
        ax.scatter(r["bytes_ratio"], r["test_auc"])
        ax.annotate(r["name"], (r["bytes_ratio"], r["test_auc"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    front, best = [], -1.0
    for r in sorted(results, key=lambda r: r["held_bytes"]):  # fewest bytes first: keep each AUC record
        if r["test_auc"] > best:
            best = r["test_auc"]
            front.append(r)
    ax.plot([r["bytes_ratio"] for r in front], [r["test_auc"] for r in front], "k--", lw=0.8, label="Pareto front")
    ax.set_xscale("log")
    ax.set_xlabel("table bytes: fp32 dense / method (log)")
    ax.set_ylabel("test AUC")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def markdown(lookup: dict, quality: list[dict]) -> str:
    lines = ["| format | bytes vs fp32 (1e6 x 64) | dygraph speed vs fp32 | to_static speed vs fp32 | "
             "dygraph ms | to_static ms |", "|---|---|---|---|---|---|"]
    for name in ["fp32", *FORMATS]:
        dy, st = f"dygraph {name}", f"to_static {name}"
        lines.append(f"| {name} | {lookup['bytes_ratio_vs_fp32'][name]:.2f}x | {lookup['speed_vs_fp32'][dy]:.2f}x | "
                     f"{lookup['speed_vs_fp32'][st]:.2f}x | {lookup['ms'][dy]:.2f} | {lookup['ms'][st]:.2f} |")
    for extra in ("dygraph int8 gather+cast only", "dygraph int8 lerp decode"):
        lines.append(f"| {extra.replace('dygraph ', '')} | | {lookup['speed_vs_fp32'][extra]:.2f}x | | "
                     f"{lookup['ms'][extra]:.2f} | |")
    lines += ["", "| run (MovieLens-100K, DeepFM) | test AUC | AUC delta vs fp32 | table bytes | bytes vs fp32 |",
              "|---|---|---|---|---|"]
    for r in quality:
        lines.append(f"| {r['name']} | {r['test_auc']:.4f} | {r['auc_delta']:+.4f} | {r['held_bytes']:,} | "
                     f"{r['bytes_ratio']:.2f}x |")
    return "\n".join(lines)


def plot(lookup: dict, quality: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    names = ["fp32", *FORMATS]
    x = np.arange(len(names))
    left.bar(x - 0.2, [lookup["speed_vs_fp32"][f"dygraph {n}"] for n in names], 0.4, label="dygraph")
    left.bar(x + 0.2, [lookup["speed_vs_fp32"][f"to_static {n}"] for n in names], 0.4, label="to_static")
    for i, n in enumerate(names):
        left.text(i, 0.02, f"{lookup['bytes_ratio_vs_fp32'][n]:.1f}x\nsmaller", ha="center", fontsize=7)
    left.axhline(1.0, color="gray", lw=0.8)
    left.set_xticks(x, names)
    left.set_ylabel("lookup speed vs paddle.nn.Embedding fp32 (higher is faster)")
    left.set_title(f"1e6 x 64 table, {lookup['settings']['ids'][0]} x {lookup['settings']['ids'][1]} Zipf ids")
    left.legend()
    for r in quality:
        marker = "o" if r["optimizer"] == "adam" else "s"
        right.scatter(r["bytes_ratio"], r["auc_delta"], marker=marker)
        right.annotate(r["name"], (r["bytes_ratio"], r["auc_delta"]), fontsize=7, xytext=(3, 3),
                       textcoords="offset points")
    right.axhline(0.0, color="gray", lw=0.8)
    right.set_xscale("log")
    right.set_xlabel("table bytes: fp32 / format (log)")
    right.set_ylabel("test AUC - fp32 test AUC")
    right.set_title("MovieLens-100K DeepFM (circles: adam; squares: adagrad)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def time_step_hooks(callbacks: list) -> list[float]:
    """Wrap the per-step hooks of the callbacks (those inside the epoch's seconds) with a timer; returns the
    one-element list the seconds add up in."""
    spent = [0.0]
    for callback in callbacks:
        for hook in ("on_after_backward", "on_step_end"):
            method = getattr(callback, hook)

            def timed(*args, _method=method):
                start = time.perf_counter()
                _method(*args)
                spent[0] += time.perf_counter() - start
            setattr(callback, hook, timed)
    return spent


def time_worker_jobs(callbacks: list) -> list[float]:
    """Add up the CPU seconds of the jobs monitors run on their worker thread (``background``); returns
    the one-element list they add up in."""
    spent = [0.0]
    for callback in callbacks:
        if getattr(callback, "background", False):
            def run(job, *args, _run=callback._run):
                def timed(*job_args):
                    start = time.thread_time()
                    try:
                        job(*job_args)
                    finally:
                        spent[0] += time.thread_time() - start
                _run(timed, *args)
            callback._run = run
    return spent


def monitor_benchmark(repeats: int) -> dict:
    """Training-loop time on MovieLens-100K with monitoring off, every 100, 10 and every step (figures on
    a worker thread, and inline; configs choose by the cores free), runs interleaved (each variant in every
    place of a round in turn, so that no variant always follows the same one): median epoch seconds
    against no monitoring, the seconds the training thread spends inside the monitors' hooks (a direct
    measure that the machine's run-to-run noise does not swamp), and the worker thread's CPU seconds."""
    variants = {"off": ["monitor.enable=false"],
                **{f"every {every}, {where}": ["monitor.enable=true", f"monitor.every_n_steps={n}",
                                               f"monitor.background={where == 'worker'}"]
                   for n, every in [(100, "100 steps"), (10, "10 steps"), (1, "step")]
                   for where in ("worker", "inline")}}
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    inside: dict[str, list[float]] = {name: [] for name in variants}
    worker: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(repeats):
            for name in names[repeat % len(names):] + names[:repeat % len(names)]:  # each in every place in turn
                overrides = variants[name]
                gc.collect()  # the last run's engine is not left for this run to collect
                folder = name.replace(" ", "_").replace(",", "")
                engine = default_experiment(f"{tmp}/{repeat}-{folder}", ["train.epochs=1", *overrides])
                spent, jobs = time_step_hooks(engine.callbacks), time_worker_jobs(engine.callbacks)
                engine.fit()
                seconds[name].append(engine.history[0]["seconds"])
                inside[name].append(spent[0])
                worker[name].append(jobs[0])
                print(f"  {name:22s} {seconds[name][-1]:.2f} s, {spent[0]:.3f} s in hooks, {jobs[0]:.3f} s worker CPU",
                      flush=True)
    median = {name: float(np.median(v)) for name, v in seconds.items()}
    in_hooks = {name: float(np.median(v)) for name, v in inside.items()}
    on_worker = {name: float(np.median(v)) for name, v in worker.items()}
    return {"epoch_seconds": seconds, "monitor_seconds": inside, "worker_cpu_seconds": worker,
            "median_seconds": median, "median_monitor_seconds": in_hooks, "median_worker_cpu_seconds": on_worker,
            "overhead_pct": {name: 100.0 * (median[name] / median["off"] - 1.0) for name in variants},
            "monitor_share_pct": {name: 100.0 * in_hooks[name] / median["off"] for name in variants},
            "worker_share_pct": {name: 100.0 * on_worker[name] / median["off"] for name in variants}}


def cache_benchmark(quick: bool, skip_hit_rates: bool, threads: int, out: Path) -> int:
    from tools import bench_cache

    stem = out / ("cache_quick" if quick else "cache")
    if skip_hit_rates:  # keep an earlier run's hit rates in this folder, if there is one
        earlier = stem.with_suffix(".json")
        hit_rates = json.loads(earlier.read_text())["hit_rates"] if earlier.is_file() else {"hit_rates": []}
    else:
        rows_list = [100_000] if quick else [1_000_000, 10_000_000]
        ids_per_step = 512 if quick else 4096
        print(f"hit rates: Zipf(1.05), {ids_per_step} ids per step, tables of {rows_list} rows", flush=True)
        hit_rates = bench_cache.hit_rate_benchmark(rows_list, [0.01, 0.05, 0.2], 200 if quick else 1000,
                                                   ids_per_step, 1.05)
    print(f"step time: {threads} threads, {MALLOC}", flush=True)
    step_times = [bench_cache.step_time_benchmark(rows, 32, 2048, 8, 0.2, 1.05, warmup=20 if quick else 100,
                                                  repeats=10 if quick else 60)
                  for rows in ([100_000] if quick else [1_000_000, 10_000_000])]
    for result in step_times:
        result["settings"].update(threads=threads, malloc=MALLOC)
    write_json(stem.with_suffix(".json"), {"hit_rates": hit_rates, "step_time": step_times}, threads)
    table = bench_cache.markdown(hit_rates, step_times)
    table = write_report(stem.with_suffix(".md"), table, threads)
    print(table)
    return 0


def run_shared_lookups(args: argparse.Namespace, out: Path) -> int:
    """Lookup speed of the shared tables against fp32."""
    result = shared_lookup_benchmark(1_000_000, 64, 4096, 26, 1.05, 15, args.threads)
    write_json(out / "shared_lookups.json", result, args.threads)
    print(f"fused kernels: {result['settings']['fused_kernels']}")
    modes = list(result["ms"])
    print("| layer | " + " | ".join(f"{mode} | vs fp32" for mode in modes) + " |")
    for name in result["ms"]["no gradient"]:
        print(f"| {name} | " + " | ".join(f"{result['ms'][mode][name]:.2f} ms | "
                                         f"{result['speed_vs_fp32'][mode][name]:.2f}x" for mode in modes) + " |")
    return 0


def run_shared(args: argparse.Namespace, out: Path) -> int:
    """AUC against bytes of the shared and compressed tables (MovieLens, or 1e6-id synthetic data)."""
    if args.data == "lookups":
        return run_shared_lookups(args, out)
    synthetic = args.data == "synthetic"
    results = shared_benchmark(SYNTHETIC_DATA if synthetic else None, SYNTHETIC_RUNS if synthetic else None)
    stem = "shared_synthetic" if synthetic else "shared"
    write_json(out / f"{stem}.json", results, args.threads)
    data_name = "synthetic Zipf, 4 fields x 1e6 ids" if synthetic else "MovieLens-100K"
    plot_pareto(results, out / f"{stem}.png", f"{data_name}, DeepFM: AUC against table memory")
    for r in results:
        print(f"| {r['name']} | {r['test_auc']:.4f} | {r['auc_delta']:+.4f} | {r['held_bytes']:,} | "
              f"{r['bytes_ratio']:.1f}x |")
    return 0


def run_lookups(args: argparse.Namespace, out: Path) -> int:
    """Per-id and pooled lookups of every format, bags and their training steps."""
    from tools import bench_lookups

    from paddle_edo.kernels.calibration import served

    results, training, bandwidth = bench_lookups.main_lookups(args.rows, args.repeats, args.threads, args.peers)
    for result in results:
        result["settings"].update(threads=args.threads, malloc=MALLOC)
    paths = served()
    write_json(out / "lookups.json", {"copy_gb_per_s": bandwidth, "results": results,
                                      "quantized_training_steps": training, "kernel_paths": paths}, args.threads)
    table = bench_lookups.markdown(results, training, bandwidth, paths)
    table = write_report(out / "lookups.md", table, args.threads)
    print(table)
    return 0


def run_collection(args: argparse.Namespace, out: Path) -> int:
    """The table-batched collection's training step beside per-table layers and the peers."""
    from tools import bench_collection

    with tempfile.TemporaryDirectory() as folder:
        result = bench_collection.main_collection(args.rows_cap, args.batch, args.dim, args.repeats, args.threads,
                                                  args.peers, Path(folder), engine_rows=args.engine_rows)
    result["settings"].update(malloc=MALLOC, processor=processor_name())
    write_json(out / "collection.json", result, args.threads)
    table = write_report(out / "collection.md", bench_collection.markdown(result), args.threads)
    print(table)
    return 0


@functools.lru_cache(maxsize=None)
def machine(threads: int) -> dict:
    """What a report's figures depend on: the processor, the path the native kernels take on it, cores and
    threads, L3, the copy bandwidth (numpy, 256 MiB), the malloc settings and Paddle's version."""
    from paddle_edo.kernels import kernel_isa
    from tools.bench_lookups import copy_bandwidth

    l3 = Path("/sys/devices/system/cpu/cpu0/cache/index3/size")
    return {"processor": processor_name(), "kernel_isa": kernel_isa(), "cores": os.cpu_count(), "threads": threads,
            "l3": l3.read_text().strip() if l3.is_file() else "unknown", "copy_gb_per_s": copy_bandwidth(),
            "malloc": MALLOC, "paddle": paddle.__version__}


def machine_line(threads: int) -> str:
    m = machine(threads)
    return (f"Processor: {m['processor']}; kernels' {m['kernel_isa']} path; {m['cores']} cores, {m['threads']} "
            f"threads; L3 {m['l3']}; copy bandwidth {m['copy_gb_per_s']:.1f} GB/s; malloc {m['malloc']}; "
            f"Paddle {m['paddle']}")


def write_report(path: Path, table: str, threads: int) -> str:
    """Write a part's markdown report opened by the machine it ran on (so two reports can be compared);
    returns the table (main printed the machine line already)."""
    path.write_text(f"{machine_line(threads)}\n\n{table}\n")
    return table


def write_json(path: Path, result, threads: int) -> None:
    """Write a part's JSON report with the machine it ran on (``machine``), as its markdown report opens."""
    record = {"machine": machine(threads), **result} if isinstance(result, dict) else \
        {"machine": machine(threads), "results": result}
    path.write_text(json.dumps(record, indent=2, ensure_ascii=False))


def run_to_static(args: argparse.Namespace, out: Path) -> int:
    """Training examples/s with train.to_static beside dynamic graph."""
    result = to_static_benchmark(args.repeats)
    result["settings"].update(threads=args.threads, malloc=MALLOC)
    write_json(out / "to_static.json", result, args.threads)
    for name, value in result["examples_per_second"].items():
        print(f"| {name} | {value:,.0f} examples/s | test AUC {result['test_auc'][name]:.4f} |")
    print(f"to_static / dygraph: {result['to_static_vs_dygraph']:.2f}x")
    return 0


def run_monitor(args: argparse.Namespace, out: Path) -> int:
    """Cost of VisualDL monitoring on the MovieLens training loop."""
    print(f"monitor overhead: MovieLens-100K, 1 epoch x {args.repeats}, {args.threads} threads, {MALLOC}")
    result = monitor_benchmark(args.repeats)
    write_json(out / "monitor.json", result, args.threads)
    print("| monitoring | epoch | end to end | training thread in hooks | worker thread CPU |")
    for name, pct in result["overhead_pct"].items():
        print(f"| {name} | {result['median_seconds'][name]:.2f} s | {pct:+.1f}% | "
              f"{result['median_monitor_seconds'][name]:.3f} s ({result['monitor_share_pct'][name]:.1f}%) | "
              f"{result['median_worker_cpu_seconds'][name]:.3f} s ({result['worker_share_pct'][name]:.1f}%) |")
    return 0


def run_cache(args: argparse.Namespace, out: Path) -> int:
    """Cache hit rates against Belady, step time against a resident table."""
    return cache_benchmark(args.quick, args.skip_hit_rates, args.threads, out)


def run_ps(args: argparse.Namespace, out: Path) -> int:
    """Parameter servers: examples/s with 1 and 2 trainers, bytes pushed per step."""
    from tools import bench_ps

    result = bench_ps.ps_benchmark()
    write_json(out / "ps.json", result, args.threads)
    print(json.dumps(result, indent=2))
    return 0


TEXT_PARTS = ("baseline", "new_words", "compose", "accuracy", "throughput")


def run_text(args: argparse.Namespace, out: Path) -> int:
    """Char+word fusions: sentiment accuracy (all / OOV subset / new sentiment words) beside a TF-IDF
    baseline, composed vectors of held-out words, tokenising speed."""
    from tools import bench_text
    from tools.get_data import word_vectors

    print(f"char+word: {bench_text.CONFIG.name}, seeds {args.seeds}, {args.threads} threads", flush=True)
    parts = {"baseline": bench_text.tfidf_baseline,
             "new_words": lambda: bench_text.new_words_benchmark(args.seeds, args.epochs),
             "compose": lambda: bench_text.compose_benchmark(word_vectors()),
             "accuracy": lambda: bench_text.accuracy_benchmark(args.accuracy_seeds or args.seeds, args.epochs),
             "throughput": bench_text.throughput_benchmark}
    path = out / "text.json"
    result = json.loads(path.read_text()) if args.parts != list(parts) and path.is_file() else {}
    for name in args.parts:  # each part is written as soon as it is measured
        print(f"{name}:", flush=True)
        result[name] = parts[name]()
        result.setdefault("machines", {})[name] = machine(args.threads)
        path.write_text(json.dumps(result, indent=2, ensure_ascii=False))
    missing = [name for name in parts if name not in result]
    if missing:
        print(f"{path} lacks {', '.join(missing)}: run those parts to write text.md")
        return 0
    table = bench_text.markdown(result)
    table = write_report(out / "text.md", table, args.threads)
    print(table)
    return 0


def run_quantized(args: argparse.Namespace, out: Path) -> int:
    """Quantized tables: AUC, bytes and lookup speed against fp32."""
    rows = 100_000 if args.quick else 1_000_000
    print(f"lookups: {rows} x 64 table, 4096 x 26 Zipf(1.05) ids, {args.threads} threads, {MALLOC}", flush=True)
    lookup = lookup_benchmark(rows, 64, 4096, 26, 1.05, 5 if args.quick else args.repeats)
    lookup["settings"]["threads"] = args.threads
    if args.lookups_only:
        quality = json.loads((out / "quantized.json").read_text())["quality"]
    else:
        print("quality: MovieLens-100K, configs/movielens_dense.yaml with each embedding", flush=True)
        quality = quality_benchmark(args.quick, 1 if args.quick else None)
    write_json(out / "quantized.json", {"lookup": lookup, "quality": quality}, args.threads)
    table = markdown(lookup, quality)
    table = write_report(out / "quantized.md", table, args.threads)
    plot(lookup, quality, out / "quantized.png")
    print(table)
    print(f"wrote {out / 'quantized.json'}, {out / 'quantized.md'}, {out / 'quantized.png'}")
    return 0


def run_planner(args: argparse.Namespace, out: Path) -> int:
    """The planner at budgets of 1/4, 1/10 and 1/30 of the fp32 bytes beside single methods, AUC against bytes."""
    from tools import bench_planner

    path = out / "planner.json"
    kept = json.loads(path.read_text()) if path.is_file() else {}
    for data in args.data:
        print(f"planner: {data}, {args.threads} threads", flush=True)
        kept[data] = {**bench_planner.planner_benchmark(data), "machine": machine(args.threads)}
        path.write_text(json.dumps(kept, indent=2))
    results = list(kept.values())
    table = write_report(out / "planner.md", "\n\n".join(bench_planner.markdown(r) for r in results), args.threads)
    bench_planner.plot(results, out / "planner.png")
    print(table)
    return 0


def run_packing(args: argparse.Namespace, out: Path) -> int:
    """Row ranges against min-max (word-vector neighbours, MovieLens PTQ AUC) and the process after packing."""
    from tools import bench_packing
    from tools.get_data import word_vectors

    print("packing: neighbours of People's Daily word vectors", flush=True)
    result = {"neighbours": bench_packing.neighbour_benchmark(word_vectors())}
    print("packing: MovieLens PTQ", flush=True)
    result["auc"] = bench_packing.auc_benchmark()
    print("packing: resident memory", flush=True)
    result["memory"] = bench_packing.memory_benchmark()
    write_json(out / "packing.json", result, args.threads)
    table = bench_packing.markdown(result)
    table = write_report(out / "packing.md", table, args.threads)
    print(table)
    return 0


def run_versions(args: argparse.Namespace, out: Path) -> int:
    """Two runs of `bench.py lookups` (one per Paddle, each ratio measured in its own run) side by side."""
    runs = [json.loads(Path(path).read_text()) for path in args.lookups]
    names = args.names
    lines = ["copy bandwidth: " + ", ".join(f"{r['copy_gb_per_s']:.1f} GB/s ({n})" for n, r in zip(names, runs)),
             "processors: " + "; ".join(f"{n}: {r['machine']['processor']}, the kernels' {r['machine']['kernel_isa']} path"
                                        if "machine" in r else f"{n}: not recorded" for n, r in zip(names, runs)), ""]
    for results in zip(*(r["results"] for r in runs)):
        settings = results[0]["settings"]
        lines += [f"#### {settings['rows']:,} x {settings['dim']}, {settings['distribution']} ids", "",
                  "| lookup | " + " | ".join(f"{n} ms | {n} vs its nn.Embedding" for n in names) + " |",
                  "|---|" + "---|---|" * len(names)]
        for key in results[0]["speed_vs_fp32"]:
            if any(key not in r["ms"] for r in results):  # a peer that ran beside one Paddle only
                continue
            lines.append(f"| {key} | " + " | ".join(f"{r['ms'][key]:.2f} | {r['speed_vs_fp32'][key]:.2f}x"
                                                    for r in results) + " |")
        for key in results[0]["bag_speed_vs_lookup_then_sum"]:
            if any(key not in r["bag_ms"] for r in results):
                continue
            lines.append(f"| {key} (vs lookup then sum) | " + " | ".join(
                f"{r['bag_ms'][key]:.2f} | {r['bag_speed_vs_lookup_then_sum'][key]:.2f}x" for r in results) + " |")
        lines.append("")
    steps = [r["quantized_training_steps"] for r in runs]
    lines += ["| training step (1e6 x 64, 4096 x 26 Zipf ids) | " + " | ".join(f"{n} ms | {n} speed" for n in names)
              + " |", "|---|" + "---|---|" * len(names)]
    for key in steps[0]["ms"]:
        lines.append(f"| {key} | " + " | ".join(f"{t['ms'][key]:.2f} | {t['speed'][key]:.2f}x" for t in steps) + " |")
    table = "\n".join(lines)
    table = write_report(out / "versions.md", table, args.threads)
    print(table)
    return 0


def run_data(args: argparse.Namespace, out: Path) -> int:
    """A user's files: Criteo-format parsing rate, streamed against in-memory training, a scale run."""
    from tools import bench_data

    cache = Path(args.cache)
    print(f"data: Criteo-format text, {args.rows:,} rows in {cache}, {args.threads} threads", flush=True)
    folder = bench_data.criteo_files(cache / f"criteo-{args.rows}", args.rows)
    with tempfile.TemporaryDirectory() as runs:
        result = {"settings": {"threads": args.threads, "rows": args.rows, "scale_rows": args.scale_rows,
                               "config": "configs/criteo.yaml"},
                  "parse": bench_data.parse_rates(folder, args.repeats),
                  "training": bench_data.training_rates(folder, Path(runs), args.repeats)}
        if args.scale_rows:
            print(f"scale run: {args.scale_rows:,} rows", flush=True)
            big = bench_data.criteo_files(cache / f"criteo-{args.scale_rows}", args.scale_rows)
            result["scale"] = bench_data.scale_run(big, Path(runs) / "scale")
    write_json(out / "data.json", result, args.threads)
    table = bench_data.markdown(result)
    table = write_report(out / "data.md", table, args.threads)
    print(table)
    return 0


def run_serving(args: argparse.Namespace, out: Path) -> int:
    """Exported tables: reopen cost, FAISS retrieval against exact search, the HTTP service under load."""
    from tools import bench_serving

    result = bench_serving.serving_benchmark(args.export_rows, args.retrieval_rows, args.service_rows, args.rate,
                                             args.seconds)
    result["settings"] = {"threads": args.threads, "malloc": MALLOC}
    write_json(out / "serving.json", result, args.threads)
    table = bench_serving.markdown(result)
    table = write_report(out / "serving.md", table, args.threads)
    print(table)
    return 0


def run_training_memory(args: argparse.Namespace, out: Path) -> int:
    """Test AUC and optimizer-state bytes of each table rule and state format against fp32 Adam."""
    from tools import bench_training_memory

    result = bench_training_memory.training_memory_benchmark(args.seeds, args.data, args.criteo_rows, Path(args.cache),
                                                             args.runs)
    result["settings"] = {"threads": args.threads, "malloc": MALLOC, "processor": processor_name(),
                          "paddle": paddle.__version__}
    write_json(out / "training_memory.json", result, args.threads)
    table = write_report(out / "training_memory.md", bench_training_memory.markdown(result), args.threads)
    print(table)
    return 0


def run_redis(args: argparse.Namespace, out: Path) -> int:
    """Trained tables in Redis: export rows/s, bytes per row, lookup latency against the file store, the
    service at a fixed rate with Redis behind it (a private redis-server)."""
    from tools import bench_redis

    result = bench_redis.redis_benchmark(args.rows, args.dim, args.repeats, args.lookups, args.rate, args.seconds)
    result["settings"].update(threads=args.threads, malloc=MALLOC, processor=processor_name())
    write_json(out / "redis.json", result, args.threads)
    table = write_report(out / "redis.md", bench_redis.markdown(result), args.threads)
    print(table)
    return 0


def run_sharded(args: argparse.Namespace, out: Path) -> int:
    """Sharded tables: 1 process vs 2 ranks (speed, RSS per rank, bytes exchanged against the formula), vs
    collective and parameter servers, a table over one process's memory cap, bytes on paper at 8-512 ranks."""
    from tools import bench_sharded

    if args.only:  # parts alone, each its own report
        settings = {"threads": args.threads, "malloc": MALLOC, "processor": processor_name()}
        shapes = f"2 x {args.rows:,} x {args.dim}, global batch {args.batch}, Zipf(1.2) ids"
        if "placement" in args.only:
            rows = bench_sharded.placement_bytes(args.rows, args.dim, args.batch)
            write_json(out / "sharded_placement.json", {"rows": args.rows, "dim": args.dim, "batch": args.batch,
                                                        "placement": rows, "settings": settings}, args.threads)
            print(write_report(out / "sharded_placement.md", bench_sharded.placement_markdown(rows, shapes),
                               args.threads))
        if "peers" in args.only:
            if not args.peers:
                raise SystemExit("bench.py sharded --only peers needs --peers (a Python with torchrec: make setup-peers)")
            rows = bench_sharded.peer_steps(args.peers, args.fields, args.rows, args.dim, args.batch)
            write_json(out / "sharded_peers.json", {"fields": args.fields, "rows": args.rows, "dim": args.dim,
                                                    "batch": args.batch, "runs": rows, "settings": settings},
                       args.threads)
            tables = f"{args.fields} x {args.rows:,} x {args.dim}, one Zipf(1.2) id per example and table, global " \
                     f"batch {args.batch}"
            print(write_report(out / "sharded_peers.md", bench_sharded.peers_markdown(rows, tables), args.threads))
        return 0
    result = bench_sharded.sharded_benchmark(args.fields, args.rows, args.dim, args.samples, args.batch,
                                             Path(args.criteo) if args.criteo else None, peers=args.peers)
    result["settings"] = {"threads": args.threads, "malloc": MALLOC, "processor": processor_name()}
    write_json(out / "sharded.json", result, args.threads)
    print(write_report(out / "sharded.md", bench_sharded.markdown(result), args.threads))
    return 0


def run_capacity(args: argparse.Namespace, out: Path) -> int:
    """The largest table each configuration trains under a memory limit, and examples/s at the baseline's."""
    from tools import bench_capacity

    result = bench_capacity.capacity_benchmark(args.configs, args.dim, args.steps, args.batch, args.limit_gib,
                                               Path(args.scratch), args.threads, args.precision, args.timeout, args.ids,
                                               args.at_rows, args.speed_rows,
                                               bench_capacity.brackets_of(Path(args.bracket_from))
                                               if args.bracket_from else None)
    result["settings"] = {"threads": args.threads, "malloc": MALLOC, "processor": processor_name(),
                          "paddle": paddle.__version__}
    write_json(out / "capacity.json", result, args.threads)
    print(write_report(out / "capacity.md", bench_capacity.markdown(result), args.threads))
    return 0


RUNNERS = {"capacity": run_capacity, "sharded": run_sharded, "training_memory": run_training_memory, "redis": run_redis, "serving": run_serving, "data": run_data, "quantized": run_quantized, "shared": run_shared, "monitor": run_monitor, "cache": run_cache,
           "text": run_text, "lookups": run_lookups, "to_static": run_to_static, "ps": run_ps, "versions": run_versions,
           "planner": run_planner, "packing": run_packing, "collection": run_collection}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    quantized = sub.add_parser("quantized", help="quantized tables: AUC, bytes and lookup speed vs fp32")
    quantized.add_argument("--quick", action="store_true", help="fewer runs, smaller table (a smoke test)")
    quantized.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    quantized.add_argument("--repeats", type=int, default=21)
    quantized.add_argument("--threads", type=int, default=2)
    quantized.add_argument("--lookups-only", action="store_true",
                           help="rerun only the lookup timings (kept quality results are reused from --out)")
    shared = sub.add_parser("shared", help="shared and compressed tables: AUC against bytes on MovieLens")
    shared.add_argument("--threads", type=int, default=2)
    shared.add_argument("--data", default="movielens", choices=("movielens", "synthetic", "lookups"),
                        help="AUC against bytes on MovieLens or 1e6-id synthetic data, or lookup speed")
    shared.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    monitor = sub.add_parser("monitor", help="cost of VisualDL monitoring on the MovieLens training loop")
    monitor.add_argument("--repeats", type=int, default=5)
    monitor.add_argument("--threads", type=int, default=2)
    monitor.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    cache = sub.add_parser("cache", help="cache hit rates against Belady, step time against a resident table")
    cache.add_argument("--quick", action="store_true", help="short traces, one table size (a smoke test)")
    cache.add_argument("--skip-hit-rates", action="store_true", help="step times only")
    cache.add_argument("--threads", type=int, default=2)
    cache.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    text = sub.add_parser("text", help="char+word fusions: TF-IDF baseline, new words, OOV subset, composed vectors, tokenising")
    text.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    text.add_argument("--epochs", type=int, default=None, help="default: the config's")
    text.add_argument("--threads", type=int, default=2)
    text.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    text.add_argument("--parts", nargs="+", choices=TEXT_PARTS, default=list(TEXT_PARTS),
                      help="measure these parts only, keeping the others from OUT/text.json")
    text.add_argument("--accuracy-seeds", type=int, nargs="+", help="seeds of the accuracy part (default: --seeds)")
    lookups = sub.add_parser("lookups", help="per-id and pooled lookups of every format, bags and their training step")
    lookups.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 4_000_000])
    lookups.add_argument("--repeats", type=int, default=11)
    lookups.add_argument("--threads", type=int, default=2)
    lookups.add_argument("--peers", default=PEERS_PYTHON,
                         help="a Python with torch and fbgemm-gpu-cpu for the peer columns (`make setup-peers`: "
                              ".venv-peers, taken when there); none: no peers")
    lookups.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    to_static = sub.add_parser("to_static", help="training examples/s with train.to_static beside dynamic graph")
    to_static.add_argument("--repeats", type=int, default=3)
    to_static.add_argument("--threads", type=int, default=2)
    to_static.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    ps = sub.add_parser("ps", help="parameter servers: examples/s with 1 and 2 trainers, bytes pushed per step")
    ps.add_argument("--threads", type=int, default=2)
    ps.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    data = sub.add_parser("data", help="a user's files: Criteo-format parsing, streamed training, a scale run")
    data.add_argument("--rows", type=int, default=1_000_000, help="rows of the parsing and training comparison")
    data.add_argument("--scale-rows", type=int, default=0, help="rows of the scale run (0: none)")
    data.add_argument("--repeats", type=int, default=3)
    data.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "paddle_edo_bench"),
                      help="where the generated data is kept between runs")
    data.add_argument("--threads", type=int, default=2)
    data.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    serving = sub.add_parser("serving", help="exported tables: reopen cost, FAISS retrieval, the HTTP service")
    serving.add_argument("--export-rows", type=int, default=4_000_000)
    serving.add_argument("--retrieval-rows", type=int, default=1_000_000)
    serving.add_argument("--service-rows", type=int, default=1_000_000)
    serving.add_argument("--rate", type=float, default=500.0, help="requests per second of the fixed-rate load")
    serving.add_argument("--seconds", type=float, default=60.0)
    serving.add_argument("--threads", type=int, default=2)
    serving.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    memory = sub.add_parser("training_memory", help="AUC and optimizer-state bytes of each table rule and state format")
    memory.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    memory.add_argument("--data", nargs="+", choices=("movielens", "criteo"), default=["movielens", "criteo"])
    memory.add_argument("--criteo-rows", type=int, default=1_000_000)
    memory.add_argument("--runs", nargs="+", help="these runs only (default: all; the AUC deltas need 'Adam, fp32' among them)")
    memory.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "paddle_edo_bench"),
                        help="where the generated data is kept between runs")
    memory.add_argument("--threads", type=int, default=2)
    memory.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    sharded = sub.add_parser("sharded", help="row-sharded tables: 1 process vs 2 ranks, collective, PS, a memory cap")
    sharded.add_argument("--fields", type=int, default=4)
    sharded.add_argument("--rows", type=int, default=500_000, help="rows of each field's table")
    sharded.add_argument("--dim", type=int, default=64)
    sharded.add_argument("--samples", type=int, default=400_000)
    sharded.add_argument("--batch", type=int, default=4096, help="global batch")
    sharded.add_argument("--criteo", default=None, help="Criteo-format files for the AUC parity part (default: "
                                                         "300,000 rows of criteo-synthetic made for it)")
    sharded.add_argument("--threads", type=int, default=2, help="of the machine: one process takes 2, each of 2 ranks 1")
    sharded.add_argument("--only", nargs="+", choices=("placement", "peers"),
                         help="these parts alone: placement (pooled bags' bytes and steps, tables by rows against "
                              "whole), peers (a training step against TorchRec's sharded tables on CPU ranks)")
    sharded.add_argument("--peers", default=PEERS_PYTHON,
                         help="a Python with torch, fbgemm-gpu-cpu and torchrec for the peer rows (`make setup-peers`)")
    sharded.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    redis = sub.add_parser("redis", help="tables in Redis: export rows/s, bytes per row, lookup latency, the service")
    redis.add_argument("--rows", type=int, default=1_000_000)
    redis.add_argument("--dim", type=int, default=64)
    redis.add_argument("--repeats", type=int, default=3, help="exports of each table (the median is reported)")
    redis.add_argument("--lookups", type=int, default=2000, help="lookups of each size and store")
    redis.add_argument("--rate", type=float, default=500.0, help="requests per second of the service's load")
    redis.add_argument("--seconds", type=float, default=30.0, help="of each load (0: no service part)")
    redis.add_argument("--threads", type=int, default=2)
    redis.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    capacity = sub.add_parser("capacity", help="the largest table each table type and optimizer state trains here")
    from tools.bench_capacity import CONFIGS
    capacity.add_argument("--configs", nargs="+", choices=tuple(CONFIGS), default=list(CONFIGS))
    capacity.add_argument("--ids", nargs="+", choices=("zipf", "uniform"), default=["zipf", "uniform"])
    capacity.add_argument("--limit-gib", type=float, default=20.0, help="resident memory a trial may take")
    capacity.add_argument("--dim", type=int, default=64)
    capacity.add_argument("--steps", type=int, default=200)
    capacity.add_argument("--batch", type=int, default=4096)
    capacity.add_argument("--precision", type=float, default=0.1, help="bisection stops within this ratio")
    capacity.add_argument("--timeout", type=float, default=3600.0, help="seconds a trial may take")
    capacity.add_argument("--scratch", default=str(Path(tempfile.gettempdir()) / "paddle_edo_capacity"),
                          help="where mmap table files are made (and removed)")
    capacity.add_argument("--threads", type=int, default=2)
    capacity.add_argument("--at-rows", type=int, nargs="+", help="trials at these sizes alone, no search")
    capacity.add_argument("--speed-rows", type=int, help="examples/s at this size (default: the baseline's largest)")
    capacity.add_argument("--bracket-from", help="a capacity report (.json) whose Zipf searches' largest and smallest "
                                                 "failing sizes start each configuration's search")
    capacity.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    planner = sub.add_parser("planner", help="per-table plans for memory budgets beside single methods")
    planner.add_argument("--data", nargs="+", choices=("movielens", "synthetic"), default=["movielens", "synthetic"])
    planner.add_argument("--threads", type=int, default=2)
    planner.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    packing = sub.add_parser("packing", help="row ranges against min-max, and resident memory after packing")
    packing.add_argument("--threads", type=int, default=2)
    packing.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    collection = sub.add_parser("collection", help="the table-batched collection's training step vs per-table "
                                                   "layers, FBGEMM's TBE and torch")
    collection.add_argument("--rows-cap", type=int, default=1_000_000, help="Criteo's vocabulary sizes capped here")
    collection.add_argument("--batch", type=int, default=4096)
    collection.add_argument("--dim", type=int, default=16)
    collection.add_argument("--repeats", type=int, default=11)
    collection.add_argument("--threads", type=int, default=2)
    collection.add_argument("--engine-rows", type=int, default=1_000_000,
                            help="criteo-synthetic rows the engine trains on, fp32 and the 1 MiB plan (0: skip)")
    collection.add_argument("--peers", default=PEERS_PYTHON,
                            help="a Python with torch and fbgemm-gpu-cpu for the peer rows (`make setup-peers`)")
    collection.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    versions = sub.add_parser("versions", help="two runs of `lookups` (e.g. one per Paddle) side by side")
    versions.add_argument("--lookups", nargs=2, required=True, help="the two lookups.json files")
    versions.add_argument("--names", nargs=2, default=["Paddle 2.6.2", "Paddle 3.3.1"])
    versions.add_argument("--threads", type=int, default=2)
    versions.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    args = parser.parse_args(argv)
    logging.getLogger("paddle_edo").propagate = False  # per-epoch lines go to each run's train.log only
    select_device("auto")
    set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(machine_line(args.threads), flush=True)  # every part's report opens with the machine it ran on
    return RUNNERS[args.what](args, out)


if __name__ == "__main__":
    os.environ.setdefault("GLOG_minloglevel", "2")
    sys.exit(main())
