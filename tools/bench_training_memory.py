"""Training-memory benchmark for tools/bench.py: test AUC of each table rule and optimizer-state format
against fp32 lazy Adam at equal steps, on MovieLens-100K (configs/movielens_dense.yaml) and on
Criteo-format data (configs/criteo.yaml over ``criteo-synthetic`` rows), several seeds each, and the
bytes of optimizer state each keeps per row of a field table (the memory report's held bytes, equal to
its estimate in every run)."""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "Adam, fp32"
LOW_PRECISION = ["embedding.type=quantized", "embedding.storage_format=int8", "embedding.mode=low_precision"]
# name -> overrides of train.table_optimizer (and the tables' learning rate where a rule needs its own, and their
# type where they are packed)
RUNS = {
    BASELINE: ["train.table_optimizer.name=adam"],
    "Adam, bf16": ["train.table_optimizer.name=adam", "train.table_optimizer.state_dtype=bfloat16"],
    "Adam, fp16": ["train.table_optimizer.name=adam", "train.table_optimizer.state_dtype=float16"],
    "Adam, 8-bit": ["train.table_optimizer.name=adam", "train.table_optimizer.state_dtype=int8"],
    "row-wise Adam": ["train.table_optimizer.name=rowwise_adam"],
    "row-wise Adam, 8-bit": ["train.table_optimizer.name=rowwise_adam", "train.table_optimizer.state_dtype=int8"],
    "row-wise Adam, beta1 0": ["train.table_optimizer.name=rowwise_adam", "train.table_optimizer.beta1=0.0"],
    "row-wise Adagrad, lr 0.02": ["train.table_optimizer.name=rowwise_adagrad", "train.embedding_learning_rate=0.02"],
    # tables packed from the start (low_precision), trained by rows with the same rules
    "int8 low_precision, row-wise Adagrad, lr 0.02": [*LOW_PRECISION, "train.table_optimizer.name=rowwise_adagrad",
                                                      "train.embedding_learning_rate=0.02"],
    "int8 low_precision, Adam, 8-bit": [*LOW_PRECISION, "train.table_optimizer.name=adam",
                                        "train.table_optimizer.state_dtype=int8"],
    # a cached table whose host store keeps int8 rows (a fifth of each table in the fp32 cache), by rows
    "cached, int8 host rows, row-wise Adagrad, lr 0.02": ["embedding.type=cached", "embedding.host_format=int8",
                                                          "embedding.cache_ratio=0.2",
                                                          "train.table_optimizer.name=rowwise_adagrad",
                                                          "train.embedding_learning_rate=0.02"],
}
DATASETS = {"movielens": "configs/movielens_dense.yaml", "criteo": "configs/criteo.yaml"}


def run_one(config: str, overrides: list[str], output_dir: Path) -> dict:
    """Train one configuration; its test AUC and the optimizer state its field tables hold per row."""
    from paddle_edo import load_config
    from paddle_edo.engine import Engine

    engine = Engine(load_config(ROOT / config, [f"train.output_dir={output_dir}", "train.log_every_steps=1000000",
                                                "monitor.enable=false", *overrides]))
    results = engine.fit()
    report = engine.memory_report()
    fields = [t for t in report.tables if t.name.startswith("embeddings.")]
    assert all(t.optimizer_estimated_bytes == t.optimizer_held_bytes for t in report.tables), "estimate != held"
    return {"test_auc": float(results["test_auc"]), "state_bytes": report.optimizer_held_bytes,
            "table_bytes": report.held_bytes, "dim": fields[0].dim,
            "state_bytes_per_row": sum(t.optimizer_held_bytes for t in fields) / sum(t.rows for t in fields)}


def criteo_data(rows: int, folder: Path) -> Path:
    data = folder / f"criteo-{rows}"
    if not data.is_dir():
        subprocess.run([sys.executable, str(ROOT / "tools" / "get_data.py"), "criteo-synthetic", "--rows", str(rows),
                        "--out", str(data)], check=True, capture_output=True)
    return data


def training_memory_benchmark(seeds: list[int], datasets: list[str], criteo_rows: int, cache: Path,
                              runs: list[str] | None = None) -> dict:
    names = runs or list(RUNS)
    result: dict = {"seeds": seeds, "criteo_rows": criteo_rows, "runs": {}}
    for dataset in datasets:
        extra = [f"data.files.path={criteo_data(criteo_rows, cache)}"] if dataset == "criteo" else []
        measured: dict[str, list[dict]] = {name: [] for name in names}
        for seed in seeds:
            for name in names:
                print(f"{dataset} seed {seed}: {name}", flush=True)
                with tempfile.TemporaryDirectory() as scratch:
                    measured[name].append(run_one(DATASETS[dataset], [*extra, *RUNS[name], f"train.seed={seed}"],
                                                  Path(scratch)))
        result["runs"][dataset] = measured
    return result


def summary(result: dict) -> dict[str, list[dict]]:
    """Per dataset and run: mean AUC, its spread, the mean paired delta against the baseline, bytes."""
    rows = {}
    for dataset, measured in result["runs"].items():
        base = [r["test_auc"] for r in measured[BASELINE]] if BASELINE in measured else None
        rows[dataset] = []
        for name, runs in measured.items():
            aucs = [r["test_auc"] for r in runs]
            deltas = [a - b for a, b in zip(aucs, base)] if base else [float("nan")]
            rows[dataset].append({"run": name, "auc_mean": float(np.mean(aucs)), "auc_std": float(np.std(aucs)),
                                  "delta_mean": float(np.mean(deltas)), "delta_worst": float(min(deltas)),
                                  "state_bytes": runs[0]["state_bytes"], "state_bytes_per_row": runs[0]["state_bytes_per_row"],
                                  "dim": runs[0]["dim"], "table_bytes": runs[0]["table_bytes"]})
    return rows


def markdown(result: dict) -> str:
    from paddle_edo.memory import format_bytes

    lines = []
    for dataset, rows in summary(result).items():
        base = next((r for r in rows if r["run"] == BASELINE), rows[0])
        title = "MovieLens-100K (DeepFM, 3 epochs)" if dataset == "movielens" else \
            f"Criteo-format, {result['criteo_rows']:,} criteo-synthetic rows (DeepFM, 1 epoch)"
        lines += [f"#### {title}; seeds {', '.join(map(str, result['seeds']))}", "",
                  f"| tables' rule | state bytes per row (dim {base['dim']}) | state held | Adam fp32's / this | tables held "
                  f"| test AUC (mean ± sd) | ΔAUC mean / worst | within 0.002 |", "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            within = "yes" if r["delta_worst"] >= -0.002 else "**no**"
            lines.append(f"| {r['run']} | {r['state_bytes_per_row']:.1f} | {format_bytes(r['state_bytes'])} | "
                         f"{base['state_bytes'] / max(r['state_bytes'], 1):.2f}x | {format_bytes(r['table_bytes'])} | "
                         f"{r['auc_mean']:.4f} ± "
                         f"{r['auc_std']:.4f} | {r['delta_mean']:+.4f} / {r['delta_worst']:+.4f} | {within} |")
        lines.append("")
    return "\n".join(lines).rstrip()
