"""DeepFM over categorical fields; every table comes from the embedding registry."""
from __future__ import annotations

from typing import Any, Sequence

import paddle
import paddle.nn as nn

from ..data.ctr import FieldSpec
from ..errors import EdoValueError
from ..nn import EmbeddingBase, EmbeddingCollection, TableSpec, pooled_lookup
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
    ``embedding.tables`` when it has one (a plan of tools/plan.py), else the embedding section. With
    ``embedding.collection`` (the default) each group of tables is an ``EmbeddingCollection``: one lookup
    (and, with a bound table optimizer, one training backward) for all fields.
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
        self.embedding_dim = spec.dim

        frequencies = frequencies or {}
        self.collected = spec.collection  # a flag, not isinstance: Paddle 3's SOT misreads it on a layer
        self.embeddings = self._tables(spec, "embeddings", frequencies)
        self.first_order = self._tables(spec.with_dim(1), "first_order", frequencies) if first_order else None
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

    def _tables(self, spec: TableSpec, group: str, frequencies: dict[str, Any]) -> nn.Layer:
        """One table per field, named ``<group>.<field>``: a collection (multi-valued fields pooled by it),
        or a LayerDict with ``embedding.collection: false``."""
        tables = {f.name: spec.for_table(f"{group}.{f.name}").build(f.vocab_size, 0, frequencies.get(f.name))
                  for f in self.fields}
        if not spec.collection:
            return nn.LayerDict(tables)
        return EmbeddingCollection(tables, {f.name: self.pooling if f.name in self.bag_fields else "none"
                                            for f in self.fields})

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

    def _field_vectors(self, tables: nn.Layer, ids: list[paddle.Tensor]) -> paddle.Tensor:
        """Every field's vector side by side, [B, F x D]."""
        if self.collected:
            return tables(ids)
        vectors = []  # a loop: Paddle 3's SOT loses `self` in a comprehension's closure
        for field, x in zip(self.fields, ids):
            vectors.append(self._lookup(field, tables[field.name], x))
        return paddle.concat(vectors, axis=-1)

    def forward(self, inputs: list[paddle.Tensor]) -> paddle.Tensor:
        ids = inputs[:len(self.fields)]
        deep = self._field_vectors(self.embeddings, ids)               # [B, F x D]
        fields = deep
        if self.dense_weights is not None:
            dense = inputs[len(self.fields)].astype(deep.dtype)        # [B, K]
            deep = paddle.concat([deep, dense], axis=-1)
        logit = self.mlp(deep).squeeze(-1)                             # [B]
        if self.dense_weights is not None:
            logit = logit + self.dense_weights(dense).squeeze(-1)
        if self.use_fm:  # 1/2 sum_d ((sum_f v_fd)^2 - sum_f v_fd^2), the sum over fields as one product with
            # [F x D, D] (ones where a column's dimension is d): Paddle's CPU sums over the middle axis of
            # [B, F, D] (forward and backward) twice as slowly
            field_sum = paddle.tile(paddle.eye(self.embedding_dim, dtype=fields.dtype), [len(self.fields), 1])
            square_of_sum = paddle.matmul(fields, field_sum).square().sum(axis=-1)  # [B]
            sum_of_square = fields.square().sum(axis=-1)
            logit = logit + 0.5 * (square_of_sum - sum_of_square)
        if self.first_order is not None:
            logit = logit + self._field_vectors(self.first_order, ids).sum(axis=-1)
        return logit
