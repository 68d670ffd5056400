"""Serve trained tables from Redis: export a run's tables as a version of a namespace, read rows from Redis
as from the files, switch to a retrained version atomically while a reader keeps reading, and see what
Redis holds per row.

    python examples/redis_serving.py [--rows 20000] [--epochs 1] [--redis redis://HOST:PORT/DB]

Trains DeepFM twice on a raw click log (tools/get_data.py csv-example) with int8 tables, exports each run's
tables to files and then to Redis (a private redis-server unless --redis names one), and compares the
Redis store with the memory-mapped file store.
"""
from __future__ import annotations

import argparse
import tempfile
import threading
from pathlib import Path

import numpy as np
import pyarrow.csv as pcsv

from paddle_edo import load_config
from paddle_edo.data.synthetic import make_raw_clicks
from paddle_edo.engine import Engine
from paddle_edo.serving import LocalRedisServer, export_tables, export_to_redis, open_redis_tables, open_tables

ROOT = Path(__file__).resolve().parents[1]


def trained_tables(data: Path, folder: Path, epochs: int, seed: int) -> Path:
    """Train the CSV example with int8 tables and export them with their raw values; returns the folder."""
    config = load_config(ROOT / "configs" / "csv_example.yaml", [
        f"data.files.path={data}", f"train.output_dir={folder / 'run'}", f"train.epochs={epochs}",
        f"train.seed={seed}", "train.log_every_steps=1000000", "embedding.type=quantized",
        "embedding.storage_format=int8", "embedding.min_rows=100"])
    engine = Engine(config)
    print(f"run {seed}: test AUC {engine.fit()['test_auc']:.4f}")
    plan = engine.splits.plan
    export_tables(engine.model, folder / "tables", plan.vocabularies, {c.name: c.ids for c in plan.source.categorical})
    return folder / "tables"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--redis", help="a Redis URL (default: a private redis-server on a free port)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        pcsv.write_csv(make_raw_clicks(args.rows), scratch / "clicks.csv")
        first = trained_tables(scratch / "clicks.csv", scratch / "first", args.epochs, seed=1)
        second = trained_tables(scratch / "clicks.csv", scratch / "second", args.epochs, seed=2)
        local = None if args.redis else LocalRedisServer().start()
        url = args.redis or local.url
        try:
            done = export_to_redis(first, url, namespace="shop")
            print(f"exported version {done.version}: {done.rows:,} rows in {done.seconds:.2f} s")
            users = open_redis_tables(url, namespace="shop")["embeddings.user"]
            files = open_tables(first)["embeddings.user"]
            ids, known = users.ids_of_values(["u00000", "someone-new"])
            same = np.array_equal(users.rows(np.arange(users.num_rows)), files.rows(np.arange(files.num_rows)))
            print(f"u00000 -> id {ids[0]}, someone-new -> id {ids[1]} (known: {known.tolist()}); "
                  f"every row equals the file store's: {same}")
            print(f"Redis holds {users.held_bytes() / users.num_rows:.1f} bytes a row of the {users.format} user table "
                  f"({users.dim} values), the file {files.path.stat().st_size / files.num_rows:.1f}")

            answers, stop = [], threading.Event()

            def read() -> None:
                while not stop.is_set():
                    answers.append(users.rows(np.arange(users.num_rows)))

            reader = threading.Thread(target=read)
            reader.start()
            done = export_to_redis(second, url, namespace="shop")  # written beside version 1, then switched
            stop.set()
            reader.join()
            versions = [open_tables(f)["embeddings.user"].rows(np.arange(users.num_rows)) for f in (first, second)]
            whole = all(any(np.array_equal(a, v) for v in versions) for a in answers)
            print(f"exported version {done.version} while a reader read {len(answers)} times: every answer one "
                  f"version whole: {whole}; removed old versions: {list(done.removed) or 'none'}")
            users.rows([0])  # the reader moves to the current version at its next lookup
            print(f"the reader now serves version {users.version}: "
                  f"{np.array_equal(users.rows(np.arange(users.num_rows)), versions[1])}")
        finally:
            if local is not None:
                local.close()


if __name__ == "__main__":
    main()
