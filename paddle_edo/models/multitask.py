"""Two heads over shared tables: click prediction (logit) and rating regression."""
from __future__ import annotations

from typing import Any, Sequence

import paddle
import paddle.nn as nn

from ..data.ctr import FieldSpec
from ..nn import EmbeddingCollection, MultiTaskEmbedding, TableSpec
from ..schema import ConfigError, Option
from .base import RecModel, refuse_dense_features
from .mlp import mlp
from .registry import register_model

TASKS = ("click", "rating")


@register_model("click_and_rating")
class ClickAndRating(RecModel):
    """Every field's table is shared by both heads: the tables are one EmbeddingCollection looked up once
    (bags mean-pooled), and each head passes each field's vector through its own ``dim x dim`` adapter
    (``adapters[task]`` [F, D, D], started at the identity) before its own MLP; with
    ``embedding.collection: false`` each field is a MultiTaskEmbedding (the adapters inside it, the bags
    pooled after them). ``forward`` returns (click logit, rating)."""

    regression_targets = ("rating",)
    config_options = {
        "task_weights": {  # the loss is click x BCE + rating x MSE
            "click": Option(1.0, float, low=0.0, doc="click_and_rating: weight of the click (BCE) loss"),
            "rating": Option(0.5, float, low=0.0, doc="click_and_rating: weight of the rating (MSE) loss"),
        },
    }

    def __init__(self, fields: Sequence[FieldSpec], embedding: TableSpec | dict[str, Any],
                 hidden_units: Sequence[int] = (64,), frequencies: dict[str, Any] | None = None,
                 task_weights: dict[str, float] | None = None) -> None:
        super().__init__(fields)
        spec = TableSpec.from_section(embedding)
        defaults = {task: option.default for task, option in self.config_options["task_weights"].items()}
        self.task_weights = {**defaults, **(task_weights or {})}
        self.embedding_dim = spec.dim
        frequencies = frequencies or {}
        tables = {f.name: spec.build(f.vocab_size, 0, frequencies.get(f.name)) for f in self.fields}
        self.collected = spec.collection  # a flag, not isinstance: Paddle 3's SOT misreads it on a layer
        if spec.collection:  # one lookup for both tasks; each task's adapters [F, D, D], started at the identity
            self.embeddings = EmbeddingCollection(tables, {f.name: "mean" if f.name in self.bag_fields else "none"
                                                           for f in self.fields})
            identity = paddle.eye(spec.dim).tile([len(self.fields), 1, 1])
            self.adapters = nn.ParameterList([
                self.create_parameter([len(self.fields), spec.dim, spec.dim],
                                      default_initializer=nn.initializer.Assign(identity)) for _ in TASKS])
        else:
            self.embeddings = nn.LayerDict({name: MultiTaskEmbedding(table.num_embeddings, spec.dim, TASKS, table=table)
                                            for name, table in tables.items()})
            self.adapters = None
        width = spec.dim * len(self.fields)
        self.heads = nn.LayerDict({task: mlp(width, hidden_units) for task in TASKS})

    @classmethod
    def from_config(cls, fields: Sequence[FieldSpec], config: dict[str, Any],
                    frequencies: dict[str, Any] | None = None, dense_features: Sequence[str] = ()
                    ) -> "ClickAndRating":
        refuse_dense_features(cls, dense_features)
        model = config["model"]
        return cls(fields, config["embedding"], model["hidden_units"], frequencies, model["task_weights"])

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> None:
        if config["data"]["name"] != "movielens":
            raise ConfigError(f"model.name = 'click_and_rating' needs rating targets (data.name: movielens), "
                              f"not data.name = {config['data']['name']!r}")

    def table_fields(self) -> dict[str, str]:
        """Sublayer name of each table -> the field whose ids it looks up (for monitors)."""
        return {f"embeddings.{f.name}": f.name for f in self.fields}

    def _features(self, ids: list[paddle.Tensor], task: str) -> paddle.Tensor:
        """Per-table layers: each field's vectors as ``task`` sees them, bags mean-pooled, [B, F x D]."""
        pooled = []
        for field, x in zip(self.fields, ids):
            vectors = self.embeddings[field.name].for_task(x, task)
            if field.name in self.bag_fields:
                count = paddle.clip((x != 0).astype(vectors.dtype).sum(axis=1, keepdim=True), min=1.0)
                vectors = vectors.sum(axis=1) / count
            pooled.append(vectors)
        return paddle.concat(pooled, axis=-1)

    def _adapted(self, shared: paddle.Tensor, task: str) -> paddle.Tensor:
        """The collection's vectors [B, F x D] through ``task``'s adapters, one per field, [B, F x D]."""
        fields = shared.reshape([-1, len(self.fields), self.embedding_dim]).transpose([1, 0, 2])  # [F, B, D]
        adapted = paddle.matmul(fields, self.adapters[TASKS.index(task)])                         # [F, B, D]
        return adapted.transpose([1, 0, 2]).reshape([-1, len(self.fields) * self.embedding_dim])

    def forward(self, ids: list[paddle.Tensor]) -> tuple[paddle.Tensor, paddle.Tensor]:
        if self.collected:
            shared = self.embeddings(ids)
            features = {task: self._adapted(shared, task) for task in TASKS}
        else:
            features = {task: self._features(ids, task) for task in TASKS}
        click = self.heads["click"](features["click"]).squeeze(-1)
        rating = self.heads["rating"](features["rating"]).squeeze(-1) + 3.5  # centred on the mean
        return click, rating
