"""How exported tables live in Redis: the keys of a namespace and its versions, and rows kept as fixed-size
records in blocks.

Keys of namespace ``ns``: ``ns:current`` (the version readers use), ``ns:versions`` (a sorted set of the
complete versions), ``ns:next_version`` (a counter), ``ns:unfinished`` (versions being written or left by a
failed export), and for version N: ``ns:vN:writing`` (the lease of the export writing it, renewed at every
write, so that a concurrent export leaves it alone), ``ns:vN:manifest`` (JSON: ``tables.json`` plus each table's record
layout), ``ns:vN:rows:<table>:<block>`` (strings of records), ``ns:vN:values:<field>`` (a hash raw value
-> id) and ``ns:vN:names:<field>`` (a hash id -> raw value).

A record is one stored row's bytes as the file store holds them: fp32 rows little-endian, packed rows
their codes then their fp16 parameters. Rows sit ``rows_per_block`` to a string, so Redis spends a key's
overhead (about 90 bytes) per block, not per row, and an int8 table costs it 3.76x less than fp32, as on
disk; a row is read with GETRANGE. Blocks stay under 32 KiB: Redis then stores a written string in an
allocation of its own size (larger arguments may keep their read buffer's slack)."""
from __future__ import annotations

from typing import Any

import numpy as np

LAYOUT = 1
BLOCK_BYTES = 32_768
BLOCK_HEADER = 64  # Redis's string header and allocator rounding, left free in each block


def current_key(namespace: str) -> str:
    return f"{namespace}:current"


def versions_key(namespace: str) -> str:
    return f"{namespace}:versions"


def counter_key(namespace: str) -> str:
    return f"{namespace}:next_version"


def unfinished_key(namespace: str) -> str:
    return f"{namespace}:unfinished"


def version_prefix(namespace: str, version: int) -> str:
    return f"{namespace}:v{version}:"


def lease_key(namespace: str, version: int) -> str:
    """Present (with a time to live) while an export is writing the version."""
    return version_prefix(namespace, version) + "writing"


def manifest_key(namespace: str, version: int) -> str:
    return version_prefix(namespace, version) + "manifest"


def block_key(namespace: str, version: int, table: str, block: int) -> str:
    return f"{version_prefix(namespace, version)}rows:{table}:{block}"


def values_key(namespace: str, version: int, field: str) -> str:
    return f"{version_prefix(namespace, version)}values:{field}"


def names_key(namespace: str, version: int, field: str) -> str:
    return f"{version_prefix(namespace, version)}names:{field}"


def rows_per_block(record_bytes: int) -> int:
    """Records in a block of at most BLOCK_BYTES (one when a record is larger)."""
    return max(1, (BLOCK_BYTES - BLOCK_HEADER) // record_bytes)


def record_layout(entry: dict[str, Any], codes: np.ndarray | None, params: np.ndarray | None,
                  stored_rows: int, stored_width: int, block_rows: int | None = None) -> dict[str, Any]:
    """The record fields of a table's manifest entry: bytes per record, codes' dtype and width, parameters
    per row, rows per block and the number of blocks."""
    if entry["kind"] == "packed":
        codes_width, codes_dtype = int(codes.shape[1]), codes.dtype.str
        params_width = int(params.shape[1]) if params is not None else 0
        record = codes_width * codes.dtype.itemsize + params_width * 2
    else:
        codes_width, codes_dtype, params_width = stored_width, "<f4", 0
        record = stored_width * 4
    block_rows = block_rows or rows_per_block(record)
    return {"record_bytes": record, "codes_dtype": codes_dtype, "codes_width": codes_width,
            "params_width": params_width, "rows_per_block": block_rows, "stored_rows": stored_rows,
            "blocks": -(-stored_rows // block_rows)}


def encode_records(codes: np.ndarray, params: np.ndarray | None) -> bytes:
    """Rows [n, ...] (fp32 rows, or packed codes with their fp16 parameters) as n records, back to back."""
    parts = [np.ascontiguousarray(codes).view(np.uint8).reshape(len(codes), -1)]
    if params is not None:
        parts.append(np.ascontiguousarray(params, dtype=np.float16).view(np.uint8).reshape(len(params), -1))
    return np.concatenate(parts, axis=1).tobytes() if len(parts) > 1 else parts[0].tobytes()


def decode_records(data: bytes, layout: dict[str, Any]) -> tuple[np.ndarray, np.ndarray | None]:
    """n records -> (codes or fp32 rows [n, codes_width], fp16 parameters [n, P] or None): the inverse of
    ``encode_records``."""
    records = np.frombuffer(data, dtype=np.uint8).reshape(-1, layout["record_bytes"])
    dtype = np.dtype(layout["codes_dtype"])
    codes_bytes = layout["codes_width"] * dtype.itemsize
    codes = records[:, :codes_bytes].copy().view(dtype)
    if not layout["params_width"]:
        return codes, None
    return codes, records[:, codes_bytes:].copy().view(np.float16)


def version_keys(namespace: str, version: int, manifest: dict[str, Any]) -> list[str]:
    """Every key a complete version holds, from its manifest."""
    keys = [manifest_key(namespace, version)]
    fields = set()
    for name, entry in manifest["tables"].items():
        keys += [block_key(namespace, version, name, b) for b in range(entry["blocks"])]
        if entry.get("values"):
            fields.add(entry["field"])
    for field in sorted(fields):
        keys += [values_key(namespace, version, field), names_key(namespace, version, field)]
    return keys
