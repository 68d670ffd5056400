"""Planner benchmark for tools/bench.py: for budgets of 1/4, 1/10 and 1/30 of the fp32 table bytes, the
planned model's test AUC and bytes beside each single method applied to every table (int8, int4 QAT,
hashing sized to the budget, QR, mixed dimensions), all trained with the same config and seed in one run;
and the planning time against a training run's (the fp32 run again after the plans, reusing memory as they do)."""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

from paddle_edo import load_config
from paddle_edo.data import load_dataset
from paddle_edo.engine import Engine
from paddle_edo.planner import plan_tables

ROOT = Path(__file__).resolve().parents[1]
FRACTIONS = (1 / 4, 1 / 10, 1 / 30)
SINGLE_METHODS = {
    "all int8": {"type": "quantized", "storage_format": "int8"},
    "all int4 qat": {"type": "quantized", "storage_format": "int4", "mode": "qat"},
    "all int2 qat": {"type": "quantized", "storage_format": "int2", "mode": "qat"},
    "all qr": {"type": "qr"},
    "all mixed_dim alpha 1": {"type": "mixed_dim", "alpha": 1.0},
}
DATA = {
    "movielens": ["data.name=movielens"],
    # 4 fields x 1,000,000 ids, Zipf(1.05), 300,000 samples, one epoch (as bench.py shared --data synthetic)
    "synthetic": ["data.name=synthetic", "data.synthetic.num_fields=4", "data.synthetic.rows_per_field=1000000",
                  "data.synthetic.num_samples=300000", "train.epochs=1", "train.batch_size=1024",
                  "train.learning_rate=0.002", "model.hidden_units=[64, 32]"],
}


def _config(data: str, output_dir: str, embedding: dict | None = None) -> dict:
    overrides = [*DATA[data], f"train.output_dir={output_dir}", "train.log_every_steps=100000", "monitor.enable=false"]
    config = load_config(ROOT / "configs" / "movielens_dense.yaml", overrides)
    if embedding is not None:
        config = load_config(base={**config, "embedding": {"dim": config["embedding"]["dim"], **embedding}})
    return config


def _train(config: dict, splits) -> dict:
    start = time.perf_counter()   # a training run builds its model (initialising the tables) and trains it
    engine = Engine(config, splits=splits)
    results = engine.fit()
    return {"test_auc": results["test_auc"], "test_logloss": results["test_logloss"],
            "held_bytes": engine.memory_report().held_bytes, "seconds": time.perf_counter() - start}


def planner_benchmark(data: str) -> dict:
    """Single methods and plans at each budget on ``data``, trained in one run."""
    with tempfile.TemporaryDirectory() as scratch:
        base = _config(data, f"{scratch}/fp32")
        splits = load_dataset(base["data"], None)
        runs = {"fp32": _train(base, splits)}
        print(f"  fp32: auc {runs['fp32']['test_auc']:.4f}, {runs['fp32']['held_bytes']:,} B, "
              f"{runs['fp32']['seconds']:.1f} s", flush=True)
        fp32_bytes = runs["fp32"]["held_bytes"]
        methods = dict(SINGLE_METHODS)
        for fraction in FRACTIONS:
            methods[f"all hash 1/{round(1 / fraction)}"] = {"type": "hash", "bucket_fraction": fraction}
        for name, embedding in methods.items():
            runs[name] = _train(_config(data, f"{scratch}/{len(runs)}", embedding), splits)
            print(f"  {name}: auc {runs[name]['test_auc']:.4f}, {runs[name]['held_bytes']:,} B", flush=True)
        plans = []
        for fraction in FRACTIONS:
            budget = int(fp32_bytes * fraction)
            plan = plan_tables(base, budget, splits=splits, progress=lambda line: None)
            planned = load_config(base={**plan.config, "train": {**plan.config["train"],
                                                                  "output_dir": f"{scratch}/plan{len(plans)}"}})
            result = {"budget": budget, "fraction": fraction, "planning_seconds": plan.seconds,
                      "plan": [{"table": c.table, "rows": c.rows, "choice": c.label, "bytes": c.bytes, "cost": c.cost}
                               for c in plan.choices], "checks": plan.checks, **_train(planned, splits)}
            plans.append(result)
            print(f"  plan 1/{round(1 / fraction)}: auc {result['test_auc']:.4f}, {result['held_bytes']:,} B "
                  f"(budget {budget:,}), planned in {plan.seconds:.1f} s", flush=True)
        # the first run of the process faults in fresh memory that later runs (and the plans) reuse: the
        # fp32 run again after the plans is the training run they compare with
        again = _train(_config(data, f"{scratch}/fp32_again"), splits)["seconds"]
        print(f"  fp32 again: {again:.1f} s (first run {runs['fp32']['seconds']:.1f} s)", flush=True)
    return {"data": data, "fp32_bytes": fp32_bytes, "runs": runs, "plans": plans,
            "training_seconds": again, "first_training_seconds": runs["fp32"]["seconds"]}


def markdown(result: dict) -> str:
    fp32 = result["fp32_bytes"]
    lines = [f"### {result['data']}", "", "| model | test AUC | table bytes | fraction of fp32 |", "|---|---|---|---|"]
    for name, run in result["runs"].items():
        lines.append(f"| {name} | {run['test_auc']:.4f} | {run['held_bytes']:,} | {run['held_bytes'] / fp32:.3f} |")
    for plan in result["plans"]:
        lines.append(f"| **plan, budget 1/{round(1 / plan['fraction'])}** | **{plan['test_auc']:.4f}** | "
                     f"{plan['held_bytes']:,} | {plan['held_bytes'] / fp32:.3f} |")
    lines += ["", "| budget | plan AUC | best single method within the budget (+10%) | its AUC | delta | best at any "
                  "bytes >= the plan's | its AUC | delta | planning s | training s (fp32 again; its first run) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for plan in result["plans"]:
        near = _best(result["runs"], plan["held_bytes"], 1.1 * plan["budget"])
        above = _best(result["runs"], plan["held_bytes"], float("inf"))
        cells = []
        for best in (near, above):
            single = result["runs"][best]["test_auc"] if best else float("nan")
            cells += [best or "none fits", f"{single:.4f}", f"{plan['test_auc'] - single:+.4f}"]
        lines.append(f"| 1/{round(1 / plan['fraction'])} ({plan['budget']:,} B) | {plan['test_auc']:.4f} | "
                     + " | ".join(cells) + f" | {plan['planning_seconds']:.1f} | {result['training_seconds']:.1f}; "
                     f"{result['first_training_seconds']:.1f} |")
    return "\n".join(lines)


def _best(runs: dict, low: int, high: float) -> str | None:
    """The single method of best test AUC whose bytes lie in [low, high]."""
    fitting = [n for n, r in runs.items() if n != "fp32" and low <= r["held_bytes"] <= high]
    return max(fitting, key=lambda n: runs[n]["test_auc"]) if fitting else None


def plot(results: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.5))
    for axis, result in zip(list(axes) if len(results) > 1 else [axes], results):
        fp32 = result["fp32_bytes"]
        for name, run in result["runs"].items():
            axis.scatter(run["held_bytes"] / fp32, run["test_auc"], color="grey")
            axis.annotate(name, (run["held_bytes"] / fp32, run["test_auc"]), fontsize=7)
        axis.plot([p["held_bytes"] / fp32 for p in result["plans"]], [p["test_auc"] for p in result["plans"]],
                  "o-", color="tab:red", label="plans (budgets 1/4, 1/10, 1/30)")
        for plan in result["plans"]:
            axis.axvline(plan["fraction"], color="tab:red", alpha=0.2, linestyle=":")
        axis.set_xscale("log")
        axis.set_xlabel("table bytes / fp32 bytes")
        axis.set_ylabel("test AUC")
        axis.set_title(result["data"])
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
