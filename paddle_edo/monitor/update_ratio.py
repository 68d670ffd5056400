"""Update-to-weight ratio of embedding tables: ||rows after the optimizer step - rows before|| /
||rows before||, over the rows a logged step updated.

The rows are saved before the step and compared after it. CPU float32 tables whose distinct rows are
already known (the monitor's inline path) are saved and compared by the native kernel
(kernels/row_norms.cc), one call for all tables each time, reading the weights in place. Other tables (on
an accelerator, packed, cached, read for the worker thread, or without the kernel) are copied to numpy,
whole when they are small.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import paddle

from ..kernels import address, c_function
from ..host_memory import host_view

SMALL_TABLE_ELEMENTS = 1 << 16  # below this, copying the whole table to the host beats a gather op


def copy_rows(table: Any, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The values of ``table`` (a monitored table: ``read`` and ``layer``) that the ratio needs, copied to
    the host now: (values, the rows they hold), or (the whole table, None) when it is small. A large CPU
    table's rows are taken from its memory in place; packed tables are decoded; a cache gives its
    resident rows."""
    weight = table.read.weight
    if weight is None:
        return table.layer.decode_rows(paddle.to_tensor(rows)).numpy(), rows
    shape = weight.shape  # (Tensor.size runs an op; the shape is free)
    if shape[0] * shape[1] <= SMALL_TABLE_ELEMENTS:
        return weight.numpy(), None
    if table.read.on_host:
        return np.take(host_view(weight), rows, axis=0), rows
    return paddle.gather(weight.detach(), paddle.to_tensor(rows, place=weight.place)).numpy(), rows


def positions(held: np.ndarray | None, rows: np.ndarray) -> np.ndarray | slice:
    """Where each of ``rows`` sits in a copy holding the rows ``held`` (None: the whole table; ``rows``
    itself: in order)."""
    if held is None:
        return rows
    if held is rows:
        return slice(None)
    order = np.argsort(held, kind="stable")
    return order[np.searchsorted(held[order], rows)]


def update_ratios(pairs: list[tuple[np.ndarray, np.ndarray]]) -> list[float]:
    """||after - before|| / ||before|| of each (rows before, rows after) pair, 0 for all-zero rows."""
    ratios = []
    for before, after in pairs:
        change = after - before
        weight = float(np.vdot(before, before))
        ratios.append(math.sqrt(float(np.vdot(change, change)) / weight) if weight > 0 else 0.0)
    return ratios


class SavedRows:
    """Rows of several monitored tables, saved before the optimizer step. ``tables``: (index, table, rows);
    ``distinct``: each row appears once in its rows (else: as looked up, repeats included, and the
    distinct rows come later, to ``ratios``)."""

    def __init__(self, tables: list[tuple[int, Any, np.ndarray]], distinct: bool) -> None:
        save = c_function("edo_save_rows") if distinct else None
        in_place, self.copied = [], []
        for index, table, rows in tables:
            if save is not None and table.read.on_host:
                in_place.append((index, table, rows))
            else:
                self.copied.append((index, table, *copy_rows(table, rows), rows))
        self.in_place = [(index, table) for index, table, _ in in_place]
        if not in_place:
            return
        # every array the kernel reads is held by a name until the ratios are taken
        self._rows = [np.ascontiguousarray(rows, dtype=np.int64) for *_, rows in in_place]
        self._row_pointers = np.array([address(rows) for rows in self._rows], dtype=np.uintp)
        self._counts = np.array([rows.size for rows in self._rows], dtype=np.int64)
        self._widths = np.array([table.read.weight.shape[1] for _, table in self.in_place], dtype=np.int64)
        self._saved = np.empty(int(self._counts @ self._widths), dtype=np.float32)
        weights = self._weights()
        save(len(in_place), address(weights), address(self._widths), address(self._row_pointers),
             address(self._counts), address(self._saved))

    def _weights(self) -> np.ndarray:
        """The in-place tables' weights' addresses now (an optimizer may move a weight)."""
        return np.array([table.read.weight.data_ptr() for _, table in self.in_place], dtype=np.uintp)

    def after(self) -> tuple[list[tuple[int, float]], list[np.ndarray]]:
        """After the optimizer step: the (index, ratio) of the tables compared in place, and copies of the
        other tables' rows (for ``ratios``, which may run later, on another thread)."""
        done = []
        if self.in_place:
            ratios = np.empty(len(self.in_place))
            weights = self._weights()
            c_function("edo_update_ratios")(len(self.in_place), address(weights), address(self._widths),
                                            address(self._row_pointers), address(self._counts),
                                            address(self._saved), address(ratios))
            done = list(zip([index for index, _ in self.in_place], ratios.tolist()))
        return done, [copy_rows(table, rows)[0] for _, table, _, _, rows in self.copied]

    def ratios(self, after: tuple[list[tuple[int, float]], list[np.ndarray]],
               distinct_rows: dict[int, np.ndarray]) -> list[tuple[int, float]]:
        """(index, ratio) of every table, given ``after()`` and each copied table's distinct rows (a table
        missing from ``distinct_rows`` looked up only padding rows: no ratio)."""
        done, copies = after
        pairs, indices = [], []
        for (index, _, before, held, _), now in zip(self.copied, copies):
            rows = distinct_rows.get(index)
            if rows is not None:
                at = positions(held, rows)
                pairs.append((before[at], now[at]))
                indices.append(index)
        return done + list(zip(indices, update_ratios(pairs)))
