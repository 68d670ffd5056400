"""MultiTaskEmbedding: one table serving several task heads, with a small per-task adapter."""
from __future__ import annotations

from typing import Sequence

import paddle

from ..errors import EdoKeyError, EdoValueError
from .base import CompositeEmbedding, EmbeddingBase
from .dense import given_or_dense_table
from .registry import register_embedding
from .signature import accepts_old_signature


@register_embedding("multitask")
class MultiTaskEmbedding(CompositeEmbedding):
    """ids [...] -> [..., embedding_dim] from one table shared between ``tasks``; ``for_task(ids, task)``
    gives the vectors as one task sees them. Each task may get a ``dim x dim`` adapter, started at the
    identity, so tasks specialise for dim^2 floats instead of a table each. The table is a DenseEmbedding
    of its own, or ``table=`` any paddle_edo table of that many ids and that width (quantized, hashed...);
    its bytes are counted once."""

    field_table = False  # wraps one table for several task heads; built by the multi-task model

    @accepts_old_signature(("table", "tasks", "adapters"),
                           is_old=lambda args, kwargs: bool(args) and isinstance(args[0], paddle.nn.Layer),
                           adapt=lambda named: {"num_embeddings": named["table"].num_embeddings,
                                                "embedding_dim": named["table"].embedding_dim, **named})
    def __init__(self, num_embeddings: int, embedding_dim: int, tasks: Sequence[str], *,
                 padding_idx: int | None = None, sparse: bool = True, weight_attr: paddle.ParamAttr | None = None,
                 name: str | None = None, table: EmbeddingBase | None = None, adapters: bool = True,
                 init_std: float = 0.01) -> None:
        label = type(self).__name__
        if isinstance(tasks, str) or not tasks or len(set(tasks)) != len(tasks):
            raise EdoValueError(f"{label}: tasks = {tasks!r} must be distinct names, at least one")
        table = given_or_dense_table(label, table, num_embeddings, embedding_dim, padding_idx, sparse, weight_attr,
                                     init_std)
        super().__init__(num_embeddings, embedding_dim, padding_idx=table.padding_idx, sparse=table.sparse, name=name)
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
