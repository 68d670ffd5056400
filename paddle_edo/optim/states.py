"""A TableOptimizer's state for tables by name: each table's two state tensors (as the rule and its
state_dtype shape them), Adam's beta powers and the steps that compressed states' rounding draws on; its
checkpoint round trip; and the native update that applies the rule to the rows a batch touched."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import paddle

from ..errors import EdoValueError
from ..kernels import fused_ops
from .rules import TableOptimizer


class TableStates:
    """State for ``shapes`` (table name -> (rows, dim)) under ``optimizer``, starting at zero (Adam's step
    counts at one). ``owner`` names its holder in errors (a collection, a table)."""

    def __init__(self, optimizer: TableOptimizer, shapes: Mapping[str, tuple[int, int]], owner: str) -> None:
        self.optimizer, self.owner = optimizer, owner
        self.shapes = dict(shapes)
        self.states: dict[str, tuple[paddle.Tensor, paddle.Tensor]] = {}
        for key, (rows, dim) in shapes.items():
            first, second = optimizer.state_shapes(rows, dim)
            self.states[key] = (paddle.zeros(first, dtype=optimizer.stored_dtype),
                                paddle.zeros(second, dtype=optimizer.stored_dtype))
        pows = np.array([[optimizer.beta1, optimizer.beta2]] * len(self.states), dtype=np.float32).reshape([-1, 2])
        self.beta_pows = paddle.to_tensor(pows)
        self.steps = paddle.zeros([len(self.states)], dtype="int64")

    def keys(self) -> list[str]:
        return list(self.states)

    def held_bytes(self, key: str) -> int:
        """Bytes of table ``key``'s state as held: its tensors, its two step counts for Adam's rules and the
        step count of compressed states' rounding."""
        first, second = self.states[key]
        counts = (8 if self.optimizer.counts_steps else 0) + (8 if self.optimizer.rounds_stochastically else 0)
        return int(first.size) * first.element_size() + int(second.size) * second.element_size() + counts

    def state_dict(self) -> dict[str, np.ndarray]:
        """The state by ``<table>.<state>`` (``state1``, ``state2``, ``beta_pows`` for Adam's rules,
        ``steps`` for compressed states), for a checkpoint."""
        state = {}
        for index, (key, (first, second)) in enumerate(self.states.items()):
            for label, tensor in (("state1", first), ("state2", second)):
                if tensor.size:
                    state[f"{key}.{label}"] = tensor.numpy().copy()
            if self.optimizer.counts_steps:
                state[f"{key}.beta_pows"] = self.beta_pows[index].numpy().copy()
            if self.optimizer.rounds_stochastically:
                state[f"{key}.steps"] = self.steps[index].numpy().copy()
        return state

    def load(self, state: Mapping[str, np.ndarray], source: str = "checkpoint") -> None:
        """Restore ``state_dict()``'s values exactly; a missing, stray or misshapen entry is refused by name."""
        expected = self.state_dict()
        if set(state) != set(expected):
            differing = sorted(set(expected) ^ set(state))
            raise EdoValueError(f"{source}: the table optimizer state does not match {self.owner}'s "
                                f"({self.optimizer.name}): {differing[0]!r} differs")
        pows, steps = self.beta_pows.numpy(), self.steps.numpy()
        for index, (key, (first, second)) in enumerate(self.states.items()):
            for label, tensor in (("state1", first), ("state2", second)):
                name = f"{key}.{label}"
                if name in state:
                    value = np.asarray(state[name])
                    if value.dtype != tensor.numpy().dtype:
                        raise EdoValueError(f"{source}: table optimizer state {name} is {value.dtype}, expected "
                                            f"{tensor.numpy().dtype} (state_dtype {self.optimizer.state_dtype!r})")
                    if list(value.shape) != list(tensor.shape):
                        raise EdoValueError(f"{source}: table optimizer state {name} has shape {list(value.shape)}, "
                                            f"expected {list(tensor.shape)}")
                    paddle.assign(paddle.to_tensor(value), tensor)
            if f"{key}.beta_pows" in state:
                pows[index] = np.asarray(state[f"{key}.beta_pows"], dtype=np.float32)
            if f"{key}.steps" in state:
                steps[index] = np.asarray(state[f"{key}.steps"], dtype=np.int64)
        if len(self.states):
            paddle.assign(paddle.to_tensor(pows), self.beta_pows)
            paddle.assign(paddle.to_tensor(steps), self.steps)

    def update(self, weights: Sequence[paddle.Tensor], ids: Sequence[paddle.Tensor], bounds: Sequence[paddle.Tensor],
               grad: paddle.Tensor, lengths: Sequence[int], modes: Sequence[int], paddings: Sequence[int],
               batch: int, places: Sequence[tuple[int, int]] | None = None) -> paddle.Tensor:
        """Apply the rule to every table (in ``keys()`` order) on the rows its ids touched, given the
        gradient of the lookup's [batch, width] output (collection.cc: CollectionUpdate); returns the
        distinct rows updated per table. ``places``: per table, (first, stride) such that its row r is row
        first + r * stride of the whole table (a rank's share), whose place keys compressed states'
        rounding; (0, 1) for each by default."""
        optimizer, count = self.optimizer, len(self.states)
        places = [(0, 1)] * count if places is None else list(places)
        return fused_ops().edo_collection_update(
            list(weights), [s[0] for s in self.states.values()], [s[1] for s in self.states.values()], list(ids),
            list(bounds), grad if grad.dtype == paddle.float32 else grad.astype("float32"), self.beta_pows,
            self.steps, list(lengths), list(modes), list(paddings), batch,
            [optimizer.rule] * count, [float(optimizer.learning_rate)] * count, [float(optimizer.epsilon)] * count,
            [float(optimizer.beta1)] * count, [float(optimizer.beta2)] * count, [float(optimizer.weight_decay)] * count,
            [optimizer.state_format] * count, [first for first, _ in places], [stride for _, stride in places])

    def update_rows(self, rows: paddle.Tensor, ids: paddle.Tensor, grad: paddle.Tensor, padding: int = -1,
                    place: tuple[int, int] = (0, 1)) -> None:
        """Apply the rule to rows held outside a weight tensor (a low_precision table's, decoded), for a state
        of one table: ``rows`` (float32 [n, dim], updated in place) are its rows ``ids`` (int64 [n], increasing),
        ``grad`` their summed gradients; the padding row is left alone (collection.cc: RowsUpdate). ``place``:
        (first, stride), row r being row first + r * stride of the whole table (see ``update``)."""
        if len(self.states) != 1:
            raise EdoValueError(f"{self.owner}: update_rows serves the state of one table, not {len(self.states)}")
        optimizer = self.optimizer
        (first, second), ((table_rows, _),) = next(iter(self.states.values())), self.shapes.values()
        fused_ops().edo_rows_update(rows, grad, ids, first, second, self.beta_pows, self.steps, table_rows, padding,
                                    optimizer.rule, float(optimizer.learning_rate), float(optimizer.epsilon),
                                    float(optimizer.beta1), float(optimizer.beta2), float(optimizer.weight_decay),
                                    optimizer.state_format, *place)
