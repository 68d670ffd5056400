"""DenseEmbedding: the fp32 table every other layer is measured against, with sparse row gradients."""
from __future__ import annotations

import paddle
import paddle.nn.functional as F

from ..schema import Option
from .base import EmbeddingBase
from .registry import register_embedding


@register_embedding("dense")
class DenseEmbedding(EmbeddingBase):
    """A plain fp32 table (like ``paddle.nn.Embedding``) whose gradient is sparse by default."""

    config_options = {
        "init_std": Option(0.01, float, low=0.0, doc="std of the normal initialiser"),
    }

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 sparse: bool = True, check_ids: bool = True, init_std: float = 0.01,
                 weight_attr: paddle.ParamAttr | None = None) -> None:
        super().__init__(num_embeddings, embedding_dim, padding_idx, sparse, check_ids)
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

    def lookup(self, ids: paddle.Tensor) -> paddle.Tensor:
        return F.embedding(ids, self.weight, padding_idx=self.padding_idx, sparse=self.sparse)
