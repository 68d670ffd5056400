"""The distinct ids of a batch, for lookups that send each table row back once.

Paddle's sparse embedding gradient holds one row per lookup, duplicates included, and merging those rows
costs about 1 us a row on the CPU: the optimizer merges them every step (88 of the 113 ms of a lazy Adam
step over 106,496 Zipf ids), and two gradients of one table are merged again when they are added. A table
that looks up the batch's distinct ids once and gathers the batch from those rows gets a gradient of
distinct rows, sorted, which Adam updates without merging (it merges unless the rows strictly increase).
The gather's backward sums the duplicates in the order the merge would: with optimizers that merge (Adam,
Adagrad) the updates are the same bit for bit; SGD, which applies duplicate rows one by one, now applies
their sum once (the same to float rounding).
"""
from __future__ import annotations

import paddle
import paddle.nn.functional as F

from ..kernels import fused_ops
from .base import int64_ids


def deduplicating(table: paddle.nn.Layer) -> bool:
    """Whether a lookup into ``table.weight`` is worth taking through the distinct ids: a sparse gradient is
    wanted, in dynamic graph (static programs and exports keep the plain lookup). The weight is read last:
    reaching a layer's parameter costs a microsecond, on every lookup."""
    return table.sparse and paddle.in_dynamic_mode() and paddle.is_grad_enabled() and not table.weight.stop_gradient


def unique_ids(ids: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor]:
    """(distinct ids [U] int64 in increasing order, the index of each id among them, shaped like ``ids``):
    the native kernel on the CPU, ``paddle.unique`` elsewhere."""
    ids = int64_ids(ids)
    ops = fused_ops() if ids.place.is_cpu_place() and ids.size > 0 else None  # a custom op's output has data
    if ops is not None:
        unique, inverse = ops.edo_unique_ids(ids)
        return unique, inverse
    unique, inverse = paddle.unique(ids.flatten(), return_inverse=True)
    return unique, inverse.reshape(ids.shape)


def summed_by_id(ids: paddle.Tensor, values: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor]:
    """(distinct ids [U] int64 in increasing order, float32 [U, dim] the sum of each one's rows of
    ``values`` [len(ids), dim]): a step's row gradients merged, as a rule's row update takes them."""
    unique, inverse = unique_ids(ids.flatten())
    summed = paddle.zeros([unique.shape[0], values.shape[-1]], dtype="float32")
    return unique, summed.index_add(inverse, 0, values.astype("float32"))


def distinct_rows(unique: paddle.Tensor, weight: paddle.Tensor, padding_idx: int | None) -> paddle.Tensor:
    """The rows of the distinct ids, with a sparse gradient of those rows only, zero at the padding id
    (Paddle's sparse embedding gradient ignores ``padding_idx``: the padding row, read as zeros, would
    train)."""
    rows = F.embedding(unique, weight, padding_idx=padding_idx, sparse=True)
    if padding_idx is None:
        return rows
    return rows * (unique != padding_idx).astype(rows.dtype).unsqueeze(-1)


def deduplicated_lookup(ids: paddle.Tensor, weight: paddle.Tensor, padding_idx: int | None) -> paddle.Tensor:
    """``F.embedding(ids, weight, padding_idx, sparse=True)`` through the distinct ids."""
    unique, inverse = unique_ids(ids)
    return F.embedding(inverse, distinct_rows(unique, weight, padding_idx))
