"""Run an exported model with Paddle Inference on a data split and score it:
python tools/infer.py -c configs/X.yaml [-o key=value ...] [--split test]"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools._cli import experiment_parser, fail_cleanly  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = experiment_parser(__doc__)
    parser.add_argument("--split", default="test", choices=("train", "valid", "test"))
    parser.add_argument("--output", help="also save the click probabilities here (.npy)")
    args = parser.parse_args(argv)
    with fail_cleanly(args.debug):
        import numpy as np

        from paddle_edo import load_config
        from paddle_edo.config import export_prefix
        from paddle_edo.data import load_dataset
        from paddle_edo.export import Predictor
        from paddle_edo.metrics import auc, logloss
        from paddle_edo.runtime import set_num_threads

        config = load_config(args.config, args.override)
        set_num_threads(config["train"]["num_threads"])
        table = getattr(load_dataset(config["data"]), args.split)
        predictor = Predictor(export_prefix(config), config["train"]["device"], config["train"]["num_threads"])
        size = config["export"]["batch_size"]
        logits = [predictor.run([table.ids[f.name][i:i + size] for f in table.fields])
                  for i in range(0, len(table), size)]
        probabilities = 1.0 / (1.0 + np.exp(-np.concatenate(logits).astype(np.float64)))
        if args.output:
            np.save(args.output, probabilities)
        print(f"{args.split} auc {auc(table.labels, probabilities):.4f}")
        print(f"{args.split} logloss {logloss(table.labels, probabilities):.4f}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("GLOG_minloglevel", "2")
    sys.exit(main())
