"""Tables a collection does not fuse, trained by a TableOptimizer's rule all the same: the parts of
composite tables (hash, QR, mixed-dimension blocks, clustered tables), every table of a run whose
collections are off or whose monitors read table gradients, and low_precision tables. Each table keeps its
own lookup (and its sparse row gradient, which monitors read); after the backward pass, ``step()`` applies
the rule to the rows that gradient names, with the collection's native update (duplicate rows summed in
order, as Paddle's sparse optimizers merge them), so the same rule and state formats (row-wise, 16-bit,
8-bit) serve every table, and a table's state is the trainer's, not Paddle's optimizer's. A low_precision
table, which has no fp32 weight, hands over its decoded rows and their summed gradients, and re-encodes
what the rule makes of them; a cached table hands over the step's rows from its cache and its host store,
and puts them back where they were."""
from __future__ import annotations

from typing import Mapping

import numpy as np
import paddle

from ..errors import EdoValueError
from ..optim import TableOptimizer
from ..optim.states import TableStates
from .base import EmbeddingBase
from .cached import CachedEmbedding
from .collection import collections_of, fused_layer
from .quantized import is_low_precision
from .shards import place_of


class RowTrainer:
    """Applies ``optimizer`` to ``tables`` (name -> fp32 DenseEmbedding, a ptq / qat table's fp32 master,
    a low_precision QuantizedEmbedding or a CachedEmbedding) from their gradients: sparse ones by their
    rows, a dense one (``sparse=False``) to every row, a low_precision table's to the rows its lookups
    decoded, a cached table's to the rows of its step. Each table is told it is trained here
    (``layer.row_trainer``), for the memory report and for low_precision and cached lookups."""

    def __init__(self, optimizer: TableOptimizer, tables: Mapping[str, EmbeddingBase]) -> None:
        self.optimizer = optimizer
        self.tables = dict(tables)
        self.states = {name: TableStates(optimizer, {name: (table.num_embeddings, table.embedding_dim)},
                                         f"table {name}") for name, table in self.tables.items()}
        for name, table in self.tables.items():
            table.row_trainer = (self, name)

    def parameters(self) -> list[paddle.Tensor]:
        """The weights trained here (to leave out of Paddle's optimizer)."""
        return [table.cache if isinstance(table, CachedEmbedding) else table.weight
                for table in self.tables.values() if not is_low_precision(table)]

    def trained_tables(self) -> list[str]:
        return list(self.tables)

    def state_held_bytes(self, name: str) -> int:
        return self.states[name].held_bytes(name)

    @paddle.no_grad()
    def step(self) -> None:
        """Update each table's rows from its gradient (a table without one this step takes no step)."""
        for name, table in self.tables.items():
            if is_low_precision(table) or isinstance(table, CachedEmbedding):
                table.apply_table_rule(self.states[name])
                continue
            rows, values = _row_gradient(table.weight)
            if rows is None:
                continue
            padding = -1 if table.padding_idx is None else int(table.padding_idx)
            self.states[name].update([table.weight], [rows], [rows], values, [1], [0], [padding], int(rows.shape[0]),
                                     [place_of(table)])

    def clear_grad(self) -> None:
        for table in self.tables.values():
            if isinstance(table, CachedEmbedding):  # and its step's rows may move again
                table.cache.clear_gradient(False)
                table.end_step()
            elif not is_low_precision(table):  # its decoded rows are let go by its update
                table.weight.clear_gradient(False)

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every table's state by ``<table>.<state>``, for a checkpoint."""
        return {key: value for states in self.states.values() for key, value in states.state_dict().items()}

    def load(self, state: Mapping[str, np.ndarray], source: str = "checkpoint") -> None:
        """Restore ``state_dict()``'s values; an entry of no table here is refused by name."""
        stray = [key for key in state if key.rsplit(".", 1)[0] not in self.states]
        if stray:
            raise EdoValueError(f"{source}: table optimizer state {stray[0]!r} belongs to no table trained by rows")
        for name, states in self.states.items():
            states.load({key: value for key, value in state.items() if key.rsplit(".", 1)[0] == name}, source)


def _row_gradient(weight: paddle.Tensor) -> tuple[paddle.Tensor | None, paddle.Tensor | None]:
    """(rows [n] int64, values [n, dim] float32) of a weight's gradient: a sparse gradient's rows as it
    lists them, a dense one's every row; (None, None) without one."""
    grad = weight._grad_ivar()
    if grad is None or not grad._is_initialized():
        return None, None
    if grad.is_selected_rows():
        rows = paddle.to_tensor(np.asarray(grad.rows(), dtype=np.int64))
        return rows, grad._get_tensor_from_selected_rows()
    return paddle.arange(weight.shape[0], dtype="int64"), grad


def row_trained_tables(model: paddle.nn.Layer, own_rules: bool = False) -> dict[str, EmbeddingBase]:
    """The model's fp32 tables (DenseEmbedding, composites' parts among them, and ptq / qat tables still
    training an fp32 master) that no collection's bound optimizer trains, by sublayer name; with
    ``own_rules``, its low_precision and cached tables too (which otherwise train by train.optimizer's
    rule: their own row update, Paddle's optimizer bound to the cache)."""
    fused = {id(collection[key]) for collection in collections_of(model).values() for key in collection.trained_tables()}
    return {name: layer for name, layer in model.named_sublayers()
            if (fused_layer(layer) and id(layer) not in fused and not layer.weight.stop_gradient)
            or (own_rules and (is_low_precision(layer) or isinstance(layer, CachedEmbedding)))}


def bind_row_trainer(model: paddle.nn.Layer, optimizer: TableOptimizer, own_rules: bool = False
                     ) -> RowTrainer | None:
    """A RowTrainer for ``row_trained_tables(model, own_rules)`` (None when there are none)."""
    tables = row_trained_tables(model, own_rules)
    return RowTrainer(optimizer, tables) if tables else None

