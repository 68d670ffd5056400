"""Export every table of a trained experiment as plain files a serving box opens without Paddle:
python tools/export_tables.py -c configs/X.yaml [-o key=value ...] [--checkpoint PATH] [--out DIR]

fp32 tables go to <table>.npy, packed quantized ones to <table>.bin (codes and row parameters), hash
tables as their shared table plus the hash, other composite tables as their materialised rows; the
values of each field (the data plan's vocabularies, a text run's word and character vocabularies) go
beside them, and tables.json lists it all with checksums. Default folder: <train.output_dir>/tables."""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools._cli import fail_cleanly, trained_engine, trained_experiment_parser  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = trained_experiment_parser(__doc__)
    parser.add_argument("--out", help="default: <train.output_dir>/tables")
    args = parser.parse_args(argv)
    with fail_cleanly(args.debug):
        from paddle_edo.memory import format_bytes
        from paddle_edo.serving import export_tables, open_tables

        config, engine = trained_engine(args)
        plan = engine.splits.plan
        values = dict(engine.splits.vocabularies)
        id_sources = {}
        if plan is not None:
            values.update(plan.vocabularies)
            id_sources = {column.name: column.ids for column in plan.source.categorical}
        folder = Path(args.out or Path(config["train"]["output_dir"]) / "tables")
        manifest = export_tables(engine.model, folder, values, id_sources)
        for name, store in open_tables(folder).items():
            print(f"{name}: {store.kind} {store.num_rows:,} x {store.dim} {store.format}, "
                  f"{format_bytes(store.path.stat().st_size)} in {store.path.name}"
                  + (", values by raw value" if store.value_ids is not None else ""))
        print(f"wrote {manifest}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("GLOG_minloglevel", "2")
    sys.exit(main())
