"""Exported tables read from Redis (``export_to_redis``) behind the file store's interface: rows by id or
raw value, decoded exactly as the file store decodes them, and the bytes Redis holds for each table.

A store reads the version that was current when it opened. Each lookup is one server-side script that
reads every row it needs and the current version in one step, so an answer comes whole from one version;
when a newer version is current, the store moves to it for the next lookup. Redis out of reach raises
StoreUnavailableError (the service answers 503); the client reconnects by itself when Redis returns."""
from __future__ import annotations

import json
import logging
import threading
from typing import Any, Sequence

import numpy as np

from ..errors import DataError, EdoKeyError, EdoValueError
from . import redis_layout as layout
from .reader import TableReader
from .redis_connection import connect, redis_errors, shown

logger = logging.getLogger("paddle_edo")

# KEYS: the version's blocks, then the namespace's current key. ARGV: record bytes, then per row the index
# of its block in KEYS and its byte offset. Returns {current version, the rows' records back to back}.
READ_RECORDS = """
local size = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV, 2 do
  local offset = tonumber(ARGV[i + 1])
  out[#out + 1] = redis.call('GETRANGE', KEYS[tonumber(ARGV[i])], offset, offset + size - 1)
end
return {redis.call('GET', KEYS[#KEYS]) or false, table.concat(out)}
"""
IDS_PER_SCRIPT = 65_536  # rows read by one script call (a call blocks the server while it runs)


class VersionGoneError(DataError):
    """The store's version lost keys in Redis (a newer export removed it)."""


def current_version(client, url: str, namespace: str) -> int:
    with redis_errors(url, f"reading namespace {namespace!r}"):
        current = client.get(layout.current_key(namespace))
    if current is None:
        raise EdoKeyError(f"Redis at {shown(url)} holds no tables in namespace {namespace!r}: "
                          f"tools/export_tables.py --redis writes them")
    return int(current)


def read_version_manifest(client, url: str, namespace: str, version: int) -> dict[str, Any]:
    with redis_errors(url, f"reading version {version} of namespace {namespace!r}"):
        raw = client.get(layout.manifest_key(namespace, version))
        complete = [int(v) for v in client.zrange(layout.versions_key(namespace), 0, -1)]
    if raw is None:
        raise EdoKeyError(f"namespace {namespace!r} in Redis at {shown(url)} has no version {version}; "
                          f"it has {', '.join(map(str, complete)) or 'none'}")
    manifest = json.loads(raw)
    if manifest.get("layout") != layout.LAYOUT:
        raise DataError(f"version {version} of namespace {namespace!r} has Redis layout {manifest.get('layout')}; "
                        f"this paddle_edo reads layout {layout.LAYOUT}")
    return manifest


class RedisTableStore(TableReader):
    """One table of a namespace in Redis. ``rows(ids)`` -> float32 [n, dim], bit-identical to the file
    store of the same export; ``ids_of_values(values)``; ``held_bytes()`` is what Redis holds for it.
    ``follow``: move to a newer current version when one appears (False keeps the opened version)."""

    def __init__(self, client, url: str, namespace: str, name: str, version: int, manifest: dict[str, Any],
                 follow: bool = True) -> None:
        self.client, self.url, self.namespace, self.follow = client, url, namespace, follow
        self.version = version
        self._lock = threading.Lock()
        self._read = client.register_script(READ_RECORDS)
        self._held: tuple[int, int] | None = None
        self._current_seen = version  # the newest current version a read reported
        if name not in manifest["tables"]:
            raise EdoKeyError(f"namespace {namespace!r} (version {version}) has no table {name!r}; it has "
                              f"{', '.join(manifest['tables'])}")
        super().__init__(name, manifest["tables"][name])

    @classmethod
    def open(cls, url: str, name: str, namespace: str = "paddle_edo", version: int | None = None,
             follow: bool | None = None) -> "RedisTableStore":
        """A table of ``namespace`` at ``url``: its current version, or ``version`` (then kept: not
        followed unless ``follow``)."""
        return open_redis_tables(url, namespace, version, follow, names=[name])[name]

    def _stored(self, stored: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(codes or fp32 rows, fp16 parameters or None) of stored rows, read in one script call per
        IDS_PER_SCRIPT distinct rows from this store's version; notes the current version Redis gave."""
        unique, inverse = np.unique(stored, return_inverse=True)
        with self._lock:
            version, entry = self.version, self.entry
        per_block, size = entry["rows_per_block"], entry["record_bytes"]
        chunks = []
        for first in range(0, len(unique), IDS_PER_SCRIPT):
            part = unique[first:first + IDS_PER_SCRIPT]
            blocks, slots = np.unique(part // per_block, return_inverse=True)
            keys = [layout.block_key(self.namespace, version, self.name, int(b)) for b in blocks]
            arguments = np.empty(2 * len(part) + 1, dtype=np.int64)
            arguments[0] = size
            arguments[1::2] = slots.reshape(-1) + 1
            arguments[2::2] = (part % per_block) * size
            with redis_errors(self.url, f"reading table {self.name!r}"):
                current, data = self._read(keys=[*keys, layout.current_key(self.namespace)],
                                           args=arguments.tolist())
            if len(data) != len(part) * size:
                raise VersionGoneError(f"table {self.name!r}: version {version} of namespace {self.namespace!r} is "
                                       f"no longer whole in Redis at {shown(self.url)} (removed by a newer export?)")
            chunks.append(data)
            self._current_seen = max(self._current_seen, int(current or 0))
        codes, params = layout.decode_records(b"".join(chunks), entry)
        inverse = inverse.reshape(-1)
        return codes[inverse], None if params is None else params[inverse]

    def _move_to(self, version: int) -> None:
        manifest = read_version_manifest(self.client, self.url, self.namespace, version)
        if self.name not in manifest["tables"]:
            logger.warning("table %r is not in version %d of namespace %r: serving version %d still",
                           self.name, version, self.namespace, self.version)
            return
        with self._lock:
            if version > self.version:
                self.version, self._held = version, None
                self.describe(manifest["tables"][self.name])
                logger.info("table %r now serves version %d of namespace %r", self.name, version, self.namespace)

    def rows(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Rows of one version, whole; a newer current version that Redis reported is served from the next
        call on (moving before this answer is decoded could mix two versions' shapes)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        try:
            found = super().rows(ids)
        except VersionGoneError:
            if not self.follow:
                raise
            self._move_to(current_version(self.client, self.url, self.namespace))  # the old version went
            found = super().rows(ids)
        if self.follow and self._current_seen > self.version:
            self._move_to(self._current_seen)
        return found

    def stored_floats(self, rows: np.ndarray) -> np.ndarray:
        return self._stored(rows)[0]

    def stored_packed(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        return self._stored(rows)

    def known_value_ids(self, values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            key = layout.values_key(self.namespace, self.version, self.entry["field"])
        names = [None if v is None else str(v) for v in values]
        present = [n for n in names if n is not None]
        with redis_errors(self.url, f"reading the values of table {self.name!r}"):
            found = iter(self.client.hmget(key, present) if present else [])
        ids = np.array([-1 if n is None else int(next(found) or -1) for n in names], dtype=np.int64)
        return ids, ids >= 0

    def value_of(self, row_id: int) -> str | None:
        return self.values_of([row_id])[0]

    def values_of(self, row_ids: Sequence[int]) -> list[str | None]:
        if not self.entry.get("values") or not len(row_ids):
            return [None] * len(row_ids)
        with self._lock:
            key = layout.names_key(self.namespace, self.version, self.entry["field"])
        with redis_errors(self.url, f"reading the values of table {self.name!r}"):
            found = self.client.hmget(key, [int(i) for i in row_ids])
        return [None if value is None else value.decode("utf-8") for value in found]

    def ping(self) -> None:
        with redis_errors(self.url):
            self.client.ping()

    def held_bytes(self) -> int:
        """Bytes Redis holds for this table's rows in this version (MEMORY USAGE of its blocks, keys
        included; its values' hashes are the field's, counted in ``info``)."""
        with self._lock:
            version, blocks = self.version, self.entry["blocks"]
            if self._held is not None and self._held[0] == version:
                return self._held[1]
        keys = [layout.block_key(self.namespace, version, self.name, b) for b in range(blocks)]
        total = 0
        with redis_errors(self.url, f"measuring table {self.name!r}"):
            for first in range(0, len(keys), 4096):
                pipe = self.client.pipeline(transaction=False)
                for key in keys[first:first + 4096]:
                    pipe.memory_usage(key, samples=0)
                total += sum(int(b or 0) for b in pipe.execute())
        with self._lock:
            self._held = (version, total)
        return total

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "rows": self.num_rows, "dim": self.dim, "format": self.format,
                "store": "redis", "namespace": self.namespace, "version": self.version,
                "redis_bytes": self.held_bytes(), "values": bool(self.entry.get("values"))}


def open_redis_tables(url: str, namespace: str = "paddle_edo", version: int | None = None,
                      follow: bool | None = None, names: Sequence[str] | None = None) -> dict[str, RedisTableStore]:
    """The tables of ``namespace`` in Redis at ``url`` (all, or ``names``), by name: the current version,
    or ``version`` (kept, unless ``follow``). One client serves them all. Raises EdoValueError for a bad
    URL, StoreUnavailableError when Redis does not answer, EdoKeyError for a namespace, version or table
    that is not there."""
    if version is not None and (not isinstance(version, int) or version < 1):
        raise EdoValueError(f"version = {version!r}: a version number >= 1")
    client = connect(url)
    pinned = version is not None
    version = version if pinned else current_version(client, url, namespace)
    manifest = read_version_manifest(client, url, namespace, version)
    follow = not pinned if follow is None else follow
    return {name: RedisTableStore(client, url, namespace, name, version, manifest, follow)
            for name in (names if names is not None else manifest["tables"])}
