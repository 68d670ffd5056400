"""DenseEmbedding: the fp32 table every other layer is measured against, with sparse row gradients."""
from __future__ import annotations

import paddle
import paddle.nn.functional as F

from ..compat import dynamic_graph_under_sot, sparse_gradient
from ..errors import EdoTypeError, EdoValueError
from ..kernels import can_fuse, fused_ops, ids_checked_by_kernel
from ..kernels.calibration import LookupClass, lookup_class, serve
from ..schema import Option
from .base import EmbeddingBase, int64_ids, known_empty
from .dedup import deduplicated_lookup, deduplicating, distinct_rows, unique_ids
from .registry import register_embedding
from .signature import accepts_old_signature


@register_embedding("dense")
class DenseEmbedding(EmbeddingBase):
    """A plain fp32 table (like ``paddle.nn.Embedding``) whose gradient is sparse by default. Lookups, dtypes and errors: the EmbeddingBase contract.

    Training in dynamic graph with sparse gradients, it looks each distinct id of a batch up once
    (``deduplicate``, see ``dedup.py``): the same outputs and updates, and a gradient of distinct rows
    that the optimizer updates without merging duplicates. A lookup that needs no gradient, on the CPU in
    dynamic graph, is served by the native gather or by Paddle's, whichever this processor runs faster
    (``kernels.calibration``; the same rows).
    """

    row_shardable = True

    config_options = {
        "init_std": Option(0.01, float, low=0.0, doc="std of the normal initialiser"),
        "deduplicate": Option(True, bool, doc="training lookups go through the batch's distinct ids"),
    }

    @accepts_old_signature(("num_embeddings", "embedding_dim", "padding_idx", "sparse", "check_ids", "init_std",
                            "weight_attr", "deduplicate"))
    def __init__(self, num_embeddings: int, embedding_dim: int, *, padding_idx: int | None = None,
                 sparse: bool = True, weight_attr: paddle.ParamAttr | None = None, name: str | None = None,
                 init_std: float = 0.01, deduplicate: bool = True, range_check: bool = True) -> None:
        super().__init__(num_embeddings, embedding_dim, padding_idx=padding_idx, sparse=sparse, name=name,
                         range_check=range_check)
        self.deduplicate = bool(deduplicate)
        self.weight = self.create_table(self.num_embeddings, self.embedding_dim, weight_attr, init_std)

    @property
    def storage_dtype(self) -> str:
        return "float32"

    def estimated_bytes(self) -> int:
        return self.num_embeddings * self.embedding_dim * 4

    def deduplicates(self) -> bool:
        """Whether lookups now go through the distinct ids: sparse gradients wanted, in dynamic graph."""
        return self.deduplicate and deduplicating(self)

    @dynamic_graph_under_sot
    def forward(self, ids: paddle.Tensor) -> paddle.Tensor:
        """ids [...] int32/int64 -> vectors [..., embedding_dim]: EmbeddingBase.forward, with the path chosen
        once for the range check and the lookup (a dynamic-graph call costs microseconds per choice)."""
        self.check_id_dtype(ids)
        if known_empty(ids):
            return self.empty_lookup(ids)
        return self._lookup(ids, scan=self.range_check and paddle.in_dynamic_mode())

    def lookup(self, ids: paddle.Tensor) -> paddle.Tensor:
        return self._lookup(ids, scan=False)

    def _lookup(self, ids: paddle.Tensor, scan: bool) -> paddle.Tensor:
        """The lookup, after a scan of the ids' range (``scan``) where its path does not check them itself."""
        if self.deduplicates():
            if scan:
                self.scan_id_range(ids)
            return deduplicated_lookup(ids, self.weight, self.padding_idx)
        if self._gather_may_serve(ids):
            return serve(self._lookup_class(ids), lambda: self._native_gather(ids), lambda: self._scanned_gather(ids))
        if scan:
            self.scan_id_range(ids)
        return self._composite(ids)

    def _composite(self, ids: paddle.Tensor) -> paddle.Tensor:
        return F.embedding(ids, self.weight, padding_idx=self.padding_idx, sparse=sparse_gradient(self.sparse))

    def _scanned_gather(self, ids: paddle.Tensor) -> paddle.Tensor:
        """Paddle's gather after a scan of the ids (Paddle's CPU gather lets negative ids through)."""
        if self.range_check:
            self.scan_id_range(ids)
        return self._composite(ids)

    def _native_gather(self, ids: paddle.Tensor) -> paddle.Tensor:
        """kernels/lookups.cc's gather: it refuses ids outside the table before reading a row."""
        with ids_checked_by_kernel(self.full_name(), self.num_embeddings):
            return fused_ops().edo_dense_lookup(int64_ids(ids), self.weight, self.padding_idx is not None,
                                                -1 if self.padding_idx is None else self.padding_idx)

    def _gather_may_serve(self, ids: paddle.Tensor) -> bool:
        """A dynamic-graph lookup on the CPU that needs no gradient (exports keep Paddle's gather)."""
        return paddle.in_dynamic_mode() and can_fuse(ids, self.weight)

    def _lookup_class(self, ids: paddle.Tensor) -> LookupClass:
        return lookup_class("gather", "float32", self.embedding_dim, self.estimated_bytes(), ids)

    def kernel_checks_ids(self, ids: paddle.Tensor) -> bool:
        return not self.deduplicates() and self._gather_may_serve(ids)

    def lookup_columns(self, ids: paddle.Tensor) -> list[paddle.Tensor]:
        if not self.deduplicates():
            return EmbeddingBase.lookup_columns(self, ids)  # to_static cannot transform super()
        self.check_ids(ids)
        unique, inverse = unique_ids(ids)  # one set of rows for all columns: one gradient, nothing to add
        rows = distinct_rows(unique, self.weight, self.padding_idx)
        return [F.embedding(column, rows) for column in paddle.unbind(inverse, axis=-1)]


def given_or_dense_table(owner: str, table: EmbeddingBase | None, num_embeddings: int, embedding_dim: int,
                         padding_idx: int | None, sparse: bool, weight_attr: paddle.ParamAttr | None,
                         init_std: float) -> EmbeddingBase:
    """The table a layer built over another table uses: ``table`` when given (any paddle_edo table of that
    many ids and that width), else a DenseEmbedding of its own."""
    if table is None:
        return DenseEmbedding(num_embeddings, embedding_dim, padding_idx=padding_idx, sparse=sparse,
                              weight_attr=weight_attr, init_std=init_std)
    if not isinstance(table, EmbeddingBase):
        raise EdoTypeError(f"{owner}: table must be a paddle_edo table, got {type(table).__name__}")
    if (table.num_embeddings, table.embedding_dim) != (num_embeddings, embedding_dim):
        raise EdoValueError(f"{owner}: the table takes {table.num_embeddings} ids of width {table.embedding_dim}, "
                            f"not {num_embeddings} x {embedding_dim}")
    return table
