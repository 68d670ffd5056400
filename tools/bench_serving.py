"""Serving benchmark for tools/bench.py: export and reopen a large table (time, resident bytes, packed
size), FAISS retrieval against exact search (recall@10, queries/s single thread, build time, index
bytes), and the HTTP service under a fixed request rate from localhost (latency percentiles, failures)
and at saturation. The load test's client is aiohttp (the ``bench`` extra)."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def clustered_rows(rows: int, dim: int, seed: int = 0, centres: int = 1000) -> np.ndarray:
    """Rows around ``centres`` random centres, as trained embedding tables cluster (uniform random
    vectors, with no neighbours nearer than the rest, are the case no index is built for)."""
    rng = np.random.default_rng(seed)
    middle = rng.normal(size=(centres, dim)).astype(np.float32)
    out = np.empty((rows, dim), dtype=np.float32)
    for start in range(0, rows, 1 << 20):
        stop = min(start + (1 << 20), rows)
        out[start:stop] = middle[rng.integers(0, centres, stop - start)] + \
            0.5 * rng.normal(size=(stop - start, dim)).astype(np.float32)
    return out


def export_benchmark(rows: int, dim: int, folder: Path, repeats: int = 7) -> dict:
    """Export an fp32 and an int8 table of rows x dim; reopen each (median ms), resident bytes after
    opening and after reading 1,000 rows, file sizes."""
    import paddle

    from paddle_edo.nn import DenseEmbedding, QuantizedEmbedding
    from paddle_edo.serving import TableStore, export_tables

    weight = clustered_rows(rows, dim)
    model = paddle.nn.Layer()
    model.fp32 = DenseEmbedding(rows, dim)
    model.fp32.weight.set_value(weight)
    model.int8 = QuantizedEmbedding(rows, dim, "int8", weight=paddle.to_tensor(weight), packed=True)
    del weight
    start = time.perf_counter()
    export_tables(model, folder)
    export_seconds = time.perf_counter() - start
    del model
    result = {"rows": rows, "dim": dim, "export_seconds": export_seconds}
    ids = np.random.default_rng(1).integers(0, rows, 1000)
    result["cold_cache"] = drop_page_cache()
    for name in ("fp32", "int8"):
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            store = TableStore.open(folder, name)
            times.append(time.perf_counter() - start)
        opened = store.resident_bytes()
        start = time.perf_counter()
        store.rows(ids)
        read_ms = 1000 * (time.perf_counter() - start)
        result[name] = {"file_bytes": store.path.stat().st_size, "open_ms": 1000 * float(np.median(times)),
                        "resident_after_open": opened, "resident_after_1000_rows": store.resident_bytes(),
                        "read_1000_rows_ms": read_ms}
    result["fp32_vs_int8_bytes"] = result["fp32"]["file_bytes"] / result["int8"]["file_bytes"]
    return result


def drop_page_cache() -> bool:
    """Empty the kernel's page cache (root only), so that reopening reads from disk as on a fresh box: a
    file just written sits in the cache in large folios, and a fault then maps a whole folio."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1")
        return True
    except OSError:
        return False


def retrieval_benchmark(rows: int, dim: int, queries: int = 1000) -> dict:
    """HNSW (a few efSearch values) and IVF-SQ8 against exact inner-product search on one thread."""
    import faiss

    from paddle_edo.serving import IndexSpec, NeighbourIndex

    faiss.omp_set_num_threads(1)
    vectors = clustered_rows(rows, dim, seed=2)
    rng = np.random.default_rng(3)
    probes = vectors[rng.integers(0, rows, queries)] + 0.1 * rng.normal(size=(queries, dim)).astype(np.float32)
    start = time.perf_counter()
    exact = NeighbourIndex.build(vectors, IndexSpec("ip", "flat"))
    exact_build = time.perf_counter() - start
    start = time.perf_counter()
    _, truth = exact.search(probes, 10)
    exact_qps = queries / (time.perf_counter() - start)
    results = [{"index": "exact (flat)", "build_s": exact_build, "bytes": exact.nbytes(), "qps": exact_qps,
                "recall_at_10": 1.0, "speedup": 1.0}]
    faiss.omp_set_num_threads(2)  # building may use both cores; searching is timed on one
    for label, spec, knobs in (("HNSW32", IndexSpec("ip", "hnsw"), [32, 64, 128]),
                               ("IVF-SQ8", IndexSpec("ip", "ivf", "sq8"), [8, 32])):
        start = time.perf_counter()
        index = NeighbourIndex.build(vectors, spec)
        build = time.perf_counter() - start
        faiss.omp_set_num_threads(1)
        for knob in knobs:
            if spec.kind == "hnsw":
                faiss.downcast_index(index.index).hnsw.efSearch = knob
            else:
                faiss.extract_index_ivf(index.index).nprobe = knob
            start = time.perf_counter()
            _, found = index.search(probes, 10)
            qps = queries / (time.perf_counter() - start)
            recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, truth)]))
            results.append({"index": f"{label}, {'efSearch' if spec.kind == 'hnsw' else 'nprobe'} {knob}",
                            "build_s": build, "bytes": index.nbytes(), "qps": qps, "recall_at_10": recall,
                            "speedup": qps / exact_qps})
        faiss.omp_set_num_threads(2)
    return {"rows": rows, "dim": dim, "queries": queries, "results": results}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _load(url: str, bodies: list[dict], rate: float | None, seconds: float, concurrency: int) -> dict:
    """Send POSTs at ``rate`` per second (open loop), or as fast as ``concurrency`` clients can (rate
    None); latency of each, failures."""
    import aiohttp

    latencies, failures = [], 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def one(body: dict) -> None:
            nonlocal failures
            start = time.perf_counter()
            try:
                async with session.post(url, json=body) as response:
                    await response.read()
                    if response.status != 200:
                        failures += 1
            except aiohttp.ClientError:
                failures += 1
            latencies.append(time.perf_counter() - start)

        begin = time.perf_counter()
        if rate is not None:
            tasks, sent = [], 0
            while time.perf_counter() - begin < seconds:
                due = int((time.perf_counter() - begin) * rate) + 1
                while sent < due:
                    tasks.append(asyncio.ensure_future(one(bodies[sent % len(bodies)])))
                    sent += 1
                await asyncio.sleep(0.0005)
            await asyncio.gather(*tasks)
        else:
            async def client(offset: int) -> None:
                n = offset
                while time.perf_counter() - begin < seconds:
                    await one(bodies[n % len(bodies)])
                    n += concurrency
            await asyncio.gather(*(client(i) for i in range(concurrency)))
        elapsed = time.perf_counter() - begin
    ms = np.asarray(latencies) * 1000
    return {"requests": len(latencies), "failures": failures, "seconds": elapsed,
            "throughput": len(latencies) / elapsed, "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99)), "max_ms": float(ms.max())}


def start_service(arguments: list[str]) -> tuple[subprocess.Popen, str]:
    """tools/serve_tables.py with ``arguments`` on a free port, once it says it serves (its indexes built);
    the process and its base URL."""
    port = free_port()
    server = subprocess.Popen([sys.executable, str(ROOT / "tools" / "serve_tables.py"), *arguments, "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    line = ""
    while "serving" not in line:
        line = server.stdout.readline()
        if not line:
            raise RuntimeError(f"the service did not start: {server.stderr.read()[-2000:]}")
    time.sleep(1.0)
    return server, f"http://127.0.0.1:{port}"


def service_benchmark(rows: int, dim: int, folder: Path, rate: float, seconds: float) -> dict:
    """tools/serve_tables.py over an exported rows x dim table with an HNSW index, driven from localhost."""
    import paddle

    from paddle_edo.nn import DenseEmbedding
    from paddle_edo.serving import export_tables

    model = paddle.nn.Layer()
    model.items = DenseEmbedding(rows, dim)
    model.items.weight.set_value(clustered_rows(rows, dim, seed=4))
    export_tables(model, folder)
    del model
    server, base = start_service(["--tables", str(folder), "--index", "items"])
    try:
        rng = np.random.default_rng(5)
        row_bodies = [{"table": "items", "ids": [int(i)]} for i in rng.integers(0, rows, 10_000)]
        neighbour_bodies = [{"table": "items", "id": int(i), "k": 10} for i in rng.integers(0, rows, 10_000)]
        result = {"rows": rows, "dim": dim, "rate": rate, "seconds": seconds}
        result["rows_at_rate"] = asyncio.run(_load(base + "/rows", row_bodies, rate, seconds, 64))
        result["neighbors_at_rate"] = asyncio.run(_load(base + "/neighbors", neighbour_bodies, rate, seconds, 64))
        result["rows_saturation"] = asyncio.run(_load(base + "/rows", row_bodies, None, 10, 32))
        result["neighbors_saturation"] = asyncio.run(_load(base + "/neighbors", neighbour_bodies, None, 10, 32))
        import urllib.request
        with urllib.request.urlopen(base + "/stats") as response:
            stats = json.loads(response.read())
        result["server"] = {"failed": stats["failed"], "refused": stats["refused"], "mean_batch": stats["mean_batch"],
                            "resident_bytes": stats["tables"]["items"]["resident_bytes"]}
    finally:
        server.terminate()  # SIGTERM: uvicorn finishes requests in flight, then re-raises the signal
        rest, _ = server.communicate(timeout=30)
    result["clean_shutdown"] = "stopped cleanly" in rest
    return result


def markdown(result: dict) -> str:
    from paddle_edo.memory import format_bytes

    export = result["export"]
    lines = [f"#### Export and reopen: {export['rows']:,} x {export['dim']}", "",
             "| table | file | reopen | resident after reopen | after reading 1,000 rows | read 1,000 rows |",
             "|---|---|---|---|---|---|"]
    for name in ("fp32", "int8"):
        e = export[name]
        lines.append(f"| {name} | {format_bytes(e['file_bytes'])} | {e['open_ms']:.2f} ms | "
                     f"{format_bytes(e['resident_after_open'])} | {format_bytes(e['resident_after_1000_rows'])} | "
                     f"{e['read_1000_rows_ms']:.2f} ms |")
    lines += ["", f"fp32 / int8 bytes: {export['fp32_vs_int8_bytes']:.2f}x; page cache emptied before reopening: "
                  f"{export['cold_cache']}", ""]
    retrieval = result["retrieval"]
    lines += [f"#### Retrieval: {retrieval['rows']:,} x {retrieval['dim']}, {retrieval['queries']} queries, "
              f"top 10, inner product, search on 1 thread", "",
              "| index | recall@10 | queries/s | vs exact | build | index bytes |", "|---|---|---|---|---|---|"]
    for r in retrieval["results"]:
        lines.append(f"| {r['index']} | {r['recall_at_10']:.3f} | {r['qps']:,.0f} | {r['speedup']:.1f}x | "
                     f"{r['build_s']:.1f} s | {format_bytes(r['bytes'])} |")
    service = result["service"]
    lines += ["", f"#### Service: {service['rows']:,} x {service['dim']} table with HNSW, {service['rate']:.0f} "
                  f"requests/s for {service['seconds']:.0f} s from localhost (aiohttp), then 32 clients for 10 s",
              "", "| load | requests | failed | p50 | p99 | max | throughput |", "|---|---|---|---|---|---|---|"]
    for key, label in (("rows_at_rate", "rows, one id"), ("neighbors_at_rate", "top-10 neighbours"),
                       ("rows_saturation", "rows, saturation"), ("neighbors_saturation", "neighbours, saturation")):
        s = service[key]
        lines.append(f"| {label} | {s['requests']:,} | {s['failures']} | {s['p50_ms']:.2f} ms | {s['p99_ms']:.2f} ms | "
                     f"{s['max_ms']:.1f} ms | {s['throughput']:,.0f}/s |")
    lines += ["", f"server: {service['server']['failed']} failed, mean batch {service['server']['mean_batch']:.2f} "
                  f"requests, clean shutdown: {service['clean_shutdown']}"]
    return "\n".join(lines)


def serving_benchmark(export_rows: int, retrieval_rows: int, service_rows: int, rate: float, seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        print(f"export: {export_rows:,} x 64", flush=True)
        export = export_benchmark(export_rows, 64, scratch / "export")
        print(f"retrieval: {retrieval_rows:,} x 64", flush=True)
        retrieval = retrieval_benchmark(retrieval_rows, 64)
        print(f"service: {service_rows:,} x 64 at {rate:.0f} requests/s", flush=True)
        service = service_benchmark(service_rows, 64, scratch / "service", rate, seconds)
    return {"export": export, "retrieval": retrieval, "service": service}
