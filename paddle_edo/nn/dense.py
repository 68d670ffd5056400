"""DenseEmbedding: the fp32 table every other layer is measured against, with sparse row gradients."""
from __future__ import annotations

import paddle
import paddle.nn.functional as F

from ..compat import sparse_gradient
from ..errors import EdoTypeError, EdoValueError
from ..schema import Option
from .base import EmbeddingBase
from .dedup import deduplicated_lookup, deduplicating, distinct_rows, unique_ids
from .registry import register_embedding
from .signature import accepts_old_signature


@register_embedding("dense")
class DenseEmbedding(EmbeddingBase):
    """A plain fp32 table (like ``paddle.nn.Embedding``) whose gradient is sparse by default. Lookups, dtypes and errors: the EmbeddingBase contract.

    Training in dynamic graph with sparse gradients, it looks each distinct id of a batch up once
    (``deduplicate``, see ``dedup.py``): the same outputs and updates, and a gradient of distinct rows
    that the optimizer updates without merging duplicates.
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
