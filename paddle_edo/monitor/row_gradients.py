"""Read the row gradients of embedding tables after backward, and summarise many tables at once.

A sparse gradient keeps one entry per lookup; a row's gradient is the sum of its entries. The summary
merges repeated rows and takes norms for all tables of one layout at once, because on a CTR model with
tens of tables per-table overhead, not arithmetic, is the monitor's cost: in one call of the native
kernel (kernels/row_norms.cc, a third of the numpy path's time) when it was built, else in a few numpy
calls (the reference).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import paddle

from ..host_memory import host_view, on_host
from ..kernels import address, c_function


@dataclass
class RowGradients:
    """One table's gradient this step: rows as looked up (repeats possible) and, when read, values: a
    numpy copy, or the gradient itself when it is a float32 CPU tensor read before the optimizer step
    (the native summary reads it in place)."""

    rows: np.ndarray                 # int64 [N]
    grads: np.ndarray | paddle.Tensor | None  # float32 [N, D]
    sparse: bool                     # False: the table received a dense [num_rows, D] gradient

    def values(self) -> np.ndarray:
        """The values as a numpy array (a view of a tensor's memory, without a copy)."""
        return host_view(self.grads) if isinstance(self.grads, paddle.Tensor) else self.grads

    def address(self) -> int:
        """Where the values start in host memory (float32, C-contiguous)."""
        if isinstance(self.grads, paddle.Tensor):
            return self.grads.data_ptr()
        self.grads = np.ascontiguousarray(self.grads, dtype=np.float32)
        return address(self.grads)


@dataclass
class GradientSummary:
    """One table's row gradients merged per row: distinct rows, their finite norms (in no set order), the rows
    whose gradient holds NaN or Inf, and the figures of the finite norms (NaN when there are none)."""

    rows: np.ndarray                 # int64 [U], sorted, padding excluded
    norms: np.ndarray                # float32 [U - bad]
    bad_rows: np.ndarray             # int64, rows with a NaN/Inf gradient
    sparse: bool
    mean: float
    max: float
    p99: float                       # np.percentile's default (linear interpolation)


class RowGradientReader:
    """Reads one table's row gradients after backward. What to read (rows the layer updates itself, or
    its weight's gradient) is found once, since attribute lookups on a Layer are slow."""

    def __init__(self, layer: paddle.nn.Layer) -> None:
        self.own = getattr(layer, "row_gradients", None)   # low_precision tables and caches update rows
        weight = getattr(layer, "weight", None)
        self.weight = weight if isinstance(weight, paddle.Tensor) else None
        self.on_host = on_host(self.weight)                 # its rows and gradients can be viewed in place
        # known after the first read with lookups; never for a table that deduplicates its lookups (a
        # gradient of distinct sorted rows can match one batch's lookups and not the next one's)
        self.rows_are_lookups: bool | None = False if getattr(layer, "deduplicate", False) else None

    def __call__(self, with_values: bool = True, lookups: np.ndarray | None = None,
                 copy: bool = True) -> RowGradients | None:
        """Row gradients, or None when the table got no gradient this step. Without values only the row
        ids are read (no values leave the device). ``lookups``, the ids the table looked up this step
        (flat), stand for the gradient's rows once they proved equal (a sparse Embedding's gradient
        keeps one row per lookup, in order): reading rows back costs more than the rest of a table.
        ``copy=False`` lets the values of a CPU table's sparse gradient be the gradient tensor itself, not
        a copy: valid until the optimizer step."""
        found = self.own() if self.own is not None else None
        if found is not None:
            values = found[1].numpy().astype(np.float32, copy=False) if with_values else None
            return RowGradients(found[0].numpy(), values, sparse=True)
        weight = self.weight
        if weight is None or weight.stop_gradient:
            return None
        grad = weight._grad_ivar()
        if grad is None or not grad._is_initialized():
            return None
        if grad.is_selected_rows():
            values = grad._get_tensor_from_selected_rows()
            rows = None
            if lookups is not None and self.rows_are_lookups is not False and values.shape[0] == lookups.size:
                if self.rows_are_lookups is None:
                    rows = np.asarray(grad.rows(), dtype=np.int64)
                    self.rows_are_lookups = bool(np.array_equal(rows, lookups))
                if self.rows_are_lookups:
                    rows = lookups
            if rows is None:
                rows = np.asarray(grad.rows(), dtype=np.int64)
            if rows.size == 0:
                return None
            if not with_values:
                return RowGradients(rows, None, True)
            return RowGradients(rows, values if not copy and self.on_host
                                else values.numpy().astype(np.float32, copy=False), True)
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
    contents: dict[int, tuple[int, bytes]] = {}  # the same rows array given to twins is read once
    for i, (grads, padding) in enumerate(gradients):
        key = contents.get(id(grads.rows))
        if key is None:
            key = contents[id(grads.rows)] = (grads.rows.size, grads.rows.tobytes())
        groups[(padding, *key)].append(i)
    layouts: dict[tuple[int, ...], list[list[int]]] = defaultdict(list)
    for members in groups.values():
        layouts[tuple(gradients[i][0].grads.shape[1] for i in members)].append(members)
    out: list[GradientSummary | None] = [None] * len(gradients)
    kernel = c_function("edo_summarize_groups")
    for widths, batch in layouts.items():
        if kernel is not None:
            _summarize_layout_natively(kernel, gradients, widths, batch, out)
        else:
            _summarize_layout(gradients, widths, batch, out)
    return out


def _summarize_layout_natively(kernel, gradients: list[tuple[RowGradients, int | None]], widths: tuple[int, ...],
                               batch: list[list[int]], out: list[GradientSummary | None]) -> None:
    """_summarize_layout in one call of the native kernel (kernels/row_norms.cc), which sums, ranks and
    figures each group's rows itself."""
    firsts = [gradients[members[0]] for members in batch]
    rows = [np.ascontiguousarray(g.rows, dtype=np.int64) for g, _ in firsts]
    lengths = np.array([r.size for r in rows], dtype=np.int64)
    paddings = np.array([-1 if padding is None else padding for _, padding in firsts], dtype=np.int64)
    pointers = np.array([address(a) for a in rows] + [gradients[member][0].address() for members in batch
                                                      for member in members], dtype=np.uintp)
    widths_array = np.asarray(widths, dtype=np.int64)  # every array the kernel reads is held by a name
    total, groups, columns = int(lengths.sum()), len(batch), len(widths)
    distinct_rows, distinct = np.empty(total, dtype=np.int64), np.empty(groups, dtype=np.int64)
    ranked, ranked_rows = np.empty((total, columns), dtype=np.float32), np.empty((total, columns), dtype=np.int64)
    good, figures = np.empty((groups, columns), dtype=np.int64), np.empty((groups, columns, 3))
    kernel(groups, columns, address(pointers), address(lengths), address(paddings), address(pointers[groups:]),
           address(widths_array), address(distinct_rows), address(distinct), address(ranked), address(ranked_rows),
           address(good), address(figures))
    bounds = np.concatenate([[0], np.cumsum(distinct)]).tolist()
    good, figures = good.tolist(), figures.tolist()
    for g, members in enumerate(batch):
        a, b = bounds[g], bounds[g + 1]
        if a == b:  # only padding rows were looked up
            continue
        for k, member in enumerate(members):
            end = a + good[g][k]
            bad_rows = np.sort(ranked_rows[end:b, k]) if end < b else distinct_rows[:0]
            mean, maximum, p99 = figures[g][k]
            out[member] = GradientSummary(distinct_rows[a:b], ranked[a:end, k], bad_rows, gradients[member][0].sparse,
                                          mean, maximum, p99)


def _summarize_layout(gradients: list[tuple[RowGradients, int | None]], widths: tuple[int, ...],
                      batch: list[list[int]], out: list[GradientSummary | None]) -> None:
    """Merge groups of tables that share rows and column layout: one sort, one segmented sum; then the
    figures of every table at once, from norms ranked within each group."""
    firsts = [gradients[members[0]] for members in batch]
    owner = np.repeat(np.arange(len(batch)), [g.rows.size for g, _ in firsts])
    rows = np.concatenate([g.rows for g, _ in firsts])
    paddings = np.array([-1 if padding is None else padding for _, padding in firsts])
    padded = rows == paddings[owner]                    # padding lookups are not updates: sorted first, dropped
    stride = int(rows.max()) + 1
    if stride < 2**62 // len(batch):
        key = owner * stride + rows
        key[padded] = -1
        order = np.argsort(key, kind="stable")  # a row's entries are summed in lookup order
    else:
        order = np.lexsort((rows, np.where(padded, -1, owner)))
    order = order[np.count_nonzero(padded):]
    if not order.size:
        return
    owner, rows = owner[order], rows[order]
    starts = np.flatnonzero(np.r_[True, (rows[1:] != rows[:-1]) | (owner[1:] != owner[:-1])])
    rows, owner = rows[starts], owner[starts].astype(np.int16 if len(batch) < 2**15 else np.int64)
    norms = np.empty((rows.size, len(widths)), dtype=np.float32)
    for k in range(len(widths)):  # each column group's rows summed per distinct row, then their norms
        values = np.concatenate([gradients[members[k]][0].values() for members in batch])
        merged = np.add.reduceat(np.take(values, order, axis=0), starts, axis=0)
        norms[:, k] = np.sqrt(np.einsum("ij,ij->i", merged, merged, dtype=np.float64))
    # each column's norms ascending within each group (NaN and Inf last): a sort, then a stable radix
    # sort by group (small integers)
    by_norm = np.argsort(norms, axis=0)
    ranking = np.take_along_axis(by_norm, np.argsort(owner[by_norm], axis=0, kind="stable"), axis=0)
    ranked = np.take_along_axis(norms, ranking, axis=0)
    bounds = np.searchsorted(owner, np.arange(len(batch) + 1))
    present = np.flatnonzero(bounds[1:] > bounds[:-1])
    first = bounds[present]
    finite = np.isfinite(ranked)
    good = np.add.reduceat(finite, first, axis=0, dtype=np.int64)              # [groups, columns]
    means = np.add.reduceat(np.where(finite, ranked, 0), first, axis=0, dtype=np.float64) / np.maximum(good, 1)
    position = np.maximum(good - 1, 0) * 0.99
    low = position.astype(np.int64)
    high = np.minimum(low + 1, np.maximum(good - 1, 0))
    column = np.arange(len(widths))
    at_low, at_high = ranked[first[:, None] + low, column], ranked[first[:, None] + high, column]
    p99s = at_low + (at_high - at_low) * (position - low)
    maxima = ranked[first[:, None] + np.maximum(good - 1, 0), column]
    none = good == 0
    for figure in (means, p99s, maxima):
        figure[none] = np.nan
    good, means, p99s, maxima = good.tolist(), means.tolist(), p99s.tolist(), maxima.tolist()
    for j, g in enumerate(present.tolist()):
        a, b = bounds[g], bounds[g + 1]
        for k, member in enumerate(batch[g]):
            end = a + good[j][k]
            bad_rows = np.sort(rows[ranking[end:b, k]]) if end < b else rows[:0]
            out[member] = GradientSummary(rows[a:b], ranked[a:end, k], bad_rows, gradients[member][0].sparse,
                                          means[j][k], maxima[j][k], p99s[j][k])
