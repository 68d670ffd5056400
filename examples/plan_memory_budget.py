"""Fit a memory budget: plan each table's compression, train the plan, and check what it holds.

    python examples/plan_memory_budget.py [--fraction 0.1] [--epochs 3]

Plans DeepFM on MovieLens-100K (configs/movielens_dense.yaml) for a budget of ``--fraction`` of its fp32
table bytes, prints the plan (table, rows, choice, bytes before and after, estimated cost), trains the
planned config as tools/train.py would, and compares its test AUC and held bytes with fp32 and with
int8 on every table.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from paddle_edo import load_config
from paddle_edo.engine import Engine
from paddle_edo.planner import plan_tables

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "movielens_dense.yaml"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fraction", type=float, default=0.1, help="budget as a share of the fp32 bytes")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        overrides = [f"train.epochs={args.epochs}", "monitor.enable=false", "train.log_every_steps=100000"]
        config = load_config(CONFIG, [*overrides, f"train.output_dir={scratch}/fp32"])
        fp32 = Engine(config)
        results["fp32"] = (fp32.fit()["test_auc"], fp32.memory_report().held_bytes)
        budget = int(results["fp32"][1] * args.fraction)
        plan = plan_tables(config, budget, splits=fp32.splits, progress=lambda line: None)
        print(plan.table())
        path = plan.write(f"{scratch}/plan.yaml")                    # what tools/train.py -c runs
        for name, section in (("plan", None), ("int8 everywhere", {"type": "quantized", "storage_format": "int8"})):
            run = load_config(path, [f"train.output_dir={scratch}/{len(results)}"]) if section is None else \
                load_config(CONFIG, [*overrides, f"train.output_dir={scratch}/{len(results)}",
                                     *(f"embedding.{k}={v}" for k, v in section.items())])
            engine = Engine(run, splits=fp32.splits)
            results[name] = (engine.fit()["test_auc"], engine.memory_report().held_bytes)
    print(f"budget {budget:,} bytes ({args.fraction:g} of fp32)")
    print("| tables | test AUC | table bytes | within the budget |")
    for name, (test_auc, held) in results.items():
        print(f"| {name} | {test_auc:.4f} | {held:,} | {'yes' if held <= budget else 'no'} |")
    return {"budget": budget, "results": results, "plan": plan}


if __name__ == "__main__":
    main()
