"""MixedDimEmbedding: frequent ids get wide rows, rare ids narrow ones, projected to a common width."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import paddle

from ..errors import EdoValueError
from ..kernels import can_fuse, fused_ops
from ..schema import Option
from .base import INNER_STORAGE, CompositeEmbedding, part_attr
from .dense import DenseEmbedding
from .registry import register_embedding
from .signature import accepts_old_signature


def block_layout(frequencies: np.ndarray, embedding_dim: int, num_blocks: int, alpha: float, min_dim: int
                 ) -> tuple[np.ndarray, list[int], list[int]]:
    """Rank ids by frequency (most frequent first) and cut the ranking into geometric blocks
    (block i ends at N^((i+1)/K)); a block's width is D x (its mean frequency / the first block's)^alpha,
    as in Ginart et al. (mixed-dimension embeddings). Returns (rank of each id, block ends, widths)."""
    n = len(frequencies)
    order = np.argsort(-np.asarray(frequencies, dtype=np.float64), kind="stable")
    rank = np.empty(n, dtype=np.int32)
    rank[order] = np.arange(n, dtype=np.int32)
    ends = sorted({min(n, max(1, int(round(n ** ((i + 1) / num_blocks))))) for i in range(num_blocks)} | {n})
    starts = [0, *ends[:-1]]
    counts = np.asarray(frequencies, dtype=np.float64)[order]
    popularity = [counts[s:e].mean() + 1e-12 for s, e in zip(starts, ends)]
    dims = [int(np.clip(round(embedding_dim * (p / popularity[0]) ** alpha), min_dim, embedding_dim))
            for p in popularity]
    return rank, ends, dims


@register_embedding("mixed_dim")
class MixedDimEmbedding(CompositeEmbedding):
    """Rows ranked by frequency into blocks, each block a table of its own width and a projection to
    ``embedding_dim``. Needs the training frequencies of the ids (``paddle_edo.data.count_frequencies``;
    configs: ``frequencies: train``): a float array ``[num_embeddings]`` (EdoValueError for another
    length). Lookups, dtypes and errors: the EmbeddingBase contract."""

    needs_frequencies = True
    config_options = {
        "num_blocks": Option(4, int, low=1, high=16),
        "alpha": Option(0.5, float, low=0.0, high=2.0, doc="width ~ popularity^alpha"),
        "min_dim": Option(2, int, low=1),
        "frequencies": Option("train", str, choices=("train",), doc="where the id frequencies come from"),
        "storage_format": INNER_STORAGE,
    }

    @accepts_old_signature(("num_embeddings", "embedding_dim", "frequencies", "num_blocks", "alpha", "min_dim",
                            "padding_idx", "sparse", "init_std"))
    def __init__(self, num_embeddings: int, embedding_dim: int, frequencies: Sequence[float] | np.ndarray,
                 num_blocks: int = 4, alpha: float = 0.5, min_dim: int = 2, *, padding_idx: int | None = None,
                 sparse: bool = True, weight_attr: paddle.ParamAttr | None = None, name: str | None = None,
                 init_std: float = 0.01, storage_format: str = "fp32") -> None:
        super().__init__(num_embeddings, embedding_dim, padding_idx=padding_idx, sparse=sparse, name=name)
        self.keep_inner_tables_as(storage_format)
        frequencies = np.asarray(frequencies)
        if frequencies.shape != (num_embeddings,):
            raise EdoValueError(f"{type(self).__name__}: frequencies has shape {frequencies.shape}, expected "
                                f"({num_embeddings},): one count per id")
        if (frequencies < 0).any():
            raise EdoValueError(f"{type(self).__name__}: frequencies must be >= 0")
        rank, ends, dims = block_layout(frequencies, embedding_dim, num_blocks, alpha, min_dim)
        self.block_ends, self.block_dims = ends, dims
        self.register_buffer("rank", paddle.to_tensor(rank))
        self.register_buffer("block_starts", paddle.to_tensor(np.array([0, *ends[:-1]], dtype=np.int32)))
        self.blocks = paddle.nn.LayerList()
        self.projections = paddle.nn.LayerList()
        for index, (start, end, width) in enumerate(zip([0, *ends[:-1]], ends, dims)):
            # one extra zero row at the end (the block's padding row): tables saved before lookups were
            # partitioned by block looked it up for ids outside the block, and keep their shape
            self.blocks.append(DenseEmbedding(end - start + 1, width, padding_idx=end - start, sparse=sparse,
                                              weight_attr=part_attr(weight_attr, f"block{index}"), init_std=init_std))
            self.projections.append(paddle.nn.Linear(width, embedding_dim, bias_attr=False)
                                    if width < embedding_dim else paddle.nn.Identity())

    def tables(self):
        return list(self.blocks)

    def _fusable(self, ids: paddle.Tensor) -> bool:
        """Plain fp32 blocks and projections, and a forward pass the fused kernel may serve."""
        if not all(type(b) is DenseEmbedding for b in self.blocks):
            return False
        linear = [p.weight for p in self.projections if isinstance(p, paddle.nn.Linear)]
        return can_fuse(ids, *(b.weight for b in self.blocks), *linear)

    def _fused_lookup(self, ids: paddle.Tensor) -> paddle.Tensor:
        """The fused CPU kernel; an empty projection stands for a block already embedding_dim wide."""
        none = paddle.zeros([0, self.embedding_dim], dtype="float32")
        projections = [p.weight if isinstance(p, paddle.nn.Linear) else none for p in self.projections]
        return fused_ops().edo_mixed_dim_lookup(ids.astype("int64"), self.rank, self.block_starts,
                                                [b.weight for b in self.blocks], projections, self.embedding_dim,
                                                self.padding_idx is not None, self.padding_idx or 0)

    @classmethod
    def from_config(cls, num_embeddings, options, padding_idx=None, frequencies=None):
        if frequencies is None:
            raise EdoValueError("embedding.type 'mixed_dim' needs id frequencies (embedding.frequencies: train)")
        return cls(num_embeddings, options["dim"], frequencies, options["num_blocks"], options["alpha"],
                   options["min_dim"], padding_idx=padding_idx, sparse=options["sparse"],
                   storage_format=options.get("storage_format", "fp32"))

    def lookup(self, ids: paddle.Tensor) -> paddle.Tensor:
        """Each block looks up and projects only its own ids; one gather then puts every vector in its
        place (padding ids belong to no block and read a zero row). Writing the blocks into the output
        one scatter at a time cost 4x in training (each scatter's backward copies the whole gradient). A
        scratch position past the end, read from each block's zero row, keeps every block's index
        non-empty (dynamic shapes: the same program serves batches where a block gets no id)."""
        if self._fusable(ids):
            return self._fused_lookup(ids)
        flat = ids.flatten()
        rank = paddle.gather(self.rank, flat).astype("int32")
        block_of = paddle.searchsorted(self.block_starts, rank, right=True) - 1
        if self.padding_idx is not None:
            block_of = paddle.where(flat == self.padding_idx, paddle.full_like(block_of, -1), block_of)
        scratch = paddle.shape(flat).astype("int64")                  # [n]: the position after the last
        rank = paddle.concat([rank, paddle.zeros([1], dtype="int32")])
        wheres, vectors = [], []
        for index, (block, projection) in enumerate(zip(self.blocks, self.projections)):
            where = paddle.concat([paddle.nonzero(block_of == index).flatten(), scratch])
            local = (paddle.gather(rank, where) - self.block_starts[index]).astype("int64")
            local = paddle.where(where == scratch, paddle.full_like(local, block.num_embeddings - 1), local)
            wheres.append(where)
            vectors.append(projection(block(local)))
        where = paddle.concat(wheres)
        found = paddle.shape(where).astype("int64")                  # [m]: the zero row after the vectors
        vectors = paddle.concat([*vectors, paddle.zeros([1, self.embedding_dim], dtype="float32")])
        source = paddle.scatter(paddle.zeros_like(rank, dtype="int64") + found, where,
                                paddle.arange(found[0], dtype="int64"))  # scratch: written by every block
        return paddle.gather(vectors, source[:-1]).reshape([*ids.shape, self.embedding_dim])
