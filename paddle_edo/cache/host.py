"""The full table with each row's optimizer state beside it, in host RAM or in a memory-mapped file."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import EdoValueError
from ..keyed_random import keyed_normal


HOST_KINDS = ("memory", "mmap")
_CHUNK_ELEMENTS = 1 << 22  # rows are initialised and copied this many floats at a time (16 MiB)


class HostStore:
    """One float32 array ``[rows, len(names), dim]``: the weight row, then its optimizer state rows
    (``moment1``, ...), so that moving a row with its state is one contiguous read or write (as
    FBGEMM keeps row-wise state in the row); 10x faster than one array per name for scattered rows.

    ``kind="mmap"`` keeps the array in a file (``path``, with its layout in ``path.json``), so a table
    larger than RAM pages in and out as rows are read and written. An existing file of the right
    size is reopened as it is (its rows are the table) when ``reopen``, else given fresh values (a normal
    of std ``init_std``, keyed by ``seed`` and each row's place in the whole table, ``global_rows`` =
    (first, step) for a rank's share; or ``fill(rows, dim)`` chunk by chunk); one of another size is refused.
    """

    def __init__(self, rows: int, dim: int, kind: str = "memory", path: str | Path | None = None,
                 init_std: float = 0.01, seed: int = 0, zero_row: int | None = None, reopen: bool = True,
                 owner: str = "HostStore", fill: Callable[[int, int], np.ndarray] | None = None,
                 global_rows: tuple[int, int] = (0, 1)) -> None:
        if kind not in HOST_KINDS:
            raise EdoValueError(f"{owner}: host = {kind!r}; expected one of {', '.join(map(repr, HOST_KINDS))}")
        if kind == "mmap" and not path:
            raise EdoValueError(f"{owner}: host = 'mmap' needs a path for the table file")
        self.rows, self.dim, self.kind, self.owner = rows, dim, kind, owner
        self.path = Path(path) if path else None
        self.names = ["weight"]
        if self.path is not None and reopen and self.path.exists():
            self.names = self._saved_names()
            self.array = self._map("r+", len(self.names))
            return
        self.array = self._allocate(len(self.names))
        first, step = global_rows
        for start, stop in self._chunks():
            rows = fill(stop - start, dim) if fill else \
                keyed_normal(seed, first + step * np.arange(start, stop, dtype=np.int64), dim, init_std)
            self.array[start:stop, 0] = rows.astype(np.float32)
        if zero_row is not None:
            self.array[zero_row] = 0.0
        self._save_layout()

    # ------------------------------------------------------------ layout
    @property
    def layout_path(self) -> Path:
        assert self.path is not None
        return self.path.with_name(self.path.name + ".json")

    def _saved_names(self) -> list[str]:
        size = self.path.stat().st_size
        names = json.loads(self.layout_path.read_text())["names"] if self.layout_path.is_file() else ["weight"]
        if size != self.rows * len(names) * self.dim * 4:
            raise EdoValueError(f"{self.owner}: {self.path} holds {size} bytes, but a {self.rows} x {self.dim} float32 "
                                f"table with {names} per row takes {self.rows * len(names) * self.dim * 4}; remove "
                                f"it or point path elsewhere")
        return names

    def _save_layout(self) -> None:
        if self.path is not None:
            self.layout_path.write_text(json.dumps({"rows": self.rows, "dim": self.dim, "names": self.names}))

    def _map(self, mode: str, width: int, path: Path | None = None) -> np.memmap:
        path = path or self.path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return np.memmap(path, dtype=np.float32, mode=mode, shape=(self.rows, width, self.dim))
        except OSError as exc:
            raise EdoValueError(f"{self.owner}: cannot open the table file {path} for writing "
                                f"({exc.strerror})") from None

    def _allocate(self, width: int, path: Path | None = None) -> np.ndarray:
        if self.kind == "memory":
            return np.empty((self.rows, width, self.dim), dtype=np.float32)
        return self._map("w+", width, path)

    def _chunks(self):
        step = max(1, _CHUNK_ELEMENTS // (self.dim * len(self.names)))
        return ((start, min(self.rows, start + step)) for start in range(0, self.rows, step))

    def set_states(self, fill_values: dict[str, float]) -> None:
        """Make the per-row state ``fill_values`` names (in that order); weights are kept, and so are
        states the store already holds under the same layout (a reopened file, a rebinding)."""
        names = ["weight", *fill_values]
        if names == self.names:
            return
        kept = {n: self.names.index(n) for n in names if n in self.names}
        target = self.path.with_name(self.path.name + ".tmp") if self.kind == "mmap" else None
        array = self._allocate(len(names), target)
        old, self.names = self.array, names
        for start, stop in self._chunks():
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
        """Rows with their state: [len(ids), len(names), dim]."""
        return np.take(self.array, ids, axis=0)

    def write(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """Rows [len(ids), k, dim]: the first k of each row's names (the weight, then state)."""
        if rows.shape[1] == len(self.names):
            self.array[ids] = rows
        else:
            self.array[ids, : rows.shape[1]] = rows

    def column(self, name: str) -> np.ndarray:
        """One named array [rows, dim] (a strided view)."""
        return self.array[:, self.names.index(name)]

    def load(self, values: dict[str, np.ndarray]) -> None:
        """Overwrite whole named arrays, chunk by chunk."""
        for start, stop in self._chunks():
            for name, value in values.items():
                self.array[start:stop, self.names.index(name)] = value[start:stop]

    def flush(self) -> None:
        """Make every write durable in the file (mmap); a no-op in RAM."""
        if isinstance(self.array, np.memmap):
            self.array.flush()

    @property
    def nbytes(self) -> int:
        return self.array.nbytes
