"""An export folder (``export_tables``) written into Redis as a new version of a namespace, then made
current in one atomic step; older versions beyond ``keep`` are removed after the switch. A reader keeps
the version it opened, so it never sees a mix; an export that fails leaves the current version as it was
and its partial keys are removed (now, or by the next export if Redis went away)."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import EdoError, EdoValueError
from . import redis_layout as layout
from .format import read_manifest
from .redis_connection import connect, redis_errors, shown
from .store import TableStore

WRITE_BATCH_BYTES = 4 << 20  # bytes sent per pipeline round trip
VALUES_BATCH = 20_000  # hash fields per HSET

# Makes ARGV[1] current if it is newer than the current version, records it as complete and returns 1;
# returns 0 (and changes nothing) when a newer version is current already.
SWITCH = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local version = tonumber(ARGV[1])
redis.call('SREM', KEYS[3], ARGV[1])
if version <= current then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], version, ARGV[1])
return 1
"""


@dataclass(frozen=True)
class RedisExport:
    """What an export did: the version written, whether it became current, the versions removed after
    the switch (this one too when a newer one was current first), the bytes and rows sent, and the
    seconds it took (of which writing the raw values)."""

    url: str
    namespace: str
    version: int
    current: bool
    removed: tuple[int, ...]
    bytes_sent: int
    rows: int
    seconds: float
    values_seconds: float


def export_to_redis(folder: str | Path, url: str, namespace: str = "paddle_edo", keep: int = 2,
                    block_rows: int | None = None, verify: bool = True,
                    progress: Callable[[str, int, int], None] | None = None, lease_s: float = 30.0) -> RedisExport:
    """Write every table of an export folder, and its fields' raw values, to Redis at ``url`` as a new
    version of ``namespace``, make it current, and remove versions older than the newest ``keep``.

    ``block_rows``: records per Redis string (default: as many as fit 32 KiB). ``verify``: check each
    file's sha256 first. ``progress(table, blocks_written, blocks)`` is called after each write.
    ``lease_s``: how long the version counts as being written after the export's last write (a failed
    export's partial keys are removed by the first export after that; one still writing is left alone).
    Raises EdoValueError for bad arguments, StoreUnavailableError / EdoRuntimeError (one line saying
    the current version stays) when Redis fails during the export."""
    if not isinstance(namespace, str) or not namespace or any(c in namespace for c in " :*?[]"):
        raise EdoValueError(f"Redis namespace {namespace!r}: a non-empty name without spaces, ':' or "
                            f"glob characters")
    if not isinstance(keep, int) or keep < 1:
        raise EdoValueError(f"keep = {keep!r}: the number of versions kept in Redis must be an integer >= 1")
    if block_rows is not None and (not isinstance(block_rows, int) or block_rows < 1):
        raise EdoValueError(f"block_rows = {block_rows!r}: records per Redis string must be an integer >= 1")
    if not isinstance(lease_s, (int, float)) or not lease_s > 0:
        raise EdoValueError(f"lease_s = {lease_s!r}: the seconds an export's lease lasts must be > 0")
    lease_ms = max(1, int(lease_s * 1000))
    folder = Path(folder)
    tables = {name: TableStore(folder, name, entry, verify) for name, entry in read_manifest(folder)["tables"].items()}
    client = connect(url)
    start = time.perf_counter()
    with redis_errors(url, f"preparing namespace {namespace!r}"):
        remove_unfinished(client, namespace)
        version = int(client.incr(layout.counter_key(namespace)))
        client.set(layout.lease_key(namespace, version), 1, px=lease_ms)
        client.sadd(layout.unfinished_key(namespace), version)
        before = int(client.get(layout.current_key(namespace)) or 0)
    writer = _VersionWriter(client, url, namespace, version, block_rows, progress, lease_ms)
    try:
        manifest = writer.write(tables, folder)
        with redis_errors(url, f"making version {version} current"):
            made_current = bool(client.eval(SWITCH, 3, layout.current_key(namespace), layout.versions_key(namespace),
                                            layout.unfinished_key(namespace), version))
            client.delete(layout.lease_key(namespace, version))
    except EdoError as exc:
        raise type(exc)(f"{exc}; the export of version {version} stopped, and version {before or 'none'} stays "
                        f"current ({_clean_up(client, namespace, version)})") from None
    with redis_errors(url, "removing old versions"):
        removed = remove_old_versions(client, namespace, keep)
        if not made_current:  # a newer export switched first: this version would never be served
            remove_version_keys(client, namespace, version)
            removed.append(version)
    rows = sum(entry["stored_rows"] for entry in manifest["tables"].values())
    return RedisExport(shown(url), namespace, version, made_current, tuple(removed), writer.bytes_sent, rows,
                       time.perf_counter() - start, writer.values_seconds)


class _VersionWriter:
    """Writes one version's blocks, values and manifest, pipelined."""

    def __init__(self, client, url: str, namespace: str, version: int, block_rows: int | None,
                 progress: Callable[[str, int, int], None] | None, lease_ms: int) -> None:
        self.client, self.url, self.namespace, self.version = client, url, namespace, version
        self.block_rows, self.progress = block_rows, progress
        self.lease, self.lease_ms = layout.lease_key(namespace, version), lease_ms
        self.bytes_sent = 0
        self.values_seconds = 0.0
        self.largest_value = largest_value(client)

    def write(self, tables: dict[str, TableStore], folder: Path) -> dict[str, Any]:
        manifest: dict[str, Any] = {"layout": layout.LAYOUT, "version": self.version, "created": time.time(),
                                    "source": str(folder.resolve()), "tables": {}}
        fields_written: set[str] = set()
        for name, store in tables.items():
            entry = self.write_table(name, store)
            field = entry.get("field")
            if entry.get("values") and field not in fields_written:
                self.write_values(field, store)
                fields_written.add(field)
            manifest["tables"][name] = entry
        with redis_errors(self.url, f"writing version {self.version}'s manifest"):
            self.client.set(layout.manifest_key(self.namespace, self.version), json.dumps(manifest))
        return manifest

    def write_table(self, name: str, store: TableStore) -> dict[str, Any]:
        entry = {**store.entry, **layout.record_layout(store.entry, store.codes, store.params, store.stored_rows,
                                                        store.stored_width, self.block_rows)}
        per_block, blocks = entry["rows_per_block"], entry["blocks"]
        block_bytes = min(per_block, entry["stored_rows"]) * entry["record_bytes"]
        if self.largest_value is not None and block_bytes > self.largest_value:
            raise EdoValueError(f"table {name!r}: a block of {block_bytes:,} bytes is larger than this Redis takes "
                                f"in one value (proto-max-bulk-len {self.largest_value:,}); export with fewer "
                                f"block_rows")
        blocks_per_trip = max(1, WRITE_BATCH_BYTES // (per_block * entry["record_bytes"]))
        for first in range(0, blocks, blocks_per_trip):
            last = min(first + blocks_per_trip, blocks)
            with redis_errors(self.url, f"writing table {name!r} (blocks {first}-{last - 1} of {blocks})"):
                pipe = self.client.pipeline(transaction=False)
                for block in range(first, last):
                    rows = slice(block * per_block, min((block + 1) * per_block, entry["stored_rows"]))
                    data = self._records(store, rows)
                    pipe.set(layout.block_key(self.namespace, self.version, name, block), data)
                    self.bytes_sent += len(data)
                pipe.pexpire(self.lease, self.lease_ms)  # the lease lasts as long as the writes go on
                pipe.execute()
            if self.progress is not None:
                self.progress(name, last, blocks)
        return entry

    @staticmethod
    def _records(store: TableStore, rows: slice) -> bytes:
        if store.kind == "packed":
            return layout.encode_records(store.codes[rows], None if store.params is None else store.params[rows])
        return layout.encode_records(np.asarray(store.matrix[rows], dtype="<f4"), None)

    def write_values(self, field: str, store: TableStore) -> None:
        """The field's values as two hashes: raw value -> id (the first id of a repeated value, as the file
        store finds it) and id -> raw value. HSET commands are packed here in bulk (redis-py packs
        argument by argument, 12 s for a million values against 2 s)."""
        values = store.value_ids.values.to_pylist()
        ids_of: dict[str, int] = {}
        for row_id, value in enumerate(values):
            if value is not None and value not in ids_of:
                ids_of[value] = row_id
        pairs = [(value.encode("utf-8"), str(row_id).encode()) for value, row_id in ids_of.items()]
        value_hash = layout.values_key(self.namespace, self.version, field).encode("utf-8")
        name_hash = layout.names_key(self.namespace, self.version, field).encode("utf-8")
        start = time.perf_counter()
        with redis_errors(self.url, f"writing the values of field {field!r}"):
            for first in range(0, len(pairs), VALUES_BATCH):
                chunk = pairs[first:first + VALUES_BATCH]
                commands = [hset_command(value_hash, chunk), hset_command(name_hash, [(i, v) for v, i in chunk])]
                send_packed(self.client, commands)
                self.client.pexpire(self.lease, self.lease_ms)
                self.bytes_sent += sum(map(len, commands))
        self.values_seconds += time.perf_counter() - start


def hset_command(key: bytes, pairs: list[tuple[bytes, bytes]]) -> bytes:
    """``HSET key field value ...`` in the Redis protocol (RESP)."""
    head = b"*%d\r\n$4\r\nHSET\r\n$%d\r\n%s\r\n" % (2 + 2 * len(pairs), len(key), key)
    return head + b"".join(b"$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(f), f, len(v), v) for f, v in pairs)


def send_packed(client, commands: list[bytes]) -> None:
    """Send commands already in the Redis protocol on one of the client's connections and read their
    replies (an error reply raises redis.ResponseError)."""
    import redis

    connection = client.connection_pool.get_connection()
    try:
        connection.send_packed_command(commands)
        for _ in commands:
            reply = connection.read_response()
            if isinstance(reply, redis.ResponseError):
                raise reply
    except BaseException:
        connection.disconnect()  # replies may be left unread: this connection is not reused as it is
        raise
    finally:
        client.connection_pool.release(connection)


def largest_value(client) -> int | None:
    """The largest value this Redis takes (proto-max-bulk-len), or None where CONFIG is not allowed."""
    import redis

    try:
        return int(client.config_get("proto-max-bulk-len")["proto-max-bulk-len"])
    except (redis.ResponseError, KeyError, ValueError):
        return None


def _clean_up(client, namespace: str, version: int) -> str:
    """Remove a failed version's keys if Redis answers; say what became of them."""
    try:
        client.delete(layout.lease_key(namespace, version))
        removed = remove_version_keys(client, namespace, version)
        client.srem(layout.unfinished_key(namespace), version)
        return f"its {removed} partial keys were removed" if removed else "it had written nothing"
    except Exception:  # Redis is gone: the next export removes them
        return "its partial keys will be removed by the next export"


def remove_version_keys(client, namespace: str, version: int) -> int:
    """Delete every key of one version: those its manifest lists, or, for a version without one (a
    partial version), those a SCAN of its prefix finds."""
    manifest = client.get(layout.manifest_key(namespace, version))
    if manifest is not None:
        keys = layout.version_keys(namespace, version, json.loads(manifest))
        return sum(client.unlink(*keys[i:i + 1000]) for i in range(0, len(keys), 1000))
    removed = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=layout.version_prefix(namespace, version) + "*", count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            removed += client.unlink(*batch)
            batch = []
    if batch:
        removed += client.unlink(*batch)
    return removed


def remove_unfinished(client, namespace: str) -> list[int]:
    """Remove the keys of versions an earlier export left unfinished (those whose lease ran out: an export
    still writing its version keeps it)."""
    versions = sorted(int(v) for v in client.smembers(layout.unfinished_key(namespace))
                      if not client.exists(layout.lease_key(namespace, int(v))))
    for version in versions:
        remove_version_keys(client, namespace, version)
        client.srem(layout.unfinished_key(namespace), version)
    return versions


def remove_old_versions(client, namespace: str, keep: int) -> list[int]:
    """Remove complete versions beyond the newest ``keep`` (never the current one)."""
    current = int(client.get(layout.current_key(namespace)) or 0)
    versions = sorted((int(v) for v in client.zrange(layout.versions_key(namespace), 0, -1)), reverse=True)
    old = [v for v in versions[keep:] if v != current]
    for version in old:
        client.zrem(layout.versions_key(namespace), version)
        remove_version_keys(client, namespace, version)
    return old
