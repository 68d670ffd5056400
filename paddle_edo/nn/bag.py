"""Pooled lookups: EmbeddingBag, and pooled_lookup for models that pool any table of theirs.

A bag is a row of a padded id tensor ``[..., L]`` (padding ids skipped) or a span of flat ids given by
offsets (as ``torch.nn.EmbeddingBag`` takes them); its vector is the sum, mean or max of its rows, sums
optionally weighted per id. An empty bag gives zeros.

Pooling is a layer over a table rather than an option of every table: each table keeps one meaning (an
id -> a vector), and one pooling serves them all (fp32, packed, hash, QR, mixed-dim, cached), through
their own lookups. Over a ``DenseEmbedding`` on the CPU a native kernel pools the rows in one pass; in
training it pools the batch's distinct rows, so the table's gradient is a sparse row per distinct id, in
increasing order (what lazy Adam updates without merging).
"""
from __future__ import annotations

import functools
import math

import numpy as np
import paddle

from ..compat import dynamic_graph_under_sot
from ..errors import EdoTypeError, EdoValueError
from ..kernels import fused_ops, ids_checked_by_kernel, is_float32, kernels_serve
from ..kernels.calibration import lookup_class, serve
from .base import ID_DTYPES, CompositeEmbedding, EmbeddingBase, dtype_name, int64_ids, known_empty
from .dedup import distinct_rows, unique_ids
from .dense import DenseEmbedding, given_or_dense_table
from .quantized import FORMAT_NUMBERS, QuantizedEmbedding
from .registry import register_embedding

MODES = ("sum", "mean", "max")


@dynamic_graph_under_sot  # under SOT the pooling runs in dynamic graph, as the tables' lookups do
def pooled_lookup(table: EmbeddingBase, ids: paddle.Tensor, offsets: paddle.Tensor | None = None,
                  per_sample_weights: paddle.Tensor | None = None, mode: str = "mean",
                  padding_idx: int | None = None, owner: str = "pooled_lookup") -> paddle.Tensor:
    """Pool ``table``'s rows by bag: ids [..., L] -> [..., D], or flat ids [N] with ``offsets`` [B] (the
    start of each bag) -> [B, D]. Ids equal to ``padding_idx`` count in no bag."""
    if mode not in MODES:
        raise EdoValueError(f"{owner}: mode = {mode!r}; expected one of {', '.join(map(repr, MODES))}")
    if getattr(table, "output_dtype", "float32") != "float32":
        raise EdoValueError(f"{owner}: bags pool fp32 rows; {table.full_name()} has output_dtype "
                            f"{table.output_dtype!r} (pool a table with output_dtype 'float32', and cast the bags)")
    if per_sample_weights is not None and mode != "sum":
        raise EdoValueError(f"{owner}: per_sample_weights weight a sum; mode is {mode!r} (use mode 'sum')")
    if per_sample_weights is not None and list(per_sample_weights.shape) != list(ids.shape):
        raise EdoValueError(f"{owner}: per_sample_weights of shape {list(per_sample_weights.shape)}, expected the "
                            f"ids' {list(ids.shape)}")
    if offsets is None and len(ids.shape) < 2:
        raise EdoValueError(f"{owner}: ids of shape {list(ids.shape)} need offsets, or a padded shape [..., L]")
    if offsets is not None:
        _check_offsets(ids, offsets, owner)
    if known_empty(ids):
        bags = list(ids.shape[:-1]) if offsets is None else [offsets.shape[0]]
        return paddle.zeros([*bags, table.embedding_dim], dtype="float32")

    def composite() -> paddle.Tensor:
        if offsets is None:
            return _padded(table, ids, per_sample_weights, mode, padding_idx)
        return _segments(table, ids, offsets, per_sample_weights, mode, padding_idx)

    def native() -> paddle.Tensor:
        return _native(table, ids, offsets, per_sample_weights, mode, padding_idx)

    if not _native_kernel_serves(table, ids, per_sample_weights):
        return composite()
    if _pools_for_training(table):
        return native()
    variant = f"{table.storage_dtype} {mode}{' weighted' if per_sample_weights is not None else ''}" \
              f"{' by offsets' if offsets is not None else ''}"
    return serve(lookup_class("bag", variant, table.embedding_dim, table.estimated_bytes(), ids), native, composite)


def _check_offsets(ids: paddle.Tensor, offsets: paddle.Tensor, owner: str) -> None:
    """Refuse offsets that are not 1-D integers starting at 0, not decreasing, and within the ids."""
    if len(ids.shape) != 1 or len(offsets.shape) != 1:
        raise EdoValueError(f"{owner}: with offsets, ids and offsets must be 1-D; got ids {list(ids.shape)}, "
                            f"offsets {list(offsets.shape)}")
    if offsets.dtype not in ID_DTYPES:
        raise EdoTypeError(f"{owner}: offsets must be int32 or int64, got {dtype_name(offsets.dtype)}")
    if paddle.in_dynamic_mode():
        starts = offsets.numpy()
        n = ids.shape[0]
        if starts.size == 0:
            return
        if starts[0] != 0:
            raise EdoValueError(f"{owner}: offsets[0] = {starts[0]}; the first bag starts at 0")
        if (np.diff(starts) < 0).any():
            b = int(np.flatnonzero(np.diff(starts) < 0)[0]) + 1
            raise EdoValueError(f"{owner}: offsets[{b}] = {starts[b]} is below offsets[{b - 1}] = {starts[b - 1]}; "
                                f"offsets must not decrease")
        if starts[-1] > n:
            raise EdoValueError(f"{owner}: offsets[{starts.size - 1}] = {starts[-1]} is past the end of the "
                                f"{n} ids")


def _native_kernel_serves(table: EmbeddingBase, ids: paddle.Tensor, weights: paddle.Tensor | None) -> bool:
    """Whether a native bag kernel may pool: per-id weights that need no gradient, and an fp32
    DenseEmbedding (its kernel has a gradient) or a packed table serving (a low_precision one in training
    updates its rows: not here)."""
    if weights is not None and not weights.stop_gradient:
        return False
    if type(table) is DenseEmbedding:
        return table.weight.dtype == paddle.float32 and kernels_serve(ids, table.weight)
    if not isinstance(table, QuantizedEmbedding) or not table.packed:
        return False
    if table.updates_rows():
        return False
    return kernels_serve(ids, table.codes)


def _pools_for_training(table: EmbeddingBase) -> bool:
    """Whether the native kernel pools an fp32 table's distinct rows for its gradient: then it serves (its
    training step is the one measured faster), untimed."""
    return type(table) is DenseEmbedding and paddle.is_grad_enabled() and not table.weight.stop_gradient


def _bag_bounds(ids: paddle.Tensor, offsets: paddle.Tensor | None) -> tuple[paddle.Tensor, paddle.Tensor]:
    """(int64 ids as given: flat [N] with offsets, or padded [..., L], which the kernels pool into [..., D]
    themselves; bounds [B + 1]: bag b holds entries bounds[b] .. bounds[b + 1] of the flat ids)."""
    ids = int64_ids(ids)
    if offsets is not None:
        return ids, paddle.concat([offsets.astype("int64"), paddle.shape(ids).astype("int64")])
    if paddle.in_dynamic_mode():
        return ids, _padded_bounds(math.prod(ids.shape), ids.shape[-1])
    return ids, paddle.arange(0, paddle.numel(ids).astype("int64") + 1, ids.shape[-1], dtype="int64")


@functools.lru_cache(maxsize=16)
def _padded_bounds(count: int, length: int) -> paddle.Tensor:
    """The bounds of padded bags of ``length`` ids, ``count`` ids in all, for the CPU kernels, made once per
    shape: Paddle's arange of a batch's bags took a tenth of a bag kernel's time (bags of one id)."""
    return paddle.to_tensor(np.arange(0, count + 1, length, dtype=np.int64), place=paddle.CPUPlace())


def _native(table: DenseEmbedding | QuantizedEmbedding, ids: paddle.Tensor, offsets: paddle.Tensor | None,
            weights: paddle.Tensor | None, mode: str, padding_idx: int | None) -> paddle.Tensor:
    """The native bag kernels: an fp32 table's rows (in training its batch's distinct rows, so that its
    gradient is one sparse row per distinct id), or a packed table's rows decoded as they are pooled. The
    kernels refuse ids outside the table before reading any row; the distinct rows are gathered after a
    check of the ids."""
    table.check_id_dtype(ids)
    ids, bounds = _bag_bounds(ids, offsets)
    with ids_checked_by_kernel(table.full_name(), table.num_embeddings):
        if isinstance(table, QuantizedEmbedding):
            params = table.codes if table.row_params is None else table.row_params  # float formats: unused
            return fused_ops().edo_packed_bag_pool(ids, table.codes, params, bounds, _entry_weights(weights),
                                                   FORMAT_NUMBERS[table.format.name], table.embedding_dim,
                                                   *_pooling(mode, padding_idx))
        if paddle.in_dynamic_mode() and paddle.is_grad_enabled() and not table.weight.stop_gradient and table.sparse:
            table.check_ids(ids)
            unique, inverse = unique_ids(ids)
            rows = distinct_rows(unique, table.weight, None)
            return pool_rows(rows, inverse, ids, bounds, mode, padding_idx, weights)
        return pool_rows(table.weight, ids, ids, bounds, mode, padding_idx, weights)


def pool_rows(rows: paddle.Tensor, index: paddle.Tensor, ids: paddle.Tensor, bounds: paddle.Tensor, mode: str,
              padding_idx: int | None = None, weights: paddle.Tensor | None = None) -> paddle.Tensor:
    """The bag kernel: bags ``[B, D]`` of fp32 ``rows`` ``[R, D]`` read at ``index`` ``[N]`` (int64), bag b
    holding entries ``bounds[b]`` .. ``bounds[b + 1]`` (``bounds`` int64 ``[B + 1]``), an entry whose
    ``ids[j]`` is ``padding_idx`` in no bag, each weighted by ``weights`` ``[N]`` (sum); padded ``index`` and
    ``ids`` ``[..., L]`` give ``[..., D]``, ``weights`` shaped like them; its backward gives
    ``rows`` their gradient. With no gradient wanted the rows go in detached: Paddle records a custom
    operator's backward under no_grad too, which would keep the rows' gradient path alive."""
    if paddle.in_dynamic_mode() and not paddle.is_grad_enabled():
        rows = rows.detach()
    out, _ = fused_ops().edo_bag_pool(rows, index, ids, bounds, _entry_weights(weights), *_pooling(mode, padding_idx))
    return out


def _entry_weights(weights: paddle.Tensor | None) -> paddle.Tensor:
    if weights is not None:
        return weights if is_float32(weights) else weights.astype("float32")
    return _no_weights() if paddle.in_dynamic_mode() else paddle.zeros([0], dtype="float32")


@functools.lru_cache(maxsize=1)
def _no_weights() -> paddle.Tensor:
    """The CPU kernels' "no weights" input in dynamic graph, made once."""
    return paddle.to_tensor(np.zeros([0], np.float32), place=paddle.CPUPlace())


def _pooling(mode: str, padding_idx: int | None) -> tuple[int, bool, int]:
    """The kernels' pooling attributes: mode number, whether a padding id counts in no bag, and that id."""
    return MODES.index(mode), padding_idx is not None, int(padding_idx) if padding_idx is not None else 0


@paddle.jit.not_to_static  # to_static would turn the shape into a tensor, and the test into a cond op
def _known_length(ids: paddle.Tensor) -> int:
    """The bag length L, or -1 in a static program traced without it."""
    return ids.shape[-1]


def _padded(table: EmbeddingBase, ids: paddle.Tensor, weights: paddle.Tensor | None, mode: str,
            padding_idx: int | None) -> paddle.Tensor:
    """Bags as the last axis of ids, pooled with Paddle's ops over the table's own lookup. Sums add the
    bag's rows one after another (add_n over the L axis), as the kernels do: the same bits on both paths
    (Paddle's CPU sum over a middle axis is also slow); a static program whose L is unknown sums over
    the axis."""
    vectors = table(ids)                                                  # [..., L, D]
    keep = paddle.ones(ids.shape, dtype=vectors.dtype) if padding_idx is None \
        else (ids != padding_idx).astype(vectors.dtype)
    if mode == "max":
        # a repeated id enters once (Paddle's max sends the gradient to every tied entry)
        repeated = paddle.tril(paddle.cast(ids.unsqueeze(-1) == ids.unsqueeze(-2), "int32"), -1).sum(axis=-1) > 0
        candidates = keep * (~repeated).astype(keep.dtype)
        lowest = paddle.full_like(vectors, float("-inf"))
        best = paddle.where(candidates.unsqueeze(-1) > 0, vectors, lowest).max(axis=-2)
        return paddle.where(keep.sum(axis=-1, keepdim=True) > 0, best, paddle.zeros_like(best))
    factor = keep if weights is None else keep * weights.astype(vectors.dtype)
    weighted = vectors * factor.unsqueeze(-1)
    if _known_length(ids) > 0:
        summed = paddle.add_n(paddle.unbind(weighted, axis=-2))
    else:
        summed = weighted.sum(axis=-2)
    if mode == "sum":
        return summed
    return summed / paddle.clip(keep.sum(axis=-1, keepdim=True), min=1.0)


def _segments(table: EmbeddingBase, ids: paddle.Tensor, offsets: paddle.Tensor, weights: paddle.Tensor | None,
              mode: str, padding_idx: int | None) -> paddle.Tensor:
    """Bags as spans of flat ids, pooled with Paddle's segment ops over the table's own lookup (an extra
    empty entry in a segment past the last bag makes every bag's segment exist; it is dropped)."""
    flat = ids.astype("int64")
    vectors = table(flat)                                                 # [N, D]
    keep = paddle.ones(flat.shape, dtype=vectors.dtype) if padding_idx is None \
        else (flat != padding_idx).astype(vectors.dtype)
    positions = paddle.arange(paddle.shape(flat)[0], dtype="int64")
    segment = paddle.searchsorted(offsets.astype("int64"), positions, right=True) - 1
    segment = paddle.concat([segment, paddle.shape(offsets).astype("int64")]).astype("int32")
    vectors = paddle.concat([vectors, paddle.zeros([1, table.embedding_dim], dtype=vectors.dtype)])
    keep = paddle.concat([keep, paddle.zeros([1], dtype=keep.dtype)]).unsqueeze(-1)
    count = paddle.geometric.segment_sum(keep, segment)[:-1]
    if mode == "max":  # a repeated id enters once (see _padded): each (bag, id) at its first entry
        pairs = paddle.stack([segment[:-1].astype("int64"), flat], axis=1)
        _, first = paddle.unique(pairs, return_index=True, axis=0)
        candidates = paddle.zeros_like(keep).scatter(first, paddle.ones([paddle.shape(first)[0], 1], keep.dtype))
        lowest = paddle.full_like(vectors, float("-inf"))
        best = paddle.geometric.segment_max(paddle.where(keep * candidates > 0, vectors, lowest), segment)[:-1]
        return paddle.where(count > 0, best, paddle.zeros_like(best))
    factor = keep
    if weights is not None:
        factor = factor * paddle.concat([weights.astype(vectors.dtype), paddle.zeros([1], dtype=vectors.dtype)]
                                        ).unsqueeze(-1)
    summed = paddle.geometric.segment_sum(vectors * factor, segment)[:-1]
    return summed if mode == "sum" else summed / paddle.clip(count, min=1.0)


@register_embedding("bag")
class EmbeddingBag(CompositeEmbedding):
    """Pooled lookups over a table, like ``paddle.nn.Embedding`` followed by a sum, mean or max per bag.

    ``EmbeddingBag(num_embeddings, embedding_dim, mode)`` pools a ``DenseEmbedding`` of its own;
    ``table=`` pools any paddle_edo table of that many ids and that width instead (packed, hash, QR,
    mixed-dim, cached). ``forward(ids)`` takes padded bags ``[..., L]`` -> ``[..., embedding_dim]`` (ids
    equal to ``padding_idx`` are skipped); ``forward(ids, offsets)`` takes flat ids ``[N]`` and the start
    of each bag ``[B]`` -> ``[B, embedding_dim]``; ``per_sample_weights`` (shaped like ids) weight a sum.
    """

    field_table = False  # pools bags of ids; models pool their multi-valued fields with ``pooled_lookup``

    def __init__(self, num_embeddings: int, embedding_dim: int, mode: str = "mean", *,
                 padding_idx: int | None = None, sparse: bool = True, weight_attr: paddle.ParamAttr | None = None,
                 name: str | None = None, table: EmbeddingBase | None = None, init_std: float = 0.01) -> None:
        super().__init__(num_embeddings, embedding_dim, padding_idx=padding_idx, sparse=sparse, name=name)
        label = type(self).__name__
        if mode not in MODES:
            raise EdoValueError(f"{label}: mode = {mode!r}; expected one of {', '.join(map(repr, MODES))}")
        self.mode = mode
        self.table = given_or_dense_table(label, table, num_embeddings, embedding_dim, padding_idx, sparse,
                                          weight_attr, init_std)

    def check_ids(self, ids: paddle.Tensor) -> None:
        """The table checks its own ids."""

    @dynamic_graph_under_sot
    def forward(self, ids: paddle.Tensor, offsets: paddle.Tensor | None = None,
                per_sample_weights: paddle.Tensor | None = None) -> paddle.Tensor:
        self.table.check_id_dtype(ids)
        return pooled_lookup(self.table, ids, offsets, per_sample_weights, self.mode, self.padding_idx,
                             owner=self.full_name())

    def lookup(self, ids: paddle.Tensor) -> paddle.Tensor:
        """Padded bags [..., L] -> [..., embedding_dim]."""
        return pooled_lookup(self.table, ids, mode=self.mode, padding_idx=self.padding_idx, owner=self.full_name())

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, mode={self.mode}"

