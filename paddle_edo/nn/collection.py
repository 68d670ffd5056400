"""EmbeddingCollection: all of a model's tables looked up in one call, and trained in one backward op.

Each table stays a layer of its own, under its own name (``embeddings.C1``: what the memory report,
planner, monitor, export and serving walk), with its own parameters. What the collection adds is the
batched path: its fp32 ``DenseEmbedding`` tables and its ptq / qat tables before ``pack()`` (fp32 output;
a QAT table's rows fake-quantized in the kernel, each distinct row of a batch once)
are read by one native forward kernel into one ``[batch, width]`` output, and, once a ``TableOptimizer`` is bound (``bind_optimizer``), trained by one
backward kernel that sums each distinct row's gradients and applies the optimizer to those rows in
place, as FBGEMM's table-batched embeddings do: no gradient tensor, no per-table ops, no entry of these
tables in Paddle's optimizer. The optimizer state lives in the collection (``optimizer_state``).

The other tables (packed, low-precision, hashed, QR, mixed-dim, cached, clustered, on parameter servers)
join through their own lookups and train as they do alone; so do all tables where the kernels do not run:
on an accelerator, in a static program (``full_graph`` to_static, ``jit.save``: a composite program of
the same results), without the extension.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

import numpy as np
import paddle

from ..compat import dynamic_graph_under_sot
from ..errors import EdoIndexError, EdoKeyError, EdoRuntimeError, EdoTypeError, EdoValueError
from ..kernels import fused_ops
from ..optim import TableOptimizer
from ..optim.states import TableStates
from .bag import pooled_lookup
from .base import EmbeddingBase, int64_ids
from .dense import DenseEmbedding
from .quantized import FORMAT_NUMBERS, QuantizedEmbedding

POOLINGS = ("none", "sum", "mean")


class EmbeddingCollection(paddle.nn.Layer):
    """Tables by name, looked up together: ``forward(ids)`` takes one id tensor per table, in the order of
    ``tables`` (or a dict by name), and gives one tensor ``[batch, width]`` (``concat=True``: the tables'
    vectors side by side in that order) or a list of each table's vectors.

    A table's ids are ``[batch]`` (one vector each), ``[batch, L]`` (with pooling ``"none"``: L vectors,
    ``[batch, L, D]``; ``"sum"`` / ``"mean"``: one bag per example, ids equal to the table's padding_idx
    skipped) or flat ``[N]`` with ``offsets`` ``[batch]`` (bag starts, pooled). Every table is a paddle_edo
    table; ``pooling`` is one mode for all or one per table name.

    ``tables_of``: a layer that holds the tables as its own sublayers, under the same names (a composite
    table's parts: ``CharWordEmbedding``'s ``words`` and ``chars``); the collection then only looks them up and
    trains them, and layers swapped into that layer are the ones it looks up. By default the collection holds
    them.

    Errors: EdoKeyError for a dict of ids that misses a table, EdoValueError for a wrong count of id tensors
    or batch sizes that differ, EdoTypeError for float ids, EdoIndexError naming the table and the id for
    ids out of range.
    """

    def __init__(self, tables: Mapping[str, EmbeddingBase], pooling: str | Mapping[str, str] = "none", *,
                 tables_of: paddle.nn.Layer | None = None, name: str | None = None) -> None:
        super().__init__(name_scope=name)
        object.__setattr__(self, "_holder", tables_of)  # not a sublayer: the holder is this collection's parent
        label = type(self).__name__
        if not tables:
            raise EdoValueError(f"{label}: tables is empty; give at least one table by name")
        for key, table in tables.items():
            if not isinstance(table, EmbeddingBase):
                raise EdoTypeError(f"{label}: table {key!r} is a {type(table).__name__}; tables must be paddle_edo "
                                   f"tables (paddle_edo.nn)")
            if tables_of is None:
                self.add_sublayer(key, table)
            elif tables_of._sub_layers.get(key) is not table:
                raise EdoValueError(f"{label}: table {key!r} is not the sublayer {key!r} of tables_of "
                                    f"({type(tables_of).__name__})")
        self.names = list(tables)
        modes = {key: pooling for key in self.names} if isinstance(pooling, str) else dict(pooling)
        unknown = sorted(set(modes) - set(self.names))
        if unknown:
            raise EdoKeyError(f"{label}: pooling names table {unknown[0]!r}, which is not among its tables")
        for key in self.names:
            modes.setdefault(key, "none")
            if modes[key] not in POOLINGS:
                raise EdoValueError(f"{label}: pooling of table {key!r} = {modes[key]!r}; expected one of "
                                    f"{', '.join(map(repr, POOLINGS))}")
        self.pooling = modes
        # each table's padding id, kept as built: a layer swapped in later (an export's paddle.nn.Embedding)
        # pools and skips the same ids
        self.padding = {key: table.padding_idx for key, table in tables.items()}
        self.optimizer: TableOptimizer | None = None
        self._states: TableStates | None = None
        self.last_gradient_rows: dict[str, int] = {}  # distinct rows each fused table's last backward summed

    # ------------------------------------------------------------- tables
    def __getitem__(self, key: str) -> EmbeddingBase:
        return (self._sub_layers if self._holder is None else self._holder._sub_layers)[key]

    def __len__(self) -> int:
        return len(self.names)

    def keys(self) -> list[str]:
        return list(self.names)

    def values(self) -> list[EmbeddingBase]:
        return [self[key] for key in self.names]

    def items(self) -> list[tuple[str, EmbeddingBase]]:
        return [(key, self[key]) for key in self.names]

    def tables(self) -> dict[str, EmbeddingBase]:
        """The tables by name, in order."""
        return dict(self.items())

    def fused_tables(self) -> list[str]:
        """Names of the tables the batched kernels serve: fp32 DenseEmbedding tables, and QAT tables with
        an fp32 master and fp32 output."""
        return [key for key, table in self.tables().items() if fused_layer(table)]

    # ---------------------------------------------------------- optimizer
    def bind_optimizer(self, optimizer: TableOptimizer) -> list[str]:
        """Train the fused tables with ``optimizer`` in the backward pass (its state starts at zero; Adam's
        step counts at one); returns their names. Their weights must then stay out of Paddle's optimizer
        (``fused_parameters``)."""
        if not isinstance(optimizer, TableOptimizer):
            raise EdoTypeError(f"{type(self).__name__}.bind_optimizer takes a TableOptimizer, got "
                               f"{type(optimizer).__name__}")
        self.optimizer = optimizer
        self._states = TableStates(optimizer, {key: tuple(self[key].weight.shape) for key in self.fused_tables()},
                                   f"collection {self.full_name()}")
        return self._states.keys()

    def trained_tables(self) -> list[str]:
        """Names of the tables the bound optimizer trains (none before ``bind_optimizer``)."""
        return self._states.keys() if self._states is not None else []

    def state_held_bytes(self, key: str) -> int:
        """Bytes of table ``key``'s optimizer state as held (TableStates.held_bytes)."""
        return self._states.held_bytes(key)

    def fused_parameters(self) -> list[paddle.Tensor]:
        """The parameters the bound optimizer trains (none before ``bind_optimizer``)."""
        return [self[key].weight for key in self.trained_tables()]

    def optimizer_state(self) -> dict[str, np.ndarray]:
        """The bound optimizer's state by ``<table>.<state>`` (``state1``, ``state2``, ``beta_pows``, and
        ``steps`` for compressed states), for a checkpoint; empty when none is bound."""
        return self._states.state_dict() if self._states is not None else {}

    def set_optimizer_state(self, state: Mapping[str, np.ndarray], owner: str = "checkpoint") -> None:
        """Restore ``optimizer_state()``'s values exactly; a missing or misshapen entry is refused by name."""
        if self._states is None:
            if state:
                raise EdoValueError(f"{owner}: the table optimizer state does not match this collection's "
                                    f"(none bound): {sorted(state)[0]!r} differs")
            return
        self._states.load(state, owner)

    # ------------------------------------------------------------ lookups
    @dynamic_graph_under_sot
    def forward(self, ids: Sequence[paddle.Tensor] | Mapping[str, paddle.Tensor],
                offsets: Sequence[paddle.Tensor | None] | Mapping[str, paddle.Tensor] | None = None,
                concat: bool = True) -> paddle.Tensor | list[paddle.Tensor]:
        """Vectors of every table's ids: ``[batch, width]`` with ``concat``, else one tensor per table.
        A collection that trains with a bound TableOptimizer refuses a static program in training mode
        (``to_static(full_graph=True)``): its fused backward runs in dynamic graph only (SOT, the default
        mode, keeps it), and its tables are out of Paddle's optimizer, so they would silently not train."""
        if self.training and self.trained_tables() and not paddle.in_dynamic_mode():
            raise EdoRuntimeError(f"{type(self).__name__} {self.full_name()}: its tables train with the bound "
                                  f"TableOptimizer ({self.optimizer.name}) in dynamic graph; in this static program "
                                  f"they would not train. Use paddle.jit.to_static's default mode (SOT), or call "
                                  f".eval() for a program that only looks rows up")
        ids = self._by_table(ids, "ids")
        offsets = self._by_table(offsets, "offsets") if offsets is not None else [None] * len(self.names)
        batch = self._batch_size(ids, offsets)
        outputs: list[paddle.Tensor | None] = [None] * len(self.names)
        fused, weights = self._served_by_kernels(ids)
        if fused and batch != 0:
            flat = self._fused_lookup([self.names[i] for i in fused], weights, [ids[i] for i in fused],
                                      [offsets[i] for i in fused], batch)
            if concat and len(fused) == len(self.names):
                return flat
            widths = [self._width(i, ids[i], offsets[i]) for i in fused]
            parts = paddle.split(flat, widths, axis=1) if len(fused) > 1 else [flat]
            for i, part in zip(fused, parts):
                outputs[i] = part
        for i, key in enumerate(self.names):
            if outputs[i] is None:
                width = self._width(i, ids[i], offsets[i])
                outputs[i] = self._table_lookup(key, ids[i], offsets[i]).reshape([batch if batch >= 0 else -1, width])
        if concat:
            if batch == 0:  # Paddle's concat drops empty tensors, and refuses to join none
                return paddle.zeros([0, sum(out.shape[1] for out in outputs)], dtype="float32")
            return outputs[0] if len(outputs) == 1 else paddle.concat(outputs, axis=1)
        return [out.reshape(self._shape(i, ids[i], offsets[i], batch)) for i, out in enumerate(outputs)]

    def _by_table(self, values: Any, what: str) -> list[Any]:
        label = type(self).__name__
        if isinstance(values, Mapping):
            missing = [key for key in self.names if key not in values and what == "ids"]
            if missing:
                raise EdoKeyError(f"{label}: {what} for table {missing[0]!r} missing; tables: {', '.join(self.names)}")
            unknown = sorted(set(values) - set(self.names))
            if unknown:
                raise EdoKeyError(f"{label}: {what} for {unknown[0]!r}, which is not among its tables")
            return [values.get(key) for key in self.names]
        values = list(values)
        if len(values) != len(self.names):
            raise EdoValueError(f"{label}: {len(values)} {what} tensors for {len(self.names)} tables "
                                f"({', '.join(self.names)})")
        return values

    @paddle.jit.not_to_static  # plain Python on static shapes (-1 where open)
    def _batch_size(self, ids: list[paddle.Tensor], offsets: list[paddle.Tensor | None]) -> int:
        """The examples in the batch, the same for every table (refused otherwise, naming the table)."""
        sizes = []
        for key, table_ids, table_offsets in zip(self.names, ids, offsets):
            if isinstance(self[key], EmbeddingBase):  # (a planner's trial may swap in a paddle.nn.Embedding)
                self[key].check_id_dtype(table_ids)
            if table_offsets is not None and self.pooling[key] == "none":
                raise EdoValueError(f"{type(self).__name__}: table {key!r} has offsets but pooling 'none'; bags "
                                    f"given by offsets are pooled ('sum' or 'mean')")
            if table_offsets is None and self.pooling[key] != "none" and len(table_ids.shape) != 2:
                raise EdoValueError(f"{type(self).__name__}: table {key!r} pools; its ids must be [batch, L], or flat "
                                    f"with offsets, got shape {list(table_ids.shape)}")
            sizes.append(table_offsets.shape[0] if table_offsets is not None else table_ids.shape[0])
        first = sizes[0]
        for key, size in zip(self.names, sizes):
            if size != first and size >= 0 and first >= 0:
                raise EdoValueError(f"{type(self).__name__}: table {key!r} has a batch of {size}, table "
                                    f"{self.names[0]!r} one of {first}; every table takes the same examples")
        return first

    @paddle.jit.not_to_static  # plain Python on static shapes (-1 where open)
    def _dim(self, index: int) -> int:
        table = self[self.names[index]]
        return table.embedding_dim if isinstance(table, EmbeddingBase) else table.weight.shape[1]

    @paddle.jit.not_to_static
    def _width(self, index: int, ids: paddle.Tensor, offsets: paddle.Tensor | None) -> int:
        dim = self._dim(index)
        if self.pooling[self.names[index]] != "none":
            return dim
        return dim * int(np.prod(ids.shape[1:])) if len(ids.shape) > 1 else dim

    @paddle.jit.not_to_static  # plain Python on static shapes (-1 where open)
    def _shape(self, index: int, ids: paddle.Tensor, offsets: paddle.Tensor | None, batch: int) -> list[int]:
        dim = self._dim(index)
        if self.pooling[self.names[index]] != "none":
            return [batch, dim]
        return [batch, *ids.shape[1:], dim]

    def _table_lookup(self, key: str, ids: paddle.Tensor, offsets: paddle.Tensor | None) -> paddle.Tensor:
        """One table through its own layer: a lookup, or its rows pooled by bag."""
        table = self[key]
        if self.pooling[key] == "none":
            return table(ids)
        return pooled_lookup(table, ids, offsets, mode=self.pooling[key], padding_idx=self.padding[key],
                             owner=f"{self.full_name()} table '{key}'")

    @paddle.jit.not_to_static
    def _served_by_kernels(self, ids: list[paddle.Tensor]) -> tuple[list[int], list[paddle.Tensor]]:
        """The indices of the tables the batched kernels serve now, and their weights (each weight read once:
        reaching a layer's parameter costs a microsecond, a table): the fused tables, in dynamic graph on the
        CPU with the extension at hand; in training only with a bound optimizer (else the tables' own lookups
        give Paddle its gradients)."""
        if not paddle.in_dynamic_mode() or fused_ops() is None:
            return [], []
        tables = [self[key] for key in self.names]
        fused = [i for i, table in enumerate(tables) if fused_layer(table)]
        weights = [tables[i].weight for i in fused]
        if not fused or not all(t.place.is_cpu_place() for t in ids + weights):
            return [], []
        if paddle.is_grad_enabled() and not all(w.stop_gradient for w in weights):
            if self.optimizer is None or {self.names[i] for i in fused} != set(self.trained_tables()):
                return [], []
        return fused, weights

    def _fused_lookup(self, keys: list[str], weights: list[paddle.Tensor], ids: list[paddle.Tensor],
                      offsets: list[paddle.Tensor | None], batch: int) -> paddle.Tensor:
        plan = _Plan(self, keys, weights, ids, offsets, batch)
        with _ids_named(self, keys):
            if not paddle.is_grad_enabled() or all(w.stop_gradient for w in weights):
                return plan.lookup()
            anchor = paddle.zeros([1], dtype="float32")
            anchor.stop_gradient = False
            return _FusedTraining.apply(anchor, plan)


class _Plan:
    """One batched call's arguments: the fused tables' weights, flat ids, bag bounds and modes."""

    def __init__(self, collection: EmbeddingCollection, keys: list[str], weights: list[paddle.Tensor],
                 ids: list[paddle.Tensor], offsets: list[paddle.Tensor | None], batch: int) -> None:
        self.collection = collection
        self.keys = keys
        self.batch = int(batch)
        self.weights = weights
        self.ids, self.bounds, self.lengths, self.modes, self.paddings = [], [], [], [], []
        for key, table_ids, table_offsets in zip(keys, ids, offsets):
            flat = int64_ids(table_ids)
            flat = flat if len(flat.shape) == 1 else flat.reshape([-1])
            self.ids.append(flat)
            if table_offsets is None:
                self.lengths.append(int(np.prod(table_ids.shape[1:])) if len(table_ids.shape) > 1 else 1)
                self.bounds.append(flat)  # unread
            else:
                self.lengths.append(0)
                self.bounds.append(paddle.concat([int64_ids(table_offsets), paddle.to_tensor([flat.shape[0]],
                                                                                              dtype="int64")]))
            self.modes.append(POOLINGS.index(collection.pooling[key]))
            padding = collection.padding[key]
            self.paddings.append(-1 if padding is None else int(padding))
        tables = [collection[key] for key in keys]
        qat = [isinstance(t, QuantizedEmbedding) and t.mode == "qat" for t in tables]
        self.fake_formats = [FORMAT_NUMBERS[t.format.name] if q else -1 for t, q in zip(tables, qat)]
        self.range_iterations = [t.range_iterations if q else 0 for t, q in zip(tables, qat)]

    def lookup(self) -> paddle.Tensor:
        with paddle.no_grad():
            return fused_ops().edo_collection_lookup(self.weights, self.ids, self.bounds, self.lengths, self.modes,
                                                     self.paddings, self.batch, self.fake_formats,
                                                     self.range_iterations)

    def update(self, grad: paddle.Tensor) -> paddle.Tensor:
        # every fused table, in the states' order (_served_by_kernels)
        return self.collection._states.update(self.weights, self.ids, self.bounds, grad, self.lengths, self.modes,
                                              self.paddings, self.batch)


class _FusedTraining(paddle.autograd.PyLayer):
    """The batched lookup whose backward applies the bound optimizer to the touched rows. The tables'
    weights are not inputs of the graph (Paddle would want a gradient for each): a leaf ``anchor`` that
    wants a gradient makes Paddle call this backward."""

    @staticmethod
    def forward(ctx, anchor: paddle.Tensor, plan: _Plan) -> paddle.Tensor:
        ctx.plan = plan
        return plan.lookup()

    @staticmethod
    def backward(ctx, grad: paddle.Tensor) -> paddle.Tensor:
        with paddle.no_grad():
            rows = ctx.plan.update(grad).numpy()
        ctx.plan.collection.last_gradient_rows = dict(zip(ctx.plan.keys, rows.tolist()))
        return paddle.zeros([1], dtype="float32")


class _ids_named:
    """The kernels' refusal of an id ("table t: id X is outside [0, R)") as an EdoIndexError naming the
    collection's table."""

    def __init__(self, collection: EmbeddingCollection, keys: list[str]) -> None:
        self.collection, self.keys = collection, keys

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, traceback) -> bool:
        if error is None:
            return False
        found = re.search(r"table (\d+): id (-?\d+) is outside \[0, (\d+)\)", str(error))
        if found is None:
            return False
        key = self.keys[int(found.group(1))]
        raise EdoIndexError(f"{self.collection.full_name()} table '{key}': id {found.group(2)} is out of range "
                            f"[0, {found.group(3)})") from None


def fused_layer(table: paddle.nn.Layer) -> bool:
    """Whether the batched kernels serve ``table``: an fp32 DenseEmbedding, or a ptq / qat table still
    training its fp32 master with fp32 output (a QAT table's gradient passes straight through to the master,
    as a dense one's)."""
    if type(table) is DenseEmbedding:
        return True
    return (type(table) is QuantizedEmbedding and table.mode in ("ptq", "qat") and not table.packed
            and table.output_dtype == "float32")


def collections_of(model: paddle.nn.Layer) -> dict[str, EmbeddingCollection]:
    """The model's collections by sublayer name."""
    return {name: layer for name, layer in model.named_sublayers(include_self=True)
            if isinstance(layer, EmbeddingCollection)}


def bind_table_optimizer(model: paddle.nn.Layer, optimizer: TableOptimizer) -> list[paddle.Tensor]:
    """Bind ``optimizer`` to every collection of ``model``; returns the parameters it now trains (to leave
    out of Paddle's optimizer)."""
    trained = []
    for collection in collections_of(model).values():
        collection.bind_optimizer(optimizer)
        trained.extend(collection.fused_parameters())
    return trained


def table_optimizer_state(model: paddle.nn.Layer) -> dict[str, np.ndarray]:
    """Every collection's optimizer state, keyed ``<collection>.<table>.<state>``."""
    return {f"{name}.{key}": value for name, collection in collections_of(model).items()
            for key, value in collection.optimizer_state().items()}


def load_table_optimizer_state(model: paddle.nn.Layer, state: Mapping[str, np.ndarray], owner: str) -> None:
    """Restore ``table_optimizer_state``'s values into the model's collections."""
    found = collections_of(model)
    for name, collection in found.items():
        prefix = f"{name}."
        collection.set_optimizer_state({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}, owner)
    stray = [k for k in state if not any(k.startswith(f"{name}.") for name in found)]
    if stray:
        raise EdoValueError(f"{owner}: table optimizer state {stray[0]!r} belongs to no collection of this model")
