"""Serving trained tables: export them as plain files (``export_tables``, needs Paddle), open them
memory-mapped with numpy alone (``TableStore``), find nearest rows with FAISS (``NeighbourIndex``), and
answer over HTTP (``create_app``, Starlette); or put them into Redis as versions switched atomically
(``export_to_redis``) and read them from there (``RedisTableStore``). Names load on first use, so a
serving box without Paddle imports the stores, the index and the service."""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {"TableStore": "store", "open_tables": "store", "NeighbourIndex": "retrieval", "IndexSpec": "retrieval",
            "export_tables": "export", "create_app": "service", "ServiceSettings": "service",
            "export_to_redis": "redis_export", "RedisExport": "redis_export", "RedisTableStore": "redis_store",
            "open_redis_tables": "redis_store", "LocalRedisServer": "redis_server"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'paddle_edo.serving' has no attribute {name!r}")
