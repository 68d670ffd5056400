"""Serve trained tables: export them as plain files, open them memory-mapped without Paddle, find nearest
rows with FAISS, and answer HTTP requests for rows and neighbours.

    python examples/serve_tables.py [--rows 20000] [--epochs 2]

Trains DeepFM on a raw click log (tools/get_data.py csv-example) with an int8 user table, exports every
table (tables.json, .npy, packed .bin, the raw values of each field), then looks rows up by raw value,
lists the users nearest to one, and runs the Starlette service on a local port for a few requests.
"""
from __future__ import annotations

import argparse
import json
import socket
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pyarrow.csv as pcsv
import uvicorn

from paddle_edo import load_config
from paddle_edo.data.synthetic import make_raw_clicks
from paddle_edo.engine import Engine
from paddle_edo.serving import IndexSpec, NeighbourIndex, create_app, export_tables, open_tables

ROOT = Path(__file__).resolve().parents[1]


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        pcsv.write_csv(make_raw_clicks(args.rows), scratch / "clicks.csv")
        config = load_config(ROOT / "configs" / "csv_example.yaml", [
            f"data.files.path={scratch / 'clicks.csv'}", f"train.output_dir={scratch / 'run'}",
            f"train.epochs={args.epochs}", "train.log_every_steps=1000000",
            "embedding.type=quantized", "embedding.storage_format=int8", "embedding.min_rows=100"])
        engine = Engine(config)
        print(f"trained: test AUC {engine.fit()['test_auc']:.4f}")
        plan = engine.splits.plan
        folder = scratch / "tables"
        export_tables(engine.model, folder, plan.vocabularies, {c.name: c.ids for c in plan.source.categorical})

        tables = open_tables(folder, verify=True)  # numpy memory maps: nothing is read yet
        users = tables["embeddings.user"]
        print(f"exported: {', '.join(f'{n} ({t.kind}, {t.format})' for n, t in list(tables.items())[:3])}, ...")
        print(f"user table: {users.num_rows:,} x {users.dim} {users.format}, {users.path.stat().st_size:,} bytes "
              f"on disk, {users.resident_bytes():,} resident after opening")
        ids, known = users.ids_of_values(["u00000", "someone-new"])
        print(f"u00000 -> id {ids[0]}, someone-new -> id {ids[1]} (known: {known.tolist()})")

        index = NeighbourIndex.build(users.all_rows(), IndexSpec("cosine"), table=users.name)
        scores, found = index.search(users.rows(ids[:1]), 4)
        print("users nearest to u00000: " + ", ".join(f"{users.value_of(int(i))} ({s:.3f})"
                                                      for s, i in zip(scores[0], found[0]) if i != ids[0])[:200])

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(create_app(tables, {users.name: index}), host="127.0.0.1", port=port,
                                               log_level="error"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        rows = post(url + "/rows", {"table": "embeddings.city", "values": ["北京", "火星"]})
        print(f"POST /rows 北京, 火星 -> ids {rows['ids']}, known {rows['known']}, {len(rows['rows'][0])} numbers each")
        near = post(url + "/neighbors", {"table": users.name, "value": "u00000", "k": 3})
        print(f"POST /neighbors u00000 -> {[n['value'] for n in near['neighbors']]}")
        with urllib.request.urlopen(url + "/stats") as response:
            stats = json.loads(response.read())
        print(f"GET /stats -> {stats['requests']} requests, {stats['failed']} failed, p99 {stats['latency_ms']['p99']:.2f} ms")
        server.should_exit = True
        thread.join()
        print("service stopped")


if __name__ == "__main__":
    main()
