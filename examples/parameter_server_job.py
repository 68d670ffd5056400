"""A parameter-server job: DeepFM on MovieLens-100K with its tables on a Fleet server, two trainers.

    python examples/parameter_server_job.py [--epochs 2] [--ps-mode async|geo] [--output-dir DIR]

Starts 1 server and 2 trainers on this machine (tools/launch.py runs ``paddle.distributed.launch`` with
a timeout and names any process that fails), then serves the result like any run: trainer 0 pulls the
tables from the servers into a checkpoint, which the dygraph engine evaluates here.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from paddle_edo import load_config
from paddle_edo.engine import Engine

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "ps_movielens.yaml"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--ps-mode", default="async", choices=("async", "geo"))
    parser.add_argument("--output-dir", default=None, help="default: a temporary folder")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        output = Path(args.output_dir or scratch)
        overrides = [f"train.epochs={args.epochs}", f"distributed.ps_mode={args.ps_mode}",
                     f"train.output_dir={output}"]
        command = [sys.executable, str(ROOT / "tools" / "launch.py"), "-c", str(CONFIG),
                   *(x for o in overrides for x in ("-o", o))]
        if subprocess.run(command).returncode != 0:
            raise SystemExit("the parameter-server job failed (its logs are named above)")
        results = json.loads((output / "results.json").read_text())
        served = Engine(load_config(CONFIG, [*overrides, "distributed.mode=none"]))
        served.load(output / "checkpoints" / "last.pdckpt", table_optimizer=False)  # evaluated, not resumed
        local = served.evaluate("test")["auc"]
    print(f"trainer 0's test AUC {results['test_auc']:.4f}; the pulled checkpoint in one process: {local:.4f}")
    return {"ps_test_auc": results["test_auc"], "checkpoint_test_auc": local}


if __name__ == "__main__":
    main()
