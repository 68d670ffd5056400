"""Run an exported model with Paddle Inference on a data split, or on raw rows of the user's files
(mapped by the run's saved vocabularies and statistics), and score it:
python tools/infer.py -c configs/X.yaml [-o key=value ...] [--split test | --input FILE] [--output P.npy]"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools._cli import experiment_parser, fail_cleanly  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = experiment_parser(__doc__)
    parser.add_argument("--split", default="test", choices=("train", "valid", "test"))
    parser.add_argument("--input", help="raw rows to score instead of a split: a file, folder or glob in the "
                                        "layout of data.files (data.name csv, parquet or criteo); the label "
                                        "column may be absent")
    parser.add_argument("--output", help="also save the click probabilities here (.npy)")
    args = parser.parse_args(argv)
    with fail_cleanly(args.debug):
        import numpy as np

        from paddle_edo import load_config
        from paddle_edo.config import export_prefix
        from paddle_edo.data import load_dataset, load_rows
        from paddle_edo.data.options import TABULAR_NAMES
        from paddle_edo.export import Predictor
        from paddle_edo.metrics import auc, logloss
        from paddle_edo.runtime import set_num_threads
        from paddle_edo.schema import ConfigError

        config = load_config(args.config, args.override)
        set_num_threads(config["train"]["num_threads"])
        prefix = export_prefix(config)
        # the export's copy of the data plan, else the run's own
        state_dir = prefix.parent / "data"
        if not state_dir.is_dir():
            state_dir = Path(config["train"]["output_dir"]) / "data"
        if args.input:
            if config["data"]["name"] not in TABULAR_NAMES:
                raise ConfigError(f"--input needs data.name csv, parquet or criteo (raw rows mapped by the run's "
                                  f"data plan), not {config['data']['name']!r}")
            table, labelled = load_rows(config["data"], state_dir, args.input)
        else:
            table, labelled = getattr(load_dataset(config["data"], state_dir), args.split), True
        predictor = Predictor(prefix, config["train"]["device"], config["train"]["num_threads"])
        size = config["export"]["batch_size"]
        logits, labels = [], []
        for batch in table.iter_batches(size, shuffle=False, seed=0, epoch=0):  # a streamed split: one pass
            logits.append(predictor.run([batch[f.name] for f in table.fields]
                                        + ([batch["dense"]] if table.dense_features else [])))
            labels.append(batch["label"])
        probabilities = 1.0 / (1.0 + np.exp(-np.concatenate(logits).astype(np.float64)))
        labels = np.concatenate(labels)
        if args.output:
            np.save(args.output, probabilities)
        where = args.input or args.split
        print(f"{where}: {len(probabilities)} rows scored")
        if labelled:
            print(f"{where} auc {auc(labels, probabilities):.4f}")
            print(f"{where} logloss {logloss(labels, probabilities):.4f}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("GLOG_minloglevel", "2")
    sys.exit(main())
