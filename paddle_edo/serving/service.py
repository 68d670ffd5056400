"""An HTTP lookup service over exported tables (Starlette, run by uvicorn): rows by id or raw value, top-k
neighbours, health and statistics. Concurrent requests for one table are answered together (one
vectorised lookup or FAISS search on a worker thread); a malformed request gets a 4xx answer naming what
is wrong, a store out of reach (Redis down) 503, and the service keeps serving."""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..errors import EdoError, StoreUnavailableError
from .reader import TableReader
from .retrieval import NeighbourIndex

logger = logging.getLogger("paddle_edo")
LATENCY_WINDOW = 10_000  # recent requests whose latencies /stats summarises


@dataclass(frozen=True)
class ServiceSettings:
    """Limits of one request and how long a request waits for others to share its batch."""

    max_ids: int = 4096
    max_body_bytes: int = 1 << 20
    max_k: int = 1000
    batch_window_ms: float = 0.5
    max_batch: int = 256
    workers: int = 2


class RequestError(Exception):
    """A request the service refuses: its HTTP status and the message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Batcher:
    """Gathers concurrent calls for one key (a table) for up to ``window`` seconds or ``max_batch``
    calls, then serves them with one call of ``serve(items) -> results`` on the worker threads."""

    def __init__(self, serve: Callable[[list[Any]], list[Any]], window: float, max_batch: int,
                 executor: ThreadPoolExecutor) -> None:
        self.serve, self.window, self.max_batch, self.executor = serve, window, max_batch, executor
        self.pending: list[tuple[Any, asyncio.Future]] = []
        self.flushing: asyncio.Task | None = None
        self.batches = 0
        self.items = 0

    async def submit(self, item: Any) -> Any:
        future = asyncio.get_running_loop().create_future()
        self.pending.append((item, future))
        if len(self.pending) >= self.max_batch:
            self._flush_now()
        elif self.flushing is None:
            self.flushing = asyncio.ensure_future(self._flush_later())
        return await future

    async def _flush_later(self) -> None:
        await asyncio.sleep(self.window)
        self.flushing = None
        self._flush_now()

    def _flush_now(self) -> None:
        if self.flushing is not None:
            self.flushing.cancel()
            self.flushing = None
        batch, self.pending = self.pending, []
        if batch:
            asyncio.ensure_future(self._run(batch))

    async def _run(self, batch: list[tuple[Any, asyncio.Future]]) -> None:
        self.batches += 1
        self.items += len(batch)
        try:
            results = await asyncio.get_running_loop().run_in_executor(self.executor, self.serve,
                                                                         [item for item, _ in batch])
        except Exception as exc:  # handed to every caller of the batch
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), result in zip(batch, results):
            if not future.done():
                future.set_result(result)


class TableService:
    """The state behind the routes: tables, their indexes, batchers and counters."""

    def __init__(self, tables: dict[str, TableReader], indexes: dict[str, NeighbourIndex],
                 settings: ServiceSettings) -> None:
        self.tables, self.indexes, self.settings = tables, indexes, settings
        for name, index in indexes.items():
            if name not in tables:
                raise EdoError(f"index for {name!r}: there is no such table ({', '.join(tables)})")
            if index.dim != tables[name].dim or index.rows != tables[name].num_rows:
                raise EdoError(f"index for {name!r} holds {index.rows} x {index.dim}; the table is "
                               f"{tables[name].num_rows} x {tables[name].dim}")
        self.executor = ThreadPoolExecutor(settings.workers, thread_name_prefix="paddle_edo-serve")
        window = settings.batch_window_ms / 1000.0
        self.row_batchers = {name: Batcher(self._rows_of(store), window, settings.max_batch, self.executor)
                             for name, store in tables.items()}
        self.neighbour_batchers = {name: Batcher(self._neighbours_of(index), window, settings.max_batch,
                                                 self.executor) for name, index in indexes.items()}
        self.latencies: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self.counts = {"requests": 0, "refused": 0, "unavailable": 0, "failed": 0}
        self.started = time.time()

    @staticmethod
    def _rows_of(store: TableReader) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
        def serve(id_lists: list[np.ndarray]) -> list[np.ndarray]:
            rows = store.rows(np.concatenate(id_lists))
            return np.split(rows, np.cumsum([len(ids) for ids in id_lists])[:-1])
        return serve

    @staticmethod
    def _neighbours_of(index: NeighbourIndex) -> Callable[[list[tuple]], list[tuple]]:
        def serve(queries: list[tuple[np.ndarray, int]]) -> list[tuple[np.ndarray, np.ndarray]]:
            k = max(k for _, k in queries)
            scores, ids = index.search(np.stack([vector for vector, _ in queries]), k)
            return [(scores[i, :k_i], ids[i, :k_i]) for i, (_, k_i) in enumerate(queries)]
        return serve

    def table(self, body: dict[str, Any]) -> TableReader:
        name = body.get("table")
        if name is None and len(self.tables) == 1:
            return next(iter(self.tables.values()))
        if not isinstance(name, str) or name not in self.tables:
            raise RequestError(404, f"table {name!r} is not served; tables: {', '.join(self.tables)}")
        return self.tables[name]

    def ids_of(self, store: TableReader, body: dict[str, Any]) -> tuple[np.ndarray, list[bool]]:
        """The ids a request names (``ids`` or ``values``), checked."""
        if ("ids" in body) == ("values" in body):
            raise RequestError(400, "give either 'ids' (a list of integers) or 'values' (a list of raw values)")
        items = body["ids"] if "ids" in body else body["values"]
        if not isinstance(items, list) or not items:
            raise RequestError(400, f"'{'ids' if 'ids' in body else 'values'}' must be a non-empty list")
        if len(items) > self.settings.max_ids:
            raise RequestError(413, f"{len(items)} ids in one request; at most {self.settings.max_ids}")
        if "ids" in body:
            if not all(isinstance(i, int) and not isinstance(i, bool) for i in items):
                raise RequestError(400, "'ids' must hold integers only")
            ids = np.asarray(items, dtype=np.int64)
            if store.kind != "hashed":
                bad = ids[(ids < 0) | (ids >= store.num_rows)]
                if bad.size:
                    raise RequestError(404, f"table {store.name!r}: id {int(bad[0])} is not in [0, {store.num_rows})")
            return ids, [True] * len(ids)
        if not all(v is None or isinstance(v, (str, int, float)) for v in items):
            raise RequestError(400, "'values' must hold strings or numbers")
        try:
            ids, known = store.ids_of_values(items)
        except StoreUnavailableError:
            raise
        except EdoError as exc:
            raise RequestError(400, str(exc)) from None
        unknown = [v for v, k, i in zip(items, known, ids) if not k and i < 0]
        if unknown:
            raise RequestError(404, f"table {store.name!r}: value {unknown[0]!r} has no id (and the table has no "
                                    f"unknown row)")
        return ids, [bool(k) for k in known]


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def create_app(tables: dict[str, TableReader], indexes: dict[str, NeighbourIndex] | None = None,
               settings: ServiceSettings = ServiceSettings()) -> Starlette:
    """The Starlette app serving these tables (a TableStore or RedisTableStore by name) and these FAISS
    indexes (by table name); EdoError names an index without its table or of another shape."""
    service = TableService(tables, indexes or {}, settings)

    async def body_of(request: Request) -> dict[str, Any]:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > settings.max_body_bytes:
            raise RequestError(413, f"a body of {int(length):,} bytes; at most {settings.max_body_bytes:,}")
        raw = await request.body()
        if len(raw) > settings.max_body_bytes:
            raise RequestError(413, f"a body of {len(raw):,} bytes; at most {settings.max_body_bytes:,}")
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise RequestError(400, f"the body is not JSON ({exc})") from None
        if not isinstance(body, dict):
            raise RequestError(400, "the body must be a JSON object")
        return body

    def timed(handler: Callable) -> Callable:
        async def route(request: Request) -> JSONResponse:
            start = time.perf_counter()
            service.counts["requests"] += 1
            try:
                response = await handler(request)
            except RequestError as exc:
                service.counts["refused"] += 1
                response = _error(exc.status, str(exc))
            except StoreUnavailableError as exc:  # the client reconnects at a later request
                service.counts["unavailable"] += 1
                response = _error(503, str(exc))
            except EdoError as exc:
                service.counts["refused"] += 1
                response = _error(400, str(exc))
            except Exception as exc:  # a bug: answered, counted, and the service goes on
                service.counts["failed"] += 1
                response = _error(500, f"{type(exc).__name__}: {exc}")
            service.latencies.append(time.perf_counter() - start)
            return response
        return route

    async def health(request: Request) -> JSONResponse:
        loop = asyncio.get_running_loop()
        for store in tables.values():  # raises StoreUnavailableError (503) while a store is out of reach
            await loop.run_in_executor(service.executor, store.ping)
        return JSONResponse({"status": "ok", "tables": list(tables), "indexes": list(service.indexes)})

    async def stats(request: Request) -> JSONResponse:
        latencies = np.asarray(service.latencies) * 1000.0
        batches = sum(b.batches for b in [*service.row_batchers.values(), *service.neighbour_batchers.values()])
        items = sum(b.items for b in [*service.row_batchers.values(), *service.neighbour_batchers.values()])
        return JSONResponse({
            **service.counts, "uptime_s": time.time() - service.started,
            "latency_ms": {q: float(np.percentile(latencies, p)) if latencies.size else None
                           for q, p in (("p50", 50), ("p99", 99), ("max", 100))},
            "batches": batches, "mean_batch": items / batches if batches else None,
            "tables": await asyncio.get_running_loop().run_in_executor(
                service.executor, lambda: {name: store.info() for name, store in tables.items()}),
            "indexes": {name: {"rows": index.rows, "dim": index.dim, "kind": index.spec.kind,
                               "metric": index.spec.metric, "codec": index.spec.codec}
                        for name, index in service.indexes.items()}})

    async def rows(request: Request) -> JSONResponse:
        body = await body_of(request)
        store = service.table(body)
        ids, known = await asyncio.get_running_loop().run_in_executor(service.executor, service.ids_of, store, body)
        found = await service.row_batchers[store.name].submit(ids)
        return JSONResponse({"table": store.name, "ids": ids.tolist(), "known": known, "rows": found.tolist()})

    async def neighbours(request: Request) -> JSONResponse:
        body = await body_of(request)
        store = service.table(body)
        if store.name not in service.indexes:
            raise RequestError(404, f"table {store.name!r} has no neighbour index; indexed: "
                                    f"{', '.join(service.indexes) or 'none'}")
        k = body.get("k", 10)
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= min(settings.max_k, store.num_rows - 1):
            raise RequestError(400, f"k = {k!r} must be an integer in [1, {min(settings.max_k, store.num_rows - 1)}]")
        given = [key for key in ("id", "value", "vector") if key in body]
        if len(given) != 1:
            raise RequestError(400, "give one of 'id', 'value' or 'vector'")
        query_id = None
        if given[0] == "vector":
            vector = body["vector"]
            if not isinstance(vector, list) or len(vector) != store.dim or \
                    not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vector):
                raise RequestError(400, f"'vector' must be a list of {store.dim} numbers")
            query = np.asarray(vector, dtype=np.float32)
        else:
            key = "ids" if given[0] == "id" else "values"
            ids, _ = await asyncio.get_running_loop().run_in_executor(service.executor, service.ids_of, store,
                                                                      {key: [body[given[0]]]})
            query_id = int(ids[0])
            query = (await service.row_batchers[store.name].submit(ids))[0]
        scores, found = await service.neighbour_batchers[store.name].submit((query, k + (query_id is not None)))
        kept = [(float(s), int(i)) for s, i in zip(scores, found) if i >= 0 and i != query_id][:k]
        values = await asyncio.get_running_loop().run_in_executor(service.executor, store.values_of,
                                                                  [i for _, i in kept])
        answer = [{"id": i, "score": s, "value": v} for (s, i), v in zip(kept, values)]
        return JSONResponse({"table": store.name, "query_id": query_id, "neighbors": answer})

    @asynccontextmanager
    async def lifespan(app: Starlette):
        yield
        service.executor.shutdown(wait=True, cancel_futures=True)  # clean shutdown: running lookups finish
        logger.info("service stopped cleanly after %d requests (%d refused, %d failed)", service.counts["requests"],
                    service.counts["refused"], service.counts["failed"])

    routes = [Route("/health", timed(health), methods=["GET"]), Route("/stats", timed(stats), methods=["GET"]),
              Route("/rows", timed(rows), methods=["POST"]), Route("/neighbors", timed(neighbours), methods=["POST"])]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.service = service
    return app
