"""Two heads over shared tables: click prediction (logit) and rating regression."""
from __future__ import annotations

from typing import Any, Sequence

import paddle
import paddle.nn as nn

from ..data.ctr import FieldSpec
from ..nn import MultiTaskEmbedding, TableSpec
from ..schema import ConfigError, Option
from .base import RecModel, refuse_dense_features
from .mlp import mlp
from .registry import register_model

TASKS = ("click", "rating")


@register_model("click_and_rating")
class ClickAndRating(RecModel):
    """Every field's table is a MultiTaskEmbedding shared by both heads; each head pools the fields it
    sees through its task adapter and runs its own MLP. ``forward`` returns (click logit, rating)."""

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
        frequencies = frequencies or {}
        self.embeddings = nn.LayerDict({
            f.name: MultiTaskEmbedding(f.vocab_size, spec.dim, TASKS,
                                       table=spec.build(f.vocab_size, 0, frequencies.get(f.name)))
            for f in self.fields})
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
        pooled = []
        for field, x in zip(self.fields, ids):
            vectors = self.embeddings[field.name].for_task(x, task)
            if field.name in self.bag_fields:
                count = paddle.clip((x != 0).astype(vectors.dtype).sum(axis=1, keepdim=True), min=1.0)
                vectors = vectors.sum(axis=1) / count
            pooled.append(vectors)
        return paddle.concat(pooled, axis=-1)

    def forward(self, ids: list[paddle.Tensor]) -> tuple[paddle.Tensor, paddle.Tensor]:
        click = self.heads["click"](self._features(ids, "click")).squeeze(-1)
        rating = self.heads["rating"](self._features(ids, "rating")).squeeze(-1) + 3.5  # centred on the mean
        return click, rating
