"""RemoteTable: what a rank of a sharded job holds of a table placed whole on another rank (``shards``):
its shape and owner, no rows. The sharded collection sends the table's ids to the owner and takes back
their vectors; the layer itself never looks anything up."""
from __future__ import annotations

import paddle

from ..errors import EdoRuntimeError
from .base import EmbeddingBase
from .shards import TableShare


class RemoteTable(EmbeddingBase):
    """A table of ``num_embeddings`` ids and ``embedding_dim`` outputs held whole by rank
    ``table_share.owner``; holds no bytes. ``forward`` raises EdoRuntimeError: only a sharded collection
    (which asks the owner) looks it up."""

    def __init__(self, num_embeddings: int, embedding_dim: int, table_share: TableShare, *,
                 padding_idx: int | None = None, kind: str = "", name: str | None = None) -> None:
        super().__init__(num_embeddings, embedding_dim, padding_idx=padding_idx, sparse=True, name=name)
        self.table_share = table_share
        self.kind = kind  # the registry name of the owner's layer, for reports
        self.report_note = f"{kind or 'the'} table held whole by rank {table_share.owner}"

    @property
    def storage_dtype(self) -> str:
        return "float32"

    def estimated_bytes(self) -> int:
        return 0

    def lookup(self, ids: paddle.Tensor) -> paddle.Tensor:
        raise EdoRuntimeError(f"{self.full_name()}: this {self.kind or 'table'} lives on rank "
                              f"{self.table_share.owner}; a sharded collection looks it up there")

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, {self.kind}, on rank {self.table_share.owner}"
