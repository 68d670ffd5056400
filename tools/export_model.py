"""Export a trained experiment for Paddle Inference:
python tools/export_model.py -c configs/X.yaml [-o key=value ...] [--checkpoint PATH]"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools._cli import fail_cleanly, trained_engine, trained_experiment_parser  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = trained_experiment_parser(__doc__)
    args = parser.parse_args(argv)
    with fail_cleanly(args.debug):
        from paddle_edo.config import export_prefix
        from paddle_edo.export import export_model, program_file

        config, engine = trained_engine(args)
        prefix = export_model(engine.model, engine.model.input_specs(), export_prefix(config),
                              config["export"]["fused_kernels"])
        print(engine.memory_report())
        print(f"exported {program_file(prefix)} and {prefix}.pdiparams")
        if engine.splits.plan is not None:  # serving maps raw values with the run's vocabularies
            print(f"and the data plan (vocabularies, statistics) in {engine.splits.plan.save(prefix.parent / 'data')}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("GLOG_minloglevel", "2")
    sys.exit(main())
