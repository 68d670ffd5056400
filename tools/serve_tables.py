"""Serve exported tables over HTTP (Starlette on uvicorn):
python tools/serve_tables.py (--tables DIR | --redis URL [--namespace NS] [--version N])
                             [--index TABLE ...] [--metric cosine] [--host 127.0.0.1] [--port 8080] [--verify]

  GET  /health                      {"status": "ok", ...}
  GET  /stats                       requests, latency p50/p99, batch sizes, each table's resident bytes
  POST /rows       {"table": T, "ids": [1, 2]} or {"table": T, "values": ["a", "b"]}
  POST /neighbors  {"table": T, "id": 1 | "value": "a" | "vector": [...], "k": 10}

Concurrent requests for one table are answered together. Malformed requests get 400/404/413 with a
message. From Redis, rows are read per request from the current version (a newer one is followed at
once; --version keeps one), neighbours from an index built from the rows read at start; while Redis is
out of reach, requests get 503 and the service recovers by itself. Ctrl-C or SIGTERM stops it cleanly
(requests in flight finish). Needs no Paddle."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools._cli import add_debug_flag, fail_cleanly  # noqa: E402
from tools.retrieve import load_or_build  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--tables", help="a folder written by tools/export_tables.py")
    source.add_argument("--redis", metavar="URL", help="serve the tables tools/export_tables.py --redis wrote")
    parser.add_argument("--namespace", default="paddle_edo", help="with --redis: the keys' prefix")
    parser.add_argument("--version", type=int, help="with --redis: serve this version (default: the current "
                                                    "one, following newer ones)")
    parser.add_argument("--index", nargs="*", default=[], help="tables to answer /neighbors for (built once, "
                                                               "then loaded from beside the table)")
    parser.add_argument("--metric", default="cosine", choices=("cosine", "ip", "l2"))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--verify", action="store_true", help="check every file against its checksum first")
    parser.add_argument("--batch-window-ms", type=float, default=0.5)
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    with fail_cleanly(args.debug):
        import uvicorn

        from paddle_edo.errors import EdoKeyError
        from paddle_edo.serving import IndexSpec, ServiceSettings, create_app, open_tables

        if args.redis:
            from paddle_edo.serving import NeighbourIndex, open_redis_tables

            tables = open_redis_tables(args.redis, args.namespace, args.version)
            source = f"namespace {args.namespace!r} at {args.redis}"
        else:
            folder = Path(args.tables)
            tables = open_tables(folder, verify=args.verify)
            source = str(folder)
        missing = [name for name in args.index if name not in tables]
        if missing:
            raise EdoKeyError(f"--index {missing[0]}: no such table in {source} ({', '.join(tables)})")
        if args.redis:
            indexes = {name: NeighbourIndex.build(tables[name].all_rows(), IndexSpec(args.metric), table=name)
                       for name in args.index}
        else:
            indexes = {name: load_or_build(tables[name], folder, IndexSpec(args.metric)) for name in args.index}
        app = create_app(tables, indexes, ServiceSettings(batch_window_ms=args.batch_window_ms))
        version = f" (version {next(iter(tables.values())).version})" if args.redis and tables else ""
        print(f"serving {len(tables)} tables{version} ({len(indexes)} with neighbours) on "
              f"http://{args.host}:{args.port}", flush=True)
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning", lifespan="on")
    return 0


if __name__ == "__main__":
    sys.exit(main())
