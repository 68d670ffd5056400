"""Vocabularies of raw values: counted over streamed batches with pyarrow's hash aggregation, ids by
descending count, looked up by stable hash, saved atomically beside the run."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..errors import DataError
from .hashing import stable_hash

REDUCE_EVERY = 2_000_000  # distinct (value, count) pairs held before they are merged


def as_strings(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One string array (numbers as their text), whitespace trimmed, empty cells null."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], pa.string())
    if not pa.types.is_string(values.type):
        values = pc.cast(values, pa.string())
    trimmed = pc.utf8_trim_whitespace(values)
    return pc.if_else(pc.equal(trimmed, ""), pa.scalar(None, pa.string()), trimmed)


class ValueCounter:
    """How often each value of one column occurs, over any number of batches, in bounded pieces."""

    def __init__(self) -> None:
        self._parts: list[pa.Table] = []
        self._pending = 0

    def add(self, values: pa.Array) -> None:
        counts = pc.value_counts(values.drop_null())
        self._parts.append(pa.table({"value": counts.field("values"), "count": counts.field("counts")}))
        self._pending += len(counts)
        if self._pending > REDUCE_EVERY:
            self._reduce()

    def _reduce(self) -> None:
        if len(self._parts) > 1:
            merged = pa.concat_tables(self._parts).group_by("value").aggregate([("count", "sum")])
            self._parts = [pa.table({"value": merged["value"], "count": merged["count_sum"]})]
        self._pending = self._parts[0].num_rows if self._parts else 0

    def counts(self) -> pa.Table:
        """Columns ``value`` (string) and ``count`` (int64), one row per distinct value."""
        self._reduce()
        return self._parts[0] if self._parts else pa.table({"value": pa.array([], pa.string()),
                                                            "count": pa.array([], pa.int64())})


class Vocabulary:
    """A column's values -> ids 1..size-1, most frequent first (ties by value); 0 is the unknown id,
    shared by missing, rare and unseen values."""

    def __init__(self, column: str, values: pa.Array, counts: np.ndarray) -> None:
        self.column = column
        self.values = values
        self.counts = np.asarray(counts, dtype=np.int64)
        hashes = stable_hash(values)
        order = np.argsort(hashes, kind="stable")
        self._sorted_hashes = hashes[order]
        self._ids = (order + 1).astype(np.int64)
        same = np.flatnonzero(np.diff(self._sorted_hashes) == 0)
        if same.size:  # two distinct values with one 64-bit hash: about 1 in 10^5 for 10^7 values
            a, b = (values[int(order[i])].as_py() for i in (same[0], same[0] + 1))
            raise DataError(f"column {column!r}: values {a!r} and {b!r} have the same 64-bit hash; "
                            f"give the column ids: hash or change min_count")

    @classmethod
    def build(cls, column: str, counted: pa.Table, min_count: int = 1, max_size: int | None = None
              ) -> "Vocabulary":
        """Values counted at least ``min_count`` times, the most frequent ``max_size - 1`` of them."""
        kept = counted.filter(pc.greater_equal(counted["count"], min_count))
        kept = kept.sort_by([("count", "descending"), ("value", "ascending")])
        if max_size is not None:
            kept = kept.slice(0, max_size - 1)
        return cls(column, kept["value"].combine_chunks(), kept["count"].to_numpy())

    @property
    def size(self) -> int:
        """Ids, the unknown id 0 included (the field's table rows)."""
        return len(self.values) + 1

    def ids_of_hashes(self, hashes: np.ndarray) -> np.ndarray:
        """The id of each hashed value (stable_hash), 0 where the value is not in the vocabulary."""
        if not len(self._sorted_hashes):
            return np.zeros(len(hashes), dtype=np.int64)
        position = np.minimum(np.searchsorted(self._sorted_hashes, hashes), len(self._sorted_hashes) - 1)
        return np.where(self._sorted_hashes[position] == hashes, self._ids[position], 0)

    def ids(self, values: pa.Array) -> np.ndarray:
        """int64 [N] ids of raw values (strings, or numbers by their text)."""
        return map_distinct(as_strings(values), lambda distinct: self.ids_of_hashes(stable_hash(distinct)))

    def save(self, path: str | Path) -> str:
        """Write the vocabulary (values and counts, in id order) atomically; returns its sha256."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        table = pa.table({"value": self.values, "count": pa.array(self.counts, pa.int64())})
        table = table.replace_schema_metadata({"paddle_edo.column": self.column})
        temporary = path.with_name(path.name + ".tmp")
        pq.write_table(table, temporary)
        digest = file_digest(temporary)
        os.replace(temporary, path)
        return digest

    @classmethod
    def load(cls, path: str | Path, column: str, digest: str | None = None) -> "Vocabulary":
        """Read a saved vocabulary, refusing one of another column or whose bytes changed."""
        path = Path(path)
        if not path.is_file():
            raise DataError(f"vocabulary file {path} is missing (column {column!r})")
        if digest is not None and file_digest(path) != digest:
            raise DataError(f"vocabulary file {path} does not match the run's data plan (its checksum "
                            f"changed): prepare the data again or restore the file")
        try:
            table = pq.read_table(path)
        except (pa.ArrowException, OSError) as exc:
            raise DataError(f"vocabulary file {path} cannot be read ({exc})") from None
        saved = (table.schema.metadata or {}).get(b"paddle_edo.column", b"").decode()
        if saved != column or table.column_names != ["value", "count"]:
            raise DataError(f"vocabulary file {path} is for column {saved!r}, not {column!r}")
        return cls(column, table["value"].combine_chunks(), table["count"].to_numpy())


def map_distinct(strings: pa.Array, ids_of: Callable[[pa.Array], np.ndarray]) -> np.ndarray:
    """int64 [N] ids of string cells, computed once per distinct value (``ids_of``); null -> 0."""
    encoded = pc.dictionary_encode(strings)
    per_value = np.append(ids_of(encoded.dictionary), np.int64(0))  # the last entry serves nulls
    indices = np.asarray(pc.fill_null(encoded.indices, len(encoded.dictionary)), dtype=np.int64)
    return per_value[indices]


def file_digest(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_json_atomically(path: str | Path, content: dict) -> None:
    """Write ``content`` as JSON so that ``path`` always holds a whole file: into a temporary file of this
    process, flushed to disk, then renamed over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(temporary, "w", encoding="utf-8") as f:
            f.write(json.dumps(content, indent=1, ensure_ascii=False))
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()
