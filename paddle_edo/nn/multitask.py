"""MultiTaskEmbedding: one table serving several task heads, with a small per-task adapter."""
from __future__ import annotations

from typing import Sequence

import paddle

from ..errors import EdoKeyError, EdoTypeError, EdoValueError
from .base import CompositeEmbedding, EmbeddingBase


class MultiTaskEmbedding(CompositeEmbedding):
    """Shares one table (any paddle_edo layer: dense, quantized, hashed...) between tasks. Each task may
    get a ``dim x dim`` adapter, started at the identity, so tasks specialise for dim^2 floats instead of
    a table each. The table's bytes are counted once."""

    def __init__(self, table: EmbeddingBase, tasks: Sequence[str], adapters: bool = True) -> None:
        if not isinstance(table, EmbeddingBase):
            raise EdoTypeError(f"MultiTaskEmbedding: table must be a paddle_edo embedding layer, got "
                               f"{type(table).__name__}")
        if not tasks or len(set(tasks)) != len(tasks):
            raise EdoValueError(f"MultiTaskEmbedding: tasks = {list(tasks)!r} must be distinct names, at least one")
        super().__init__(table.num_embeddings, table.embedding_dim, table.padding_idx, table.sparse)
        self.table = table
        self.tasks = list(tasks)
        self.adapters = paddle.nn.LayerDict()
        if adapters:
            for task in self.tasks:
                adapter = paddle.nn.Linear(self.embedding_dim, self.embedding_dim, bias_attr=False)
                adapter.weight.set_value(paddle.eye(self.embedding_dim))
                self.adapters[task] = adapter

    def check_ids(self, ids: paddle.Tensor) -> None:
        """The shared table checks its own ids."""

    def lookup(self, ids: paddle.Tensor) -> paddle.Tensor:
        return self.table(ids)

    def for_task(self, ids: paddle.Tensor, task: str) -> paddle.Tensor:
        """The shared vectors as task ``task`` sees them."""
        if task not in self.tasks:
            raise EdoKeyError(f"MultiTaskEmbedding: unknown task {task!r}; tasks: {', '.join(self.tasks)}")
        vectors = self.table(ids)
        return self.adapters[task](vectors) if task in self.adapters else vectors
