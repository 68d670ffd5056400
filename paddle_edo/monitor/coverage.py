"""Coverage: which rows of each table were ever updated, for many tables at the cost of one.

All tables' flags live in one boolean array (each table at its offset), so the ids of several steps and
tables are marked at once: in one call of the native kernel (kernels/row_norms.cc) when it was built, else
with a handful of numpy calls; per-table counts grow as rows turn on, so no table is ever summed again.
Inside a training loop each call costs tens of microseconds (caches are cold after the step's kernels),
so steps are gathered and marked together.
"""
from __future__ import annotations

import numpy as np

from ..errors import EdoIndexError
from ..kernels import address, c_function


class Coverage:
    """Rows ever updated per named table (padding rows excluded), and the step each table last grew."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.starts: list[int] = []
        self.sizes: list[int] = []
        self.paddings: list[int | None] = []
        self.flags = np.zeros(0, dtype=bool)
        self.counts = np.zeros(0, dtype=np.int64)
        self.capacity = np.zeros(0, dtype=np.int64)    # rows that can be updated: padding excluded
        self.last_growth = np.zeros(0, dtype=np.int64)
        self._full: list[bool] = []                      # per table: every row marked
        self._index: dict[str, int] = {}
        self._starts = np.zeros(0, dtype=np.int64)
        self._sizes = np.zeros(0, dtype=np.int64)
        self._bounds_cache: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self._pending: list[tuple[int, tuple[int, ...], tuple[int, ...], np.ndarray]] = []
        self.batch_steps = 16

    def __contains__(self, name: str) -> bool:
        return name in self._index

    @property
    def tracked(self) -> list[str]:
        """Every name, shared ones included."""
        return list(self._index)

    def share(self, name: str, of: str) -> None:
        """Let ``name`` read and update the rows of ``of`` (two tables looking up the same ids)."""
        self.flush()
        self._index[name] = self._index[of]

    def separate(self, name: str) -> None:
        """Give a shared name its own rows again, starting from what it shared."""
        self.flush()
        index = self._index.pop(name)
        start, size = self.starts[index], self.sizes[index]
        self.add(name, size, self.paddings[index])
        new = self._index[name]
        self.flags[self.starts[new]:] = self.flags[start:start + size]
        self.counts[new], self.last_growth[new] = self.counts[index], self.last_growth[index]
        self._mark_full()

    def add(self, name: str, rows: int, padding_idx: int | None = None) -> None:
        """Track a table of ``rows`` rows; its padding row, if any, counts as neither updated nor cold."""
        self.flush()
        self._index[name] = len(self.names)
        self.names.append(name)
        self.starts.append(self.flags.size)
        self._starts = np.asarray(self.starts, dtype=np.int64)
        self.sizes.append(int(rows))
        self._sizes = np.asarray(self.sizes, dtype=np.int64)
        self.paddings.append(padding_idx)
        flags = np.zeros(rows, dtype=bool)
        if padding_idx is not None:
            flags[padding_idx] = True  # never "fresh", so never counted
        self.flags = np.concatenate([self.flags, flags])
        self.counts = np.append(self.counts, 0)
        self.capacity = np.append(self.capacity, rows - (padding_idx is not None))
        self.last_growth = np.append(self.last_growth, 0)
        self._mark_full()

    def _mark_full(self) -> None:
        """Note which tables have every row marked (a list: read per table on every step)."""
        self._full = (self.counts >= self.capacity).tolist()

    def update(self, step: int, parts: list[tuple[str, np.ndarray]]) -> None:
        """Mark the rows each named table updated (or looked up) at ``step``. Steps are gathered (copied)
        and marked together, up to ``batch_steps`` at a time or when a figure is asked for. Tables whose
        rows are all marked are skipped: they cannot grow (small-vocabulary fields fill in a few steps), and
        their ids are no longer range-checked (the lookup itself refuses rows outside a table)."""
        full = self._full
        parts = [(index, rows) for index, rows in ((self._index[name], rows) for name, rows in parts)
                 if not full[index]]
        if not parts:
            return
        indices = tuple(index for index, _ in parts)
        arrays = [rows.ravel() for _, rows in parts]
        self._pending.append((step, indices, tuple(a.size for a in arrays), np.concatenate(arrays)))
        if len(self._pending) >= self.batch_steps:
            self.flush()

    def flush(self) -> None:
        """Mark the gathered steps' rows; a row's growth step is the first step that touched it. Native when
        the kernels are at hand (one call instead of some fifteen numpy calls); numpy is the reference."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        rows = np.concatenate([rows for *_, rows in pending]) if len(pending) > 1 else pending[0][3]
        kernel = c_function("edo_mark_rows")
        if kernel is not None:
            tables = np.array([i for _, indices, _, _ in pending for i in indices], dtype=np.int64)
            counts = np.array([n for _, _, lengths, _ in pending for n in lengths], dtype=np.int64)
            steps = np.array([step for step, indices, _, _ in pending for _ in indices], dtype=np.int64)
            rows = np.ascontiguousarray(rows, dtype=np.int64)
            at = kernel(len(tables), address(tables), address(counts), address(steps), address(rows),
                        address(self._starts), address(self._sizes), address(self.flags.view(np.uint8)),
                        address(self.counts), address(self.last_growth))
            if at >= 0:
                part = int(np.searchsorted(np.cumsum(counts), at, side="right"))
                self._refuse(int(tables[part]), int(rows[at]), int(steps[part]))
            self._mark_full()
            return
        low, size = self._bounds(tuple((indices, lengths) for _, indices, lengths, _ in pending))
        outside = rows.view(np.uint64) >= size  # negative rows wrap around to huge ones
        if outside.any():
            at = int(np.flatnonzero(outside)[0])
            index = int(np.searchsorted(self._starts, low[at], side="right")) - 1
            step = pending[int(np.searchsorted(np.cumsum([r.size for *_, r in pending]), at, side="right"))][0]
            self._refuse(index, int(rows[at]), step)
        keys = rows + low
        fresh = np.flatnonzero(~self.flags[keys])
        if not fresh.size:
            return
        new_keys, first = np.unique(keys[fresh], return_index=True)   # steps are in order: first = earliest
        self.flags[new_keys] = True
        owners = np.searchsorted(self._starts, new_keys, side="right") - 1
        self.counts += np.bincount(owners, minlength=len(self.names))
        self._mark_full()
        steps = np.repeat([step for step, *_ in pending], [r.size for *_, r in pending])[fresh[first]]
        np.maximum.at(self.last_growth, owners, steps)

    def _refuse(self, index: int, row: int, step: int) -> None:
        raise EdoIndexError(f"SparseGradMonitor: {self.names[index]} got row {row} at step {step}, outside "
                            f"[0, {self.sizes[index]})")

    def _bounds(self, layout: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]) -> tuple[np.ndarray, np.ndarray]:
        """Per gathered row: its table's offset and size, for steps of these (tables, lengths). Kept: the
        same every flush but the last of an epoch."""
        if layout not in self._bounds_cache:
            if len(self._bounds_cache) > 8:
                self._bounds_cache.clear()
            indices = [i for step_indices, _ in layout for i in step_indices]
            lengths = [n for _, step_lengths in layout for n in step_lengths]
            self._bounds_cache[layout] = (np.repeat(self._starts[indices], lengths),
                                          np.repeat(np.asarray(self.sizes, dtype=np.uint64)[indices], lengths))
        return self._bounds_cache[layout]

    def percent(self, name: str) -> float:
        """Share of the table's rows (padding excluded) updated at least once, in percent."""
        self.flush()
        index = self._index[name]
        return 100.0 * int(self.counts[index]) / max(int(self.capacity[index]), 1)

    def percents(self) -> list[tuple[str, float]]:
        """(name, percent) of every name, shared ones included, at once."""
        self.flush()
        shares = (100.0 * self.counts / np.maximum(self.capacity, 1)).tolist()
        return [(name, shares[index]) for name, index in self._index.items()]

    def never_updated(self, name: str, lookups: np.ndarray | None = None) -> tuple[int, float | None]:
        """(rows never updated, their share of ``lookups`` in percent, padding lookups left out)."""
        self.flush()
        index = self._index[name]
        cold = int(self.capacity[index] - self.counts[index])
        if lookups is None:
            return cold, None
        lookups = lookups.ravel()
        if self.paddings[index] is not None:
            lookups = lookups[lookups != self.paddings[index]]
        flags = self.flags[self.starts[index]:self.starts[index] + self.sizes[index]]
        return cold, (100.0 * float((~flags[lookups]).mean()) if lookups.size else 0.0)

    def last_growth_of(self, name: str) -> int:
        self.flush()
        return int(self.last_growth[self._index[name]])

    def stalled(self, step: int, patience: int) -> list[str]:
        """Tables short of 100% that gained no row in the last ``patience`` steps."""
        self.flush()
        late = (step - self.last_growth >= patience) & (self.counts < self.capacity)
        return [self.names[i] for i in np.flatnonzero(late)]
