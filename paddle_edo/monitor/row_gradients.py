"""Read the row gradients of embedding tables after backward, and summarise many tables at once.

A sparse gradient keeps one entry per lookup; a row's gradient is the sum of its entries. The summary
merges repeated rows and takes norms for all tables of one width in a few numpy calls, because on a
CTR model with tens of tables per-table numpy overhead, not arithmetic, is the monitor's cost.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import paddle


@dataclass
class RowGradients:
    """One table's gradient this step: rows as looked up (repeats possible) and, when read, values."""

    rows: np.ndarray                 # int64 [N]
    grads: np.ndarray | None         # float32 [N, D]
    sparse: bool                     # False: the table received a dense [num_rows, D] gradient


@dataclass
class GradientSummary:
    """One table's row gradients merged per row: distinct rows, their finite norms (ascending) and the
    rows whose gradient holds NaN or Inf."""

    rows: np.ndarray                 # int64 [U], sorted, padding excluded
    norms: np.ndarray                # float32 [U - bad], ascending
    bad_rows: np.ndarray             # int64, rows with a NaN/Inf gradient
    sparse: bool

    @property
    def mean(self) -> float:
        return float(self.norms.mean())

    @property
    def max(self) -> float:
        return float(self.norms[-1])

    def percentile(self, q: float) -> float:
        """np.percentile's default (linear interpolation) of the sorted norms."""
        position = (len(self.norms) - 1) * q / 100.0
        low = int(position)
        high = min(low + 1, len(self.norms) - 1)
        return float(self.norms[low] + (self.norms[high] - self.norms[low]) * (position - low))


def read_row_gradients(layer: paddle.nn.Layer, with_values: bool = True) -> RowGradients | None:
    """Row gradients of one table, or None when it got no gradient this step. Without values only the
    row ids are read (no values leave the device)."""
    own = getattr(layer, "row_gradients", None)
    found = own() if own is not None else None  # rows a layer updates itself (low_precision, caches)
    if found is not None:
        values = found[1].numpy().astype(np.float32, copy=False) if with_values else None
        return RowGradients(found[0].numpy(), values, sparse=True)
    weight = getattr(layer, "weight", None)
    if weight is None or weight.stop_gradient:
        return None
    grad = weight._grad_ivar()
    if grad is None or not grad._is_initialized():
        return None
    if grad.is_selected_rows():
        rows = np.asarray(grad.rows(), dtype=np.int64)
        if rows.size == 0:
            return None
        values = grad._get_tensor_from_selected_rows().numpy().astype(np.float32, copy=False) if with_values else None
        return RowGradients(rows, values, sparse=True)
    touched = np.flatnonzero((grad != 0).any(axis=1).numpy())
    if touched.size == 0:
        return None
    values = paddle.gather(grad, paddle.to_tensor(touched)).astype("float32").numpy() if with_values else None
    return RowGradients(touched, values, sparse=False)


def summarize(gradients: list[tuple[RowGradients, int | None]]) -> list[GradientSummary | None]:
    """Per table (its gradients with values, and its padding row): the merged summary, or None when only
    padding rows were touched.

    Tables that looked up the same rows (a field's embedding and first-order tables) are merged as one,
    their columns side by side; groups with the same column layout are merged in one sort."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, (grads, padding) in enumerate(gradients):
        groups[(padding, grads.rows.size, grads.rows.tobytes())].append(i)
    layouts: dict[tuple[int, ...], list[list[int]]] = defaultdict(list)
    for members in groups.values():
        layouts[tuple(gradients[i][0].grads.shape[1] for i in members)].append(members)
    out: list[GradientSummary | None] = [None] * len(gradients)
    for widths, batch in layouts.items():
        _summarize_layout(gradients, widths, batch, out)
    return out


def _summarize_layout(gradients: list[tuple[RowGradients, int | None]], widths: tuple[int, ...],
                      batch: list[list[int]], out: list[GradientSummary | None]) -> None:
    """Merge groups of tables that share rows and column layout: one sort, one segmented sum."""
    firsts = [gradients[members[0]] for members in batch]
    owner = np.repeat(np.arange(len(batch)), [g.rows.size for g, _ in firsts])
    rows = np.concatenate([g.rows for g, _ in firsts])
    columns = [np.concatenate([gradients[members[k]][0].grads for members in batch]) for k in range(len(widths))]
    values = np.concatenate(columns, axis=1) if len(columns) > 1 else columns[0]
    stride = int(rows.max()) + 1
    order = np.argsort(owner * stride + rows) if stride < 2**62 // len(batch) else np.lexsort((rows, owner))
    owner, rows = owner[order], rows[order]
    starts = np.flatnonzero(np.r_[True, (rows[1:] != rows[:-1]) | (owner[1:] != owner[:-1])])
    merged = np.add.reduceat(np.take(values, order, axis=0), starts, axis=0)
    rows, owner = rows[starts], owner[starts].astype(np.int16 if len(batch) < 2**15 else np.int64)
    paddings = np.array([-1 if padding is None else padding for _, padding in firsts])
    keep = rows != paddings[owner]                    # padding lookups are not updates
    if not keep.all():
        owner, rows, merged = owner[keep], rows[keep], merged[keep]
    squares = merged * merged
    column_starts = np.cumsum((0,) + widths[:-1])
    norms = np.sqrt(np.add.reduceat(squares, column_starts, axis=1) if len(widths) > 1 else squares.sum(axis=1,
                                                                                                          keepdims=True))
    bounds = np.searchsorted(owner, np.arange(len(batch) + 1))
    for k in range(len(widths)):
        by_norm = np.argsort(norms[:, k])              # ascending, NaN and Inf last; then grouped by owner
        by_norm = by_norm[np.argsort(owner[by_norm], kind="stable")]  # (a radix sort: small integers)
        for g, members in enumerate(batch):
            a, b = bounds[g], bounds[g + 1]
            if a == b:
                continue
            table_norms = norms[by_norm[a:b], k]
            good = b - a if np.isfinite(table_norms[-1]) else int(np.isfinite(table_norms).sum())
            bad_rows = np.sort(rows[by_norm[a + good:b]]) if good < b - a else rows[:0]
            out[members[k]] = GradientSummary(rows[a:b], table_norms[:good], bad_rows, gradients[members[k]][0].sparse)
