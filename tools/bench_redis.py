"""Redis benchmark for tools/bench.py: export rows/s of an fp32 and an int8 table into a private
redis-server, Redis's bytes per row for each, lookup latency of 1, 10 and 100 ids from Redis against the
memory-mapped file store, and the HTTP service at a fixed request rate with Redis behind it beside the
same service over the files (one run, side by side). The load test's client is aiohttp (the ``bench``
extra); without it, or with ``seconds`` 0, the service part is left out."""
from __future__ import annotations

import asyncio
import json
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

from tools.bench_serving import _load, clustered_rows, start_service

ROOT = Path(__file__).resolve().parents[1]
FORMATS = ("fp32", "int8")
LOOKUP_SIZES = (1, 10, 100)


def export_folders(rows: int, dim: int, scratch: Path) -> dict[str, Path]:
    """One export folder per format holding table ``items`` (the same clustered rows)."""
    import paddle

    from paddle_edo.nn import DenseEmbedding, QuantizedEmbedding
    from paddle_edo.serving import export_tables

    weight = clustered_rows(rows, dim, seed=6)
    folders = {}
    for storage_format in FORMATS:
        model = paddle.nn.Layer()
        if storage_format == "fp32":
            model.items = DenseEmbedding(rows, dim)
            model.items.weight.set_value(weight)
        else:
            model.items = QuantizedEmbedding(rows, dim, storage_format, weight=paddle.to_tensor(weight), packed=True)
        folders[storage_format] = scratch / storage_format
        export_tables(model, folders[storage_format], values={"items": [f"item{i}" for i in range(rows)]})
    return folders


def export_and_memory(folders: dict[str, Path], url: str, repeats: int) -> dict:
    """Median export seconds (rows/s, MB/s) of each format, and the bytes Redis holds per row."""
    import redis

    from paddle_edo.serving import export_to_redis, open_redis_tables

    client = redis.Redis.from_url(url)
    result = {}
    for storage_format, folder in folders.items():
        seconds, values_seconds, done = [], [], None
        for _ in range(repeats):  # keep=1: each export replaces the last, so memory is one version's
            start = time.perf_counter()
            done = export_to_redis(folder, url, namespace=storage_format, keep=1)
            seconds.append(time.perf_counter() - start)
            values_seconds.append(done.values_seconds)
        table = open_redis_tables(url, storage_format)["items"]
        median = float(np.median(seconds))
        result[storage_format] = {"export_s": median, "rows_per_s": table.num_rows / median,
                                  "values_s": float(np.median(values_seconds)),
                                  "mb_per_s": done.bytes_sent / median / 1e6, "bytes_sent": done.bytes_sent,
                                  "redis_bytes": table.held_bytes(), "bytes_per_row": table.held_bytes() / table.num_rows,
                                  "file_bytes": (folder / table.entry["file"]).stat().st_size}
    result["used_memory"] = int(client.info("memory")["used_memory"])
    result["fp32_vs_int8_redis_bytes"] = result["fp32"]["redis_bytes"] / result["int8"]["redis_bytes"]
    return result


def lookup_latency(folders: dict[str, Path], url: str, lookups: int) -> list[dict]:
    """p50 / p99 ms of ``rows(ids)`` for uniform ids, Redis against the memory-mapped file store (warm)."""
    from paddle_edo.serving import TableStore, open_redis_tables

    rng = np.random.default_rng(7)
    results = []
    for storage_format, folder in folders.items():
        stores = {"redis": open_redis_tables(url, storage_format)["items"], "mmap": TableStore.open(folder, "items")}
        rows = stores["mmap"].num_rows
        stores["mmap"].all_rows()  # the file in the page cache, as a serving box's warm store
        for size in LOOKUP_SIZES:
            batches = [rng.integers(0, rows, size) for _ in range(lookups)]
            for name, store in stores.items():
                for ids in batches[:20]:  # warm-up
                    store.rows(ids)
                times = []
                for ids in batches:
                    start = time.perf_counter()
                    store.rows(ids)
                    times.append(time.perf_counter() - start)
                ms = np.asarray(times) * 1000
                results.append({"format": storage_format, "ids": size, "store": name,
                                "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99))})
    return results


def service_at_rate(folders: dict[str, Path], url: str, rate: float, seconds: float) -> list[dict]:
    """The int8 table served from Redis and from its files, in turn, at ``rate`` requests/s of 1 and 10
    ids each."""
    rng = np.random.default_rng(8)
    rows = json.loads((folders["int8"] / "tables.json").read_text())["tables"]["items"]["rows"]
    results = []
    for store, arguments in (("redis", ["--redis", url, "--namespace", "int8"]),
                             ("mmap", ["--tables", str(folders["int8"])])):
        server, base = start_service(arguments)
        try:
            for size in (1, 10):
                bodies = [{"table": "items", "ids": rng.integers(0, rows, size).tolist()} for _ in range(10_000)]
                load = asyncio.run(_load(base + "/rows", bodies, rate, seconds, 64))
                results.append({"store": store, "ids": size, **load})
            with urllib.request.urlopen(base + "/stats") as response:
                stats = json.loads(response.read())
            for measured in results[-2:]:
                measured["server_errors"] = stats["failed"] + stats["unavailable"]
        finally:
            server.terminate()
            server.communicate(timeout=30)
    return results


def redis_benchmark(rows: int, dim: int, repeats: int, lookups: int, rate: float, seconds: float) -> dict:
    from paddle_edo.serving import LocalRedisServer

    with tempfile.TemporaryDirectory() as scratch, \
            LocalRedisServer(settings={"appendonly": "no"}) as server:
        scratch = Path(scratch)
        print(f"tables: {rows:,} x {dim}, fp32 and int8", flush=True)
        folders = export_folders(rows, dim, scratch)
        print("export", flush=True)
        result = {"rows": rows, "dim": dim, "redis_version": redis_server_version(server.url),
                  "export": export_and_memory(folders, server.url, repeats)}
        print("lookups", flush=True)
        result["lookups"] = lookup_latency(folders, server.url, lookups)
        try:
            import aiohttp  # noqa: F401
            has_client = True
        except ImportError:
            has_client = False
        if seconds > 0 and has_client:
            print(f"service at {rate:.0f} requests/s", flush=True)
            result["service"] = service_at_rate(folders, server.url, rate, seconds)
        else:
            result["service"] = []
            result["service_skipped"] = "seconds is 0" if seconds <= 0 else "aiohttp is not installed (the bench extra)"
        result["settings"] = {"rate": rate, "seconds": seconds, "repeats": repeats, "lookups": lookups,
                              "redis": "private redis-server on 127.0.0.1, no persistence"}
    return result


def redis_server_version(url: str) -> str:
    import redis

    return str(redis.Redis.from_url(url).info("server")["redis_version"])


def markdown(result: dict) -> str:
    from paddle_edo.memory import format_bytes

    export = result["export"]
    lines = [f"#### Redis {result['redis_version']}: export of a {result['rows']:,} x {result['dim']} table", "",
             "| format | export | of which raw values | rows/s | MB/s sent | Redis bytes | bytes per row | file bytes |",
             "|---|---|---|---|---|---|---|---|"]
    for storage_format in FORMATS:
        e = export[storage_format]
        lines.append(f"| {storage_format} | {e['export_s']:.2f} s | {e['values_s']:.2f} s | {e['rows_per_s']:,.0f} | {e['mb_per_s']:,.0f} | "
                     f"{format_bytes(e['redis_bytes'])} | {e['bytes_per_row']:.1f} | {format_bytes(e['file_bytes'])} |")
    lines += ["", f"fp32 / int8 bytes in Redis: {export['fp32_vs_int8_redis_bytes']:.2f}x (raw values' hashes not "
                  f"included: they are the field's, the same for every format)", "",
              f"#### Lookup latency, uniform ids, {result['settings']['lookups']} lookups each (one client thread)", "",
              "| format | ids | Redis p50 | Redis p99 | mmap p50 | mmap p99 |", "|---|---|---|---|---|---|"]
    by = {(r["format"], r["ids"], r["store"]): r for r in result["lookups"]}
    for storage_format in FORMATS:
        for size in LOOKUP_SIZES:
            r, m = by[(storage_format, size, "redis")], by[(storage_format, size, "mmap")]
            lines.append(f"| {storage_format} | {size} | {r['p50_ms']:.3f} ms | {r['p99_ms']:.3f} ms | "
                         f"{m['p50_ms']:.3f} ms | {m['p99_ms']:.3f} ms |")
    if result["service"]:
        lines += ["", f"#### Service, int8 table, {result['settings']['rate']:.0f} requests/s for "
                      f"{result['settings']['seconds']:.0f} s from localhost (aiohttp)", "",
                  "| store | ids per request | requests | failed | p50 | p99 | max |", "|---|---|---|---|---|---|---|"]
        for s in result["service"]:
            lines.append(f"| {s['store']} | {s['ids']} | {s['requests']:,} | {s['failures']} | {s['p50_ms']:.2f} ms | "
                         f"{s['p99_ms']:.2f} ms | {s['max_ms']:.1f} ms |")
    else:
        lines += ["", f"service: not measured ({result['service_skipped']})"]
    return "\n".join(lines)
