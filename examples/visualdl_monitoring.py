"""Watch the sparse gradients of every table in VisualDL while a model trains.

    python examples/visualdl_monitoring.py [--epochs 1] [--logdir DIR]
    visualdl --logdir DIR          # then open the Scalars, Histograms and Text tabs

Trains DeepFM on MovieLens-100K with ``monitor.enable: true``: per table, rows touched per step,
coverage, rows never updated, row-gradient norms (mean, max, p99, histograms), NaN/Inf rows, the
update-to-weight ratio, bytes per table, and alerts. The script reads the log back and prints the
last value of a few of its series.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from visualdl import LogReader

from paddle_edo import load_config
from paddle_edo.engine import Engine

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "movielens_dense.yaml"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--logdir", default=None, help="default: a temporary folder")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        logdir = Path(args.logdir or scratch) / "vdl"
        config = load_config(CONFIG, [f"train.epochs={args.epochs}", f"train.output_dir={scratch}/run",
                                      "monitor.enable=true", f"monitor.logdir={logdir}", "monitor.every_n_steps=10"])
        Engine(config).fit()
        (log,) = logdir.glob("vdlrecords*")
        reader = LogReader(file_path=str(log))
        scalars = sorted(reader.get_tags().get("scalar", []))
        last = {tag: reader.get_data("scalar", tag)[-1].value for tag in scalars}
    print(f"{len(scalars)} scalar series in {logdir}, for example:")
    for tag in [t for t in scalars if t.startswith("sparse/embeddings.item_id/")] + \
            [t for t in scalars if not t.startswith("sparse/")][:4]:
        print(f"  {tag}: {last[tag]:.4g}")
    return last


if __name__ == "__main__":
    main()
