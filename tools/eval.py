"""Evaluate a trained experiment: python tools/eval.py -c configs/X.yaml [--checkpoint PATH] [--split test]"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools._cli import experiment_parser, fail_cleanly  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = experiment_parser(__doc__)
    parser.add_argument("--checkpoint", help="default: <train.output_dir>/checkpoints/last.pdckpt")
    parser.add_argument("--split", default="test", choices=("train", "valid", "test"))
    args = parser.parse_args(argv)
    with fail_cleanly(args.debug):
        from paddle_edo import load_config
        from paddle_edo.engine import Engine

        engine = Engine(load_config(args.config, args.override))
        engine.load_for_serving(args.checkpoint or engine.checkpoint_path)
        metrics = engine.evaluate(args.split)
        print(f"{args.split} auc {metrics['auc']:.4f}")
        print(f"{args.split} logloss {metrics['logloss']:.4f}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("GLOG_minloglevel", "2")
    sys.exit(main())
