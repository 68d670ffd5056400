"""Exported tables opened memory-mapped with numpy alone (no copy, no Paddle): rows by id or by raw value,
packed rows decoded, and the resident bytes the mapping holds."""
from __future__ import annotations

import mmap
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..data.hashing import stable_hash
from ..errors import DataError, EdoKeyError
from ..data.vocabulary import file_digest
from .format import open_packed, read_manifest
from .reader import TableReader, value_hashes


class ValueIds:
    """A field's raw values in id order -> ids, found by stable hash (null entries have no value)."""

    def __init__(self, values: pa.Array, unknown_id: int | None) -> None:
        self.values = values
        self.unknown_id = unknown_id
        hashes = stable_hash(values)
        present = np.flatnonzero(hashes != 0)
        order = np.argsort(hashes[present], kind="stable")
        self._hashes, self._ids = hashes[present][order], present[order].astype(np.int64)

    def ids(self, values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, known): the id of each value, and whether the value has an id of its own."""
        hashes = value_hashes(values)
        if not len(self._hashes):
            return np.zeros(len(hashes), np.int64), np.zeros(len(hashes), bool)
        position = np.minimum(np.searchsorted(self._hashes, hashes), len(self._hashes) - 1)
        known = (self._hashes[position] == hashes) & (hashes != 0)
        return np.where(known, self._ids[position], -1), known

    def value(self, row_id: int) -> str | None:
        return self.values[row_id].as_py() if 0 <= row_id < len(self.values) else None


class TableStore(TableReader):
    """One exported table, memory-mapped. ``rows(ids)`` -> float32 [n, dim] (packed rows decoded, hash
    tables combined from their shared rows); ``ids_of_values(values)`` finds ids through the saved values;
    ``resident_bytes()`` is what the mapping holds in memory now."""

    def __init__(self, folder: Path, name: str, entry: dict[str, Any], verify: bool = False) -> None:
        super().__init__(name, entry)
        self.folder = folder
        self.path = folder / entry["file"]
        if not self.path.is_file():
            raise DataError(f"table {name!r}: {self.path} is missing")
        if verify:
            self.verify()
        self.codes = self.params = None
        if self.kind == "packed":
            header, self.codes, self.params = open_packed(self.path)
            for mapped in (self.codes, self.params):
                read_randomly(mapped)
            if (header["rows"], header["dim"], header["format"]) != (self.num_rows, self.dim, self.format):
                raise DataError(f"{self.path}: its header ({header['rows']} x {header['dim']} {header['format']}) "
                                f"does not match tables.json ({self.num_rows} x {self.dim} {self.format})")
        else:
            try:
                self.matrix = np.load(self.path, mmap_mode="r")
            except ValueError as exc:
                raise DataError(f"{self.path} is truncated or damaged ({exc})") from None
            read_randomly(self.matrix)
            if self.matrix.shape != (self.stored_rows, self.stored_width):
                raise DataError(f"{self.path}: rows of shape {self.matrix.shape}, tables.json says "
                                f"{(self.stored_rows, self.stored_width)}")
        self.value_ids: ValueIds | None = None
        if entry.get("values"):
            values = pq.read_table(folder / entry["values"])["value"].combine_chunks()
            self.value_ids = ValueIds(values, entry.get("unknown_id"))

    @classmethod
    def open(cls, path: str | Path, name: str | None = None, verify: bool = False) -> "TableStore":
        """A table of an export folder: ``path`` the folder (with ``name``) or the table's own file."""
        path = Path(path)
        folder, file_name = (path, None) if path.is_dir() else (path.parent, path.name)
        tables = read_manifest(folder)["tables"]
        if name is None:
            matches = [n for n, e in tables.items() if e["file"] == file_name] if file_name else list(tables)
            if len(matches) != 1:
                raise EdoKeyError(f"{path}: name one of its tables ({', '.join(tables)})")
            name = matches[0]
        if name not in tables:
            raise EdoKeyError(f"{folder} has no table {name!r}; it has {', '.join(tables)}")
        return cls(folder, name, tables[name], verify)

    def verify(self) -> None:
        """Refuse a file whose bytes are not those exported (sha256 in tables.json)."""
        if file_digest(self.path) != self.entry["sha256"]:
            raise DataError(f"{self.path} does not match its checksum in tables.json: the export is damaged "
                            f"or was changed")

    def stored_floats(self, rows: np.ndarray) -> np.ndarray:
        return np.asarray(self.matrix[rows], dtype=np.float32)

    def stored_packed(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        return self.codes[rows], None if self.params is None else self.params[rows]

    def known_value_ids(self, values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        return self.value_ids.ids(values)

    def value_of(self, row_id: int) -> str | None:
        return self.value_ids.value(row_id) if self.value_ids is not None else None

    def all_rows(self, chunk: int = 262_144) -> np.ndarray:
        if self.kind == "rows":
            return np.asarray(self.matrix, dtype=np.float32)
        return super().all_rows(chunk)

    def resident_bytes(self) -> int:
        """Bytes of this table's file mapped into memory now (Linux /proc/self/smaps; 0 elsewhere)."""
        return mapped_resident_bytes(self.path)

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "rows": self.num_rows, "dim": self.dim, "format": self.format,
                "file_bytes": self.path.stat().st_size, "resident_bytes": self.resident_bytes(),
                "values": self.value_ids is not None}


def open_tables(folder: str | Path, verify: bool = False) -> dict[str, TableStore]:
    """Every table of an export folder, by name (TableStore each). DataError names a missing, truncated or
    damaged file (with ``verify``, one whose sha256 differs from tables.json's)."""
    folder = Path(folder)
    return {name: TableStore(folder, name, entry, verify) for name, entry in read_manifest(folder)["tables"].items()}


def read_randomly(array: np.ndarray | None) -> None:
    """Tell the kernel a mapping is read at random rows (MADV_RANDOM): a lookup then reads the pages of
    its rows, not a readahead window around each (on a cold cache, 1,000 rows of a 1 GiB table brought
    4 MiB in with it, where readahead would bring far more)."""
    handle = getattr(array, "_mmap", None)
    if handle is not None and hasattr(mmap, "MADV_RANDOM"):
        handle.madvise(mmap.MADV_RANDOM)


def mapped_resident_bytes(path: Path) -> int:
    """Resident bytes of the mappings of ``path`` in this process (the Rss lines of /proc/self/smaps)."""
    smaps = Path("/proc/self/smaps")
    if not smaps.exists():
        return 0
    target, total, inside = str(Path(path).resolve()), 0, False
    for line in smaps.read_text().splitlines():
        if "-" in line.split(" ", 1)[0] and len(line.split()) >= 5:  # a mapping's header line
            inside = line.split()[-1] == target
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1]) * 1024
    return total
