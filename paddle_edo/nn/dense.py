"""DenseEmbedding: the fp32 table every other layer is measured against, with sparse row gradients."""
from __future__ import annotations

import paddle
import paddle.nn.functional as F

from ..compat import sparse_gradient
from ..schema import Option
from .base import EmbeddingBase
from .dedup import deduplicated_lookup, deduplicating, distinct_rows, unique_ids
from .registry import register_embedding


@register_embedding("dense")
class DenseEmbedding(EmbeddingBase):
    """A plain fp32 table (like ``paddle.nn.Embedding``) whose gradient is sparse by default.

    Training in dynamic graph with sparse gradients, it looks each distinct id of a batch up once
    (``deduplicate``, see ``dedup.py``): the same outputs and updates, and a gradient of distinct rows
    that the optimizer updates without merging duplicates.
    """

    config_options = {
        "init_std": Option(0.01, float, low=0.0, doc="std of the normal initialiser"),
        "deduplicate": Option(True, bool, doc="training lookups go through the batch's distinct ids"),
    }

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 sparse: bool = True, check_ids: bool = True, init_std: float = 0.01,
                 weight_attr: paddle.ParamAttr | None = None, deduplicate: bool = True) -> None:
        super().__init__(num_embeddings, embedding_dim, padding_idx, sparse, check_ids)
        self.deduplicate = bool(deduplicate)
        self.weight = self.create_parameter(
            [self.num_embeddings, self.embedding_dim], attr=weight_attr, dtype="float32",
            default_initializer=paddle.nn.initializer.Normal(0.0, init_std))
        if self.padding_idx is not None:
            with paddle.no_grad():
                self.weight[self.padding_idx] = 0.0

    @property
    def storage_dtype(self) -> str:
        return "float32"

    def estimated_bytes(self) -> int:
        return self.num_embeddings * self.embedding_dim * 4

    def deduplicates(self) -> bool:
        """Whether lookups now go through the distinct ids: sparse gradients wanted, in dynamic graph."""
        return self.deduplicate and deduplicating(self.weight, self.sparse)

    def lookup(self, ids: paddle.Tensor) -> paddle.Tensor:
        if not self.deduplicates():
            return F.embedding(ids, self.weight, padding_idx=self.padding_idx, sparse=sparse_gradient(self.sparse))
        return deduplicated_lookup(ids, self.weight, self.padding_idx)

    def lookup_columns(self, ids: paddle.Tensor) -> list[paddle.Tensor]:
        if not self.deduplicates():
            return EmbeddingBase.lookup_columns(self, ids)  # to_static cannot transform super()
        self.check_ids(ids)
        unique, inverse = unique_ids(ids)  # one set of rows for all columns: one gradient, nothing to add
        rows = distinct_rows(unique, self.weight, self.padding_idx)
        return [F.embedding(column, rows) for column in paddle.unbind(inverse, axis=-1)]
