"""Train an experiment: python tools/train.py -c configs/X.yaml [-o key.path=value ...]"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools._cli import experiment_parser, fail_cleanly, results_table  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = experiment_parser(__doc__)
    args = parser.parse_args(argv)
    with fail_cleanly():
        from paddle_edo import load_config
        from paddle_edo.engine import Engine

        config = load_config(args.config, args.override)
        engine = Engine(config)
        print(engine.memory_report(), flush=True)
        results = engine.fit()
        if config["monitor"]["enable"]:
            logdir = config["monitor"]["logdir"] or Path(config["train"]["output_dir"]) / "vdl"
            print(f"VisualDL records in {logdir}: visualdl --logdir {logdir}")
        print(results_table(config, results, engine.memory_report(), engine.cache_statistics()))
        print(f"test auc {results['test_auc']:.4f}")
        print(f"test logloss {results['test_logloss']:.4f}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("GLOG_minloglevel", "2")
    sys.exit(main())
