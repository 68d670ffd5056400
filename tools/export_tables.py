"""Export every table of a trained experiment as plain files a serving box opens without Paddle:
python tools/export_tables.py -c configs/X.yaml [-o key=value ...] [--checkpoint PATH] [--out DIR]
                               [--redis redis://HOST:PORT/DB [--namespace NS] [--keep 2]]

fp32 tables go to <table>.npy, packed quantized ones to <table>.bin (codes and row parameters), hash
tables as their shared table plus the hash, other composite tables as their materialised rows; the
values of each field (the data plan's vocabularies, a text run's word and character vocabularies) go
beside them, and tables.json lists it all with checksums. Default folder: <train.output_dir>/tables.
With --redis, the folder is then written into Redis as a new version of the namespace, made current in
one atomic step; versions beyond --keep are removed after the switch."""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools._cli import fail_cleanly, trained_engine, trained_experiment_parser  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = trained_experiment_parser(__doc__)
    parser.add_argument("--out", help="default: <train.output_dir>/tables")
    parser.add_argument("--redis", metavar="URL", help="also write the tables into Redis at this URL "
                                                       "(redis://HOST:PORT/DB, rediss://..., unix://PATH)")
    parser.add_argument("--namespace", default="paddle_edo", help="the Redis keys' prefix (default paddle_edo)")
    parser.add_argument("--keep", type=int, default=2, help="versions kept in Redis, the current one included")
    args = parser.parse_args(argv)
    with fail_cleanly(args.debug):
        from paddle_edo.memory import format_bytes
        from paddle_edo.serving import export_tables, open_tables

        config, engine = trained_engine(args)
        plan = engine.splits.plan
        values = {**engine.splits.values, **engine.splits.vocabularies}
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
        if args.redis:
            from paddle_edo.serving import export_to_redis

            done = export_to_redis(folder, args.redis, args.namespace, args.keep)
            state = "is current" if done.current else "was written, but a newer version is current"
            print(f"redis: version {done.version} of namespace {done.namespace!r} at {done.url} {state} "
                  f"({done.rows:,} rows, {format_bytes(done.bytes_sent)} in {done.seconds:.1f} s"
                  + (f"; removed version {', '.join(map(str, done.removed))}" if done.removed else "") + ")")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("GLOG_minloglevel", "2")
    sys.exit(main())
