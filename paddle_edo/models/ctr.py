"""DeepFM over categorical fields; every table comes from the embedding registry."""
from __future__ import annotations

from typing import Any, Sequence

import paddle
import paddle.nn as nn

from ..data.ctr import FieldSpec
from ..errors import EdoValueError
from ..nn import EmbeddingBase, TableSpec, pooled_lookup
from ..schema import Option
from .base import RecModel
from .mlp import mlp
from .registry import register_model

POOLINGS = ("mean", "sum")


@register_model("deepfm")
class DeepFM(RecModel):
    """Field embeddings (multi-valued fields pooled) -> first-order + FM + MLP -> one logit per sample;
    dense features (numeric columns) join the MLP's input and a linear first-order term.

    ``forward`` takes a list with one id tensor per field, in field order ([batch] or
    [batch, max_len]), then the dense features [batch, K] if any; it exports with that list of InputSpecs.
    Each table (``embeddings.<field>``, ``first_order.<field>``) takes its own section from
    ``embedding.tables`` when it has one (a plan of tools/plan.py), else the embedding section.
    """

    table_sections = True

    config_options = {
        "first_order": Option(True, bool, doc="per-id first-order weights (tables of dim 1)"),
        "fm": Option(True, bool, doc="factorisation-machine pairwise term"),
        "pooling": Option("mean", str, choices=POOLINGS, doc="pooling of multi-valued fields"),
    }

    def __init__(self, fields: Sequence[FieldSpec], embedding: TableSpec | dict[str, Any],
                 hidden_units: Sequence[int] = (256, 128), dropout: float = 0.0, first_order: bool = True,
                 fm: bool = True, pooling: str = "mean",
                 frequencies: dict[str, Any] | None = None, dense_features: Sequence[str] = ()) -> None:
        super().__init__(fields, dense_features)
        if pooling not in POOLINGS:
            raise EdoValueError(f"DeepFM: pooling = {pooling!r}; expected 'mean' or 'sum'")
        spec = TableSpec.from_section(embedding)
        self.pooling = pooling
        self.use_fm = fm
        frequencies = frequencies or {}
        self.embeddings = nn.LayerDict({f.name: spec.for_table(f"embeddings.{f.name}").build(
            f.vocab_size, 0, frequencies.get(f.name)) for f in self.fields})
        self.first_order = None
        if first_order:
            narrow = spec.with_dim(1)
            self.first_order = nn.LayerDict({f.name: narrow.for_table(f"first_order.{f.name}").build(
                f.vocab_size, 0, frequencies.get(f.name)) for f in self.fields})
        spec.check_table_names(list(self.table_fields()), "DeepFM")
        num_dense = len(self.dense_features)
        self.mlp = mlp(spec.dim * len(self.fields) + num_dense, hidden_units, dropout)
        self.dense_weights = nn.Linear(num_dense, 1, bias_attr=False) if num_dense else None

    @classmethod
    def from_config(cls, fields: Sequence[FieldSpec], config: dict[str, Any],
                    frequencies: dict[str, Any] | None = None, dense_features: Sequence[str] = ()) -> "DeepFM":
        model = config["model"]
        return cls(fields, config["embedding"], model["hidden_units"], model["dropout"], model["first_order"],
                   model["fm"], model["pooling"], frequencies, dense_features)

    def table_fields(self) -> dict[str, str]:
        """Sublayer name of each table -> the field whose ids it looks up (for monitors)."""
        names = {f"embeddings.{f.name}": f.name for f in self.fields}
        if self.first_order is not None:
            names.update({f"first_order.{f.name}": f.name for f in self.fields})
        return names

    def _lookup(self, field: FieldSpec, table: EmbeddingBase, ids: paddle.Tensor) -> paddle.Tensor:
        """A field's vectors [B, D]: a multi-valued field's ids [B, L] pooled as a bag (padding id 0)."""
        if field.name not in self.bag_fields:
            return table(ids)
        return pooled_lookup(table, ids, mode=self.pooling, padding_idx=0, owner=f"DeepFM field '{field.name}'")

    def forward(self, inputs: list[paddle.Tensor]) -> paddle.Tensor:
        ids = inputs[:len(self.fields)]
        vectors = [self._lookup(f, self.embeddings[f.name], x) for f, x in zip(self.fields, ids)]
        stacked = paddle.stack(vectors, axis=1)                        # [B, F, D]
        deep = stacked.flatten(start_axis=1)
        if self.dense_weights is not None:
            dense = inputs[len(self.fields)].astype(deep.dtype)        # [B, K]
            deep = paddle.concat([deep, dense], axis=-1)
        logit = self.mlp(deep).squeeze(-1)                             # [B]
        if self.dense_weights is not None:
            logit = logit + self.dense_weights(dense).squeeze(-1)
        if self.use_fm:
            square_of_sum = stacked.sum(axis=1).square()
            sum_of_square = stacked.square().sum(axis=1)
            logit = logit + 0.5 * (square_of_sum - sum_of_square).sum(axis=-1)
        if self.first_order is not None:
            weights = [self._lookup(f, self.first_order[f.name], x) for f, x in zip(self.fields, ids)]
            logit = logit + paddle.concat(weights, axis=-1).sum(axis=-1)
        return logit
