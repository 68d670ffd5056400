"""ClusteredEmbedding: frequent ids keep their rows, the rest share the row of their K-Means cluster."""
from __future__ import annotations

import numpy as np
import paddle

from ..kmeans import kmeans
from .base import CompositeEmbedding
from .dense import DenseEmbedding


class ClusteredEmbedding(CompositeEmbedding):
    """A compressed copy of a trained table (``from_embedding``): ``keep_top`` most frequent ids keep
    their own rows, every other id reads its cluster's centroid; the table can be fine-tuned after."""

    def __init__(self, num_embeddings: int, embedding_dim: int, mapping: np.ndarray, rows: np.ndarray,
                 padding_idx: int | None = None, sparse: bool = True) -> None:
        super().__init__(num_embeddings, embedding_dim, padding_idx, sparse)
        mapping = np.asarray(mapping, dtype=np.int32).copy()
        rows = np.asarray(rows, dtype=np.float32)
        if mapping.shape != (num_embeddings,) or mapping.min() < 0 or mapping.max() >= len(rows):
            raise ValueError(f"{type(self).__name__}: mapping must give each of {num_embeddings} ids a row in "
                             f"[0, {len(rows)})")
        dummy = len(rows)  # padding ids read this extra row: always zero, never updated
        if padding_idx is not None:
            mapping[self.padding_idx] = dummy
        self.register_buffer("mapping", paddle.to_tensor(mapping))
        self.table = DenseEmbedding(len(rows) + 1, embedding_dim, padding_idx=dummy, sparse=sparse)
        with paddle.no_grad():
            self.table.weight.set_value(np.concatenate([rows, np.zeros((1, embedding_dim), np.float32)]))

    @classmethod
    def from_embedding(cls, embedding: paddle.nn.Layer, frequencies: np.ndarray, num_clusters: int,
                       keep_top: int, seed: int = 0, iterations: int = 20) -> "ClusteredEmbedding":
        weight = embedding.weight.numpy()
        n, dim = weight.shape
        frequencies = np.asarray(frequencies)
        name = cls.__name__
        if frequencies.shape != (n,):
            raise ValueError(f"{name}.from_embedding: frequencies has shape {frequencies.shape}, expected ({n},)")
        if not 0 <= keep_top <= n:
            raise ValueError(f"{name}.from_embedding: keep_top = {keep_top} must be in [0, {n}]")
        padding_idx = getattr(embedding, "padding_idx", getattr(embedding, "_padding_idx", None))
        padding_idx = None if padding_idx is None or padding_idx < 0 else int(padding_idx)
        order = np.argsort(-frequencies, kind="stable")
        order = order[order != padding_idx] if padding_idx is not None else order
        kept, rest = order[:keep_top], order[keep_top:]
        if num_clusters > len(rest) or (num_clusters < 1 and len(rest)):
            raise ValueError(f"{name}.from_embedding: num_clusters = {num_clusters} must be in [1, {len(rest)}] "
                             f"(the ids left after keep_top = {keep_top})")
        mapping = np.zeros(n, dtype=np.int32)
        mapping[kept] = np.arange(len(kept), dtype=np.int32)
        rows = [weight[kept]]
        if len(rest):
            centroids, labels = kmeans(weight[rest], num_clusters, iterations, seed)
            mapping[rest] = len(kept) + labels
            rows.append(centroids)
        sparse = getattr(embedding, "sparse", getattr(embedding, "_sparse", True))
        return cls(n, dim, mapping, np.concatenate(rows), padding_idx, sparse)

    def lookup(self, ids: paddle.Tensor) -> paddle.Tensor:
        rows = paddle.gather(self.mapping, ids.flatten()).reshape(ids.shape).astype("int64")
        return self.table(rows)
