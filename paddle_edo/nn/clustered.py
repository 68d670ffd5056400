"""ClusteredEmbedding: frequent ids keep their rows, the rest share the row of their K-Means cluster."""
from __future__ import annotations

import numpy as np
import paddle

from ..errors import EdoValueError
from ..kmeans import kmeans
from ..schema import Option
from .base import CompositeEmbedding, table_settings
from .dense import DenseEmbedding
from .registry import register_embedding
from .signature import accepts_old_signature


def cluster_rows(weight: np.ndarray, frequencies: np.ndarray, num_clusters: int, keep_top: int,
                 padding_idx: int | None, seed: int = 0, owner: str = "ClusteredEmbedding"
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(row of each id, rows): the keep_top most frequent ids keep their rows, the others map to the
    K-Means centroid of their cluster."""
    n = len(weight)
    frequencies = np.asarray(frequencies)
    if frequencies.shape != (n,):
        raise EdoValueError(f"{owner}: frequencies has shape {frequencies.shape}, expected ({n},)")
    if not 0 <= keep_top <= n:
        raise EdoValueError(f"{owner}: keep_top = {keep_top} must be in [0, {n}]")
    order = np.argsort(-frequencies, kind="stable")
    order = order[order != padding_idx] if padding_idx is not None else order
    kept, rest = order[:keep_top], order[keep_top:]
    if num_clusters > len(rest) or (num_clusters < 1 and len(rest)):
        raise EdoValueError(f"{owner}: num_clusters = {num_clusters} must be in [1, {len(rest)}] "
                            f"(the ids left after keep_top = {keep_top})")
    mapping = np.zeros(n, dtype=np.int32)
    mapping[kept] = np.arange(len(kept), dtype=np.int32)
    rows = [weight[kept]]
    if len(rest):
        centroids, labels = kmeans(weight[rest], num_clusters, seed=seed)
        mapping[rest] = len(kept) + labels
        rows.append(centroids)
    return mapping, np.concatenate(rows).astype(np.float32)


CLUSTER_FRACTION, KEEP_FRACTION = 0.05, 0.01


def cluster_counts(num_embeddings: int, padding_idx: int | None, cluster_fraction: float = CLUSTER_FRACTION,
                   keep_fraction: float = KEEP_FRACTION) -> tuple[int, int]:
    """(num_clusters, keep_top) from the shares of the ids: the defaults in Python and in configs."""
    keep = int(round(keep_fraction * num_embeddings))
    clusters = max(1, min(int(round(cluster_fraction * num_embeddings)),
                          num_embeddings - keep - (padding_idx is not None)))
    return clusters, keep


@register_embedding("clustered")
class ClusteredEmbedding(CompositeEmbedding):
    """Ids share rows: the most frequent keep their own, the rest read their K-Means cluster's centroid.

    Made from a trained table (``from_embedding``), or trained in full first and clustered by ``pack()``
    (the engine packs at the end of training, as for PTQ; configs: ``embedding.type: clustered``). The
    shared table can be fine-tuned afterwards. Lookups, dtypes and errors: the EmbeddingBase contract.
    """

    needs_frequencies = True
    config_options = {
        "cluster_fraction": Option(CLUSTER_FRACTION, float, low=1e-9, high=1.0, doc="clusters = fraction x rows"),
        "keep_fraction": Option(KEEP_FRACTION, float, low=0.0, high=1.0, doc="most frequent ids keeping their rows"),
        "frequencies": Option("train", str, choices=("train",)),
    }

    @accepts_old_signature(("num_embeddings", "embedding_dim", "mapping", "rows", "padding_idx", "sparse",
                            "frequencies", "num_clusters", "keep_top"))
    def __init__(self, num_embeddings: int, embedding_dim: int, *, padding_idx: int | None = None,
                 sparse: bool = True, weight_attr: paddle.ParamAttr | None = None, name: str | None = None,
                 frequencies: np.ndarray | None = None, num_clusters: int | None = None, keep_top: int | None = None,
                 mapping: np.ndarray | None = None, rows: np.ndarray | None = None, init_std: float = 0.01) -> None:
        super().__init__(num_embeddings, embedding_dim, padding_idx=padding_idx, sparse=sparse, name=name)
        if num_clusters is None or keep_top is None:
            default_clusters, default_keep = cluster_counts(num_embeddings, padding_idx)
            num_clusters = default_clusters if num_clusters is None else num_clusters
            keep_top = default_keep if keep_top is None else keep_top
        self.frequencies, self.num_clusters, self.keep_top = frequencies, num_clusters, keep_top
        if mapping is None:  # train the full table first; pack() clusters it
            if frequencies is None:
                raise EdoValueError(f"{type(self).__name__}: give frequencies (the table trains in full, then "
                                    f"clusters), or mapping and rows (an already clustered table)")
            self.packed = False
            self.table = DenseEmbedding(num_embeddings, embedding_dim, padding_idx=padding_idx, sparse=sparse,
                                        weight_attr=weight_attr, init_std=init_std)
            self.register_buffer("mapping", paddle.arange(num_embeddings, dtype="int32"))
        else:
            self._install(np.asarray(mapping), np.asarray(rows, dtype=np.float32))

    def _install(self, mapping: np.ndarray, rows: np.ndarray) -> None:
        if mapping.shape != (self.num_embeddings,) or mapping.min() < 0 or mapping.max() >= len(rows):
            raise EdoValueError(f"{type(self).__name__}: mapping must give each of {self.num_embeddings} ids a row "
                                f"in [0, {len(rows)})")
        mapping = mapping.astype(np.int32)
        dummy = len(rows)  # padding ids read this extra row: always zero, never updated
        if self.padding_idx is not None:
            mapping[self.padding_idx] = dummy
        self.register_buffer("mapping", paddle.to_tensor(mapping))
        self.table = DenseEmbedding(len(rows) + 1, self.embedding_dim, padding_idx=dummy, sparse=self.sparse)
        with paddle.no_grad():
            self.table.weight.set_value(np.concatenate([rows, np.zeros((1, self.embedding_dim), np.float32)]))
        self.packed = True

    @classmethod
    def from_config(cls, num_embeddings, options, padding_idx=None, frequencies=None):
        if frequencies is None:
            raise EdoValueError("embedding.type 'clustered' needs id frequencies (embedding.frequencies: train)")
        clusters, keep = cluster_counts(num_embeddings, padding_idx, options["cluster_fraction"],
                                        options["keep_fraction"])
        return cls(num_embeddings, options["dim"], padding_idx=padding_idx, sparse=options["sparse"],
                   frequencies=frequencies, num_clusters=clusters, keep_top=keep)

    @classmethod
    def from_embedding(cls, embedding: paddle.nn.Layer, frequencies: np.ndarray, num_clusters: int,
                       keep_top: int, seed: int = 0) -> "ClusteredEmbedding":
        weight = embedding.weight.numpy()
        padding_idx, sparse = table_settings(embedding)
        mapping, rows = cluster_rows(weight, frequencies, num_clusters, keep_top, padding_idx, seed,
                                     f"{cls.__name__}.from_embedding")
        return cls(weight.shape[0], weight.shape[1], padding_idx=padding_idx, sparse=sparse, mapping=mapping, rows=rows)

    def pack(self) -> "ClusteredEmbedding":
        """Cluster the trained full table (keep_top ids keep their rows)."""
        if not self.packed:
            mapping, rows = cluster_rows(self.table.weight.numpy(), self.frequencies, self.num_clusters,
                                         self.keep_top, self.padding_idx, owner=self.full_name())
            self._install(mapping, rows)
        return self

    def lookup(self, ids: paddle.Tensor) -> paddle.Tensor:
        rows = paddle.gather(self.mapping, ids.flatten()).reshape(ids.shape).astype("int64")
        return self.table(rows)
