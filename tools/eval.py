"""Evaluate a trained experiment: python tools/eval.py -c configs/X.yaml [--checkpoint PATH] [--split test]"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools._cli import fail_cleanly, trained_engine, trained_experiment_parser  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = trained_experiment_parser(__doc__)
    parser.add_argument("--split", default="test", choices=("train", "valid", "test"))
    args = parser.parse_args(argv)
    with fail_cleanly(args.debug):
        _, engine = trained_engine(args)
        metrics = engine.evaluate(args.split)
        print(f"{args.split} auc {metrics['auc']:.4f}")
        print(f"{args.split} logloss {metrics['logloss']:.4f}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("GLOG_minloglevel", "2")
    sys.exit(main())
