"""A stable 64-bit hash of raw values: the same value gets the same id on every machine, run and
Paddle, so hashed tables need no vocabulary and a vocabulary can be searched by hash."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_POSITIVE = np.uint64(0x7FFFFFFFFFFFFFFF)


def mix64(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: spreads every input bit over every output bit (uint64 in, uint64 out)."""
    z = values.astype(np.uint64, copy=True)
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z


def stable_hash(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """int64 ids in [1, 2^63) for the values' UTF-8 text (numbers hash as their text); null -> 0.

    FNV-1a over the bytes, then mix64, computed column-wise with numpy: one pass per byte position.
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], pa.string())
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        values = pc.cast(values, pa.string())
    n = len(values)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    offsets_type = np.int64 if pa.types.is_large_string(values.type) else np.int32
    buffers = values.buffers()
    offsets = np.frombuffer(buffers[1], dtype=offsets_type)[values.offset:values.offset + n + 1].astype(np.int64)
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    starts, lengths = offsets[:-1], np.diff(offsets)
    hashes = np.full(n, _FNV_OFFSET, dtype=np.uint64)
    longest = int(lengths.max())
    if longest and int(lengths.min()) == longest:  # one width (hex hashes, codes): no masks
        for j in range(longest):
            hashes ^= data[starts + j]
            hashes *= _FNV_PRIME
    else:
        for j in range(longest):
            active = np.flatnonzero(lengths > j)
            if active.size == n:
                hashes ^= data[starts + j]
                hashes *= _FNV_PRIME
            else:
                hashes[active] = (hashes[active] ^ data[starts[active] + j]) * _FNV_PRIME
    ids = (mix64(hashes) & _POSITIVE).view(np.int64)
    ids[ids == 0] = 1
    if values.null_count:
        ids[np.asarray(values.is_null())] = 0
    return ids
