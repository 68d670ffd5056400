"""What every store of exported tables shares, wherever the rows live (memory-mapped files, Redis): ids
checked, packed rows decoded, hash tables' rows combined from their shared rows, raw values mapped to
ids. A store supplies only how it reads stored rows and values."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from ..data.hashing import stable_hash
from ..errors import EdoIndexError, EdoKeyError
from .format import decode_rows, hashed_buckets


def value_hashes(values: Sequence[Any]) -> np.ndarray:
    """int64 stable hashes of raw values as text (0 for None): how a hashed field makes ids and how saved
    values are found."""
    return stable_hash(pa.array([None if v is None else str(v) for v in values], pa.string()))


class TableReader:
    """Rows of one exported table by id or raw value. ``entry`` is the table's entry in ``tables.json``.
    Subclasses read stored rows (``stored_floats``, ``stored_packed``) and values (``known_value_ids``,
    ``value_of``)."""

    def __init__(self, name: str, entry: dict[str, Any]) -> None:
        self.name = name
        self.describe(entry)

    def describe(self, entry: dict[str, Any]) -> None:
        """Take the shape, kind and format of ``entry`` (a store that follows new versions calls it again)."""
        self.entry = entry
        self.kind, self.dim, self.num_rows = entry["kind"], int(entry["dim"]), int(entry["rows"])
        self.padding_idx = entry.get("padding_idx")
        self.format = entry.get("format", "float32")
        self.coefficients = np.asarray(entry["coefficients"], dtype=np.int64) if self.kind == "hashed" else None

    @property
    def stored_rows(self) -> int:
        """Rows the store holds: a hash table's shared rows, every other table's own."""
        return int(self.entry["num_buckets"]) if self.kind == "hashed" else self.num_rows

    @property
    def stored_width(self) -> int:
        """Values per stored fp32 row (a concatenating hash table stores slices of its rows)."""
        return self.dim // int(self.entry["num_hashes"]) if self.entry.get("combine") == "concat" else self.dim

    def stored_floats(self, rows: np.ndarray) -> np.ndarray:
        """float32 [n, stored_width] stored rows of an fp32 or hash table."""
        raise NotImplementedError

    def stored_packed(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(codes [n, bytes], fp16 row parameters [n, P] or None) of a packed table's rows."""
        raise NotImplementedError

    def known_value_ids(self, values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, known) of raw values through the table's saved values: -1 where a value has no id."""
        raise NotImplementedError

    def value_of(self, row_id: int) -> str | None:
        """The raw value of an id (None if the table has no values or the id has none)."""
        raise NotImplementedError

    def values_of(self, row_ids: Sequence[int]) -> list[str | None]:
        """The raw values of several ids (``value_of`` of each)."""
        return [self.value_of(int(i)) for i in row_ids]

    def check_ids(self, ids: np.ndarray) -> None:
        if self.kind == "hashed":
            return  # any id hashes to rows
        bad = (ids < 0) | (ids >= self.num_rows)
        if bad.any():
            raise EdoIndexError(f"table {self.name!r}: id {int(ids[bad][0])} is out of range [0, {self.num_rows})")

    def rows(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """float32 [n, dim] rows of the ids (the padding row, if any, reads as stored: zeros)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        self.check_ids(ids)
        if self.kind == "packed":
            codes, params = self.stored_packed(ids)
            return decode_rows(codes, params, self.format, self.dim)
        if self.kind == "rows":
            return self.stored_floats(ids)
        buckets = hashed_buckets(ids, self.coefficients, self.entry["num_buckets"])
        parts = self.stored_floats(buckets.reshape(-1)).reshape(len(ids), buckets.shape[1], -1)
        combine = self.entry["combine"]
        rows = parts.reshape(len(ids), -1) if combine == "concat" else parts.sum(axis=1)
        if combine == "mean":
            rows = rows * np.float32(1.0 / self.entry["num_hashes"])
        if self.padding_idx is not None:
            rows[ids == self.padding_idx] = 0.0
        return np.asarray(rows, dtype=np.float32)

    def ids_of_values(self, values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, known) of raw values: through the saved values; hashed fields by the stable hash; values
        without an id get the unknown id where the table has one, else -1."""
        if self.entry.get("id_source") == "hash":
            ids = value_hashes(values)
            return ids, ids != 0
        if not self.entry.get("values"):
            raise EdoKeyError(f"table {self.name!r} was exported without its values; look rows up by id")
        ids, known = self.known_value_ids(values)
        unknown_id = self.entry.get("unknown_id")
        if unknown_id is not None:
            ids = np.where(known, ids, unknown_id)
        return ids, known

    def all_rows(self, chunk: int = 262_144) -> np.ndarray:
        """Every row as float32 [num_rows, dim] (decoded in chunks; for building indexes)."""
        return np.concatenate([self.rows(np.arange(s, min(s + chunk, self.num_rows)))
                               for s in range(0, self.num_rows, chunk)])

    def ping(self) -> None:
        """Raise StoreUnavailableError when the rows cannot be read now (a file store always can)."""
