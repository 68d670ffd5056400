"""Two heads over shared tables: click prediction (logit) and rating regression."""
from __future__ import annotations

from typing import Any, Sequence

import paddle
import paddle.nn as nn

from ..data.ctr import FieldSpec
from ..nn.multitask import MultiTaskEmbedding
from ..nn.registry import build_embedding
from .mlp import mlp

TASKS = ("click", "rating")


class ClickAndRating(nn.Layer):
    """Every field's table is a MultiTaskEmbedding shared by both heads; each head pools the fields it
    sees through its task adapter and runs its own MLP. ``forward`` returns (click logit, rating)."""

    regression_targets = ("rating",)  # what the outputs after the click logit predict (the engine's MSE terms)

    def __init__(self, fields: Sequence[FieldSpec], embedding: dict[str, Any], hidden_units: Sequence[int] = (64,),
                 frequencies: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.fields = list(fields)
        frequencies = frequencies or {}
        self.embeddings = nn.LayerDict({
            f.name: MultiTaskEmbedding(build_embedding(embedding, f.vocab_size, 0, frequencies.get(f.name)), TASKS)
            for f in self.fields})
        width = embedding["dim"] * len(self.fields)
        self.heads = nn.LayerDict({task: mlp(width, hidden_units) for task in TASKS})

    @classmethod
    def from_config(cls, fields: Sequence[FieldSpec], config: dict[str, Any],
                    frequencies: dict[str, Any] | None = None) -> "ClickAndRating":
        return cls(fields, config["embedding"], config["model"]["hidden_units"], frequencies)

    def table_fields(self) -> dict[str, str]:
        """Sublayer name of each table -> the field whose ids it looks up (for monitors)."""
        return {f"embeddings.{f.name}": f.name for f in self.fields}

    def _features(self, ids: list[paddle.Tensor], task: str) -> paddle.Tensor:
        pooled = []
        for field, x in zip(self.fields, ids):
            vectors = self.embeddings[field.name].for_task(x, task)
            if field.multi_valued:
                count = paddle.clip((x != 0).astype(vectors.dtype).sum(axis=1, keepdim=True), min=1.0)
                vectors = vectors.sum(axis=1) / count
            pooled.append(vectors)
        return paddle.concat(pooled, axis=-1)

    def forward(self, ids: list[paddle.Tensor]) -> tuple[paddle.Tensor, paddle.Tensor]:
        click = self.heads["click"](self._features(ids, "click")).squeeze(-1)
        rating = self.heads["rating"](self._features(ids, "rating")).squeeze(-1) + 3.5  # centred on the mean
        return click, rating
