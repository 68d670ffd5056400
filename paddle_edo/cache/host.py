"""The full table with each row's optimizer state beside it, in host RAM or in a memory-mapped file; or its
rows alone, packed (fp16 or int8 records)."""
from __future__ import annotations

import contextlib
import json
import mmap
import os
from pathlib import Path
from typing import Callable, Iterator, Protocol

import numpy as np

from ..errors import EdoValueError
from ..keyed_random import keyed_normal, rounding_seed


HOST_KINDS = ("memory", "mmap")
_CHUNK_ELEMENTS = 1 << 22  # rows are initialised and copied this many floats at a time (16 MiB)


class Records(Protocol):
    """How packed rows become byte records and back (quant.row_records.RowRecords)."""

    record_bytes: int

    def encode(self, rows: np.ndarray, global_rows: np.ndarray | None = None, seed: int | None = None
               ) -> np.ndarray: ...

    def decode(self, records: np.ndarray) -> np.ndarray: ...


class HostStore:
    """One float32 array ``[rows, len(names), dim]``: the weight row, then its optimizer state rows
    (``moment1``, ...), so that moving a row with its state is one contiguous read or write (as
    FBGEMM keeps row-wise state in the row); 10x faster than one array per name for scattered rows.

    ``kind="mmap"`` keeps the array in a file (``path``, with its layout in ``path.json``), so a table
    larger than RAM pages in and out as rows are read and written. An existing file of the right
    size is reopened as it is (its rows are the table) when ``reopen``, else given fresh values (a normal
    of std ``init_std``, keyed by ``seed`` and each row's place in the whole table, ``global_rows`` =
    (first, step) for a rank's share; or ``fill(rows, dim)`` chunk by chunk); one of another size is refused.

    With ``records`` the store keeps the rows alone, as uint8 records ``[rows, records.record_bytes]``
    (a quarter of the bytes and a scale as int8 at dim 64): fresh rows are rounded to nearest, written rows
    stochastically (a new key each write, ``rounding_seed(rounding_key)``, and each row's place in the whole
    table),
    and a read decodes. Such a store keeps no optimizer state.
    """

    def __init__(self, rows: int, dim: int, kind: str = "memory", path: str | Path | None = None,
                 init_std: float = 0.01, seed: int = 0, zero_row: int | None = None, reopen: bool = True,
                 owner: str = "HostStore", fill: Callable[[int, int], np.ndarray] | None = None,
                 global_rows: tuple[int, int] = (0, 1), records: Records | None = None, rounding_key: str = "") -> None:
        if kind not in HOST_KINDS:
            raise EdoValueError(f"{owner}: host = {kind!r}; expected one of {', '.join(map(repr, HOST_KINDS))}")
        if kind == "mmap" and not path:
            raise EdoValueError(f"{owner}: host = 'mmap' needs a path for the table file")
        self.rows, self.dim, self.kind, self.owner = rows, dim, kind, owner
        self.records, self.global_rows = records, global_rows
        self.rounding_key = rounding_key or owner  # its table's name in keyed_random.rounding_seed
        self.path = Path(path) if path else None
        self.names = ["weight"]
        if self.path is not None and reopen and self.path.exists():
            self.names = self._saved_names()
            self.array = self._map("r+", len(self.names))
            return
        self.array = self._allocate(len(self.names))
        first, step = global_rows
        for start, stop in self._passes():
            rows = fill(stop - start, dim) if fill else \
                keyed_normal(seed, first + step * np.arange(start, stop, dtype=np.int64), dim, init_std)
            if records is None:
                self.array[start:stop, 0] = rows.astype(np.float32)
            else:
                self.array[start:stop] = records.encode(rows.astype(np.float32))
        if zero_row is not None:
            self.array[zero_row] = 0.0 if records is None else records.encode(np.zeros((1, dim), np.float32))[0]
        self._save_layout()

    # ------------------------------------------------------------ layout
    @property
    def layout_path(self) -> Path:
        assert self.path is not None
        return self.path.with_name(self.path.name + ".json")

    def _saved_names(self) -> list[str]:
        size = self.path.stat().st_size
        names = json.loads(self.layout_path.read_text())["names"] if self.layout_path.is_file() else ["weight"]
        if size != self.rows * self._row_bytes(len(names)):
            what = f"float32 table with {names} per row" if self.records is None else \
                f"table of {self.records.record_bytes}-byte records"
            raise EdoValueError(f"{self.owner}: {self.path} holds {size} bytes, but a {self.rows} x {self.dim} {what} "
                                f"takes {self.rows * self._row_bytes(len(names))}; remove it or point path elsewhere")
        return names

    def _row_bytes(self, width: int) -> int:
        return width * self.dim * 4 if self.records is None else self.records.record_bytes

    def _save_layout(self) -> None:
        if self.path is not None:
            self.layout_path.write_text(json.dumps({"rows": self.rows, "dim": self.dim, "names": self.names,
                                                    "record_bytes": self._row_bytes(len(self.names))}))

    def _shape(self, width: int) -> tuple[tuple[int, ...], type]:
        if self.records is None:
            return (self.rows, width, self.dim), np.float32
        return (self.rows, self.records.record_bytes), np.uint8

    def _map(self, mode: str, width: int, path: Path | None = None) -> np.memmap:
        path = path or self.path
        shape, dtype = self._shape(width)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            array = np.memmap(path, dtype=dtype, mode=mode, shape=shape)
        except OSError as exc:
            raise EdoValueError(f"{self.owner}: cannot open the table file {path} for writing "
                                f"({exc.strerror})") from None
        # rows come and go one by one, scattered: the kernel's readahead would read 32 pages around each
        # (a 68-byte int8 row cost 128 KiB of reads, 1.2 GB/s of a disk for 16,000 rows a step)
        array._mmap.madvise(mmap.MADV_RANDOM)
        return array

    @contextlib.contextmanager
    def _sequential(self) -> Iterator[None]:
        """A pass over the whole file in order: readahead on for it, off again after."""
        mapped = getattr(self.array, "_mmap", None)
        if mapped is not None:
            mapped.madvise(mmap.MADV_SEQUENTIAL)
        try:
            yield
        finally:
            if mapped is not None:
                mapped.madvise(mmap.MADV_RANDOM)

    def _passes(self) -> Iterator[tuple[int, int]]:
        """``_chunks`` in order, the file read ahead meanwhile."""
        with self._sequential():
            yield from self._chunks()

    def _allocate(self, width: int, path: Path | None = None) -> np.ndarray:
        if self.kind == "memory":
            shape, dtype = self._shape(width)
            return np.empty(shape, dtype=dtype)
        return self._map("w+", width, path)

    def _chunks(self):
        step = max(1, _CHUNK_ELEMENTS // (self.dim * len(self.names)))
        return ((start, min(self.rows, start + step)) for start in range(0, self.rows, step))

    def set_states(self, fill_values: dict[str, float]) -> None:
        """Make the per-row state ``fill_values`` names (in that order); weights are kept, and so are
        states the store already holds under the same layout (a reopened file, a rebinding). A store of
        packed rows keeps none (EdoValueError naming them)."""
        names = ["weight", *fill_values]
        if names == self.names:
            return
        if self.records is not None:
            raise EdoValueError(f"{self.owner}: packed host rows keep no optimizer state, but the optimizer keeps "
                                f"{list(fill_values)} a row; train the table with SGD or a table rule "
                                f"(train.table_optimizer.name), or keep its host rows in float32")
        kept = {n: self.names.index(n) for n in names if n in self.names}
        target = self.path.with_name(self.path.name + ".tmp") if self.kind == "mmap" else None
        array = self._allocate(len(names), target)
        old, self.names = self.array, names
        for start, stop in self._passes():
            for position, name in enumerate(names):
                if name in kept:
                    array[start:stop, position] = old[start:stop, kept[name]]
                else:
                    array[start:stop, position] = fill_values[name]
        if target is not None:
            array.flush()
            del old
            os.replace(target, self.path)
            array = self._map("r+", len(names))
        self.array = array
        self._save_layout()

    @property
    def state_names(self) -> list[str]:
        return self.names[1:]

    # ------------------------------------------------------------- rows
    def read(self, ids: np.ndarray) -> np.ndarray:
        """Rows with their state: [len(ids), len(names), dim] float32 (packed rows decoded)."""
        if self.records is not None:
            return self.records.decode(np.take(self.array, ids, axis=0))[:, None]
        return np.take(self.array, ids, axis=0)

    def write(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """Rows [len(ids), k, dim]: the first k of each row's names (the weight, then state); packed rows
        are re-encoded with stochastic rounding."""
        if self.records is not None:
            first, step = self.global_rows
            self.array[ids] = self.records.encode(rows[:, 0], first + step * np.asarray(ids, dtype=np.int64),
                                                  rounding_seed(self.rounding_key))
        elif rows.shape[1] == len(self.names):
            self.array[ids] = rows
        else:
            self.array[ids, : rows.shape[1]] = rows

    def column(self, name: str) -> np.ndarray:
        """One named array [rows, dim]: in RAM a strided view; from a file a copy read in order (packed
        rows decoded)."""
        if self.kind == "memory" and self.records is None:
            return self.array[:, self.names.index(name)]
        column = np.empty((self.rows, self.dim), dtype=np.float32)
        for start, stop in self._passes():
            column[start:stop] = self.array[start:stop, self.names.index(name)] if self.records is None else \
                self.records.decode(self.array[start:stop])
        return column

    def load(self, values: dict[str, np.ndarray]) -> None:
        """Overwrite whole named arrays, chunk by chunk (packed rows: ``records``, byte records as they
        are, or ``weight`` rounded to nearest)."""
        for start, stop in self._passes():
            for name, value in values.items():
                if self.records is None:
                    self.array[start:stop, self.names.index(name)] = value[start:stop]
                elif name == "records":
                    self.array[start:stop] = value[start:stop]
                else:
                    self.array[start:stop] = self.records.encode(np.asarray(value[start:stop], dtype=np.float32))

    def flush(self) -> None:
        """Make every write durable in the file (mmap); a no-op in RAM."""
        if isinstance(self.array, np.memmap):
            self.array.flush()

    @property
    def nbytes(self) -> int:
        return self.array.nbytes
