"""Memory report: per embedding table, bytes by formula beside bytes actually held by its tensors, the
same for the optimizer state training keeps for it, and what the process holds beside them."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass

import numpy as np
import paddle

from .nn.base import EmbeddingBase, dtype_name, embedding_layers
from .nn.collection import collections_of
from .nn.row_trainer import RowTrainer
from .errors import EdoValueError
from .runtime import gpu_available


def resident_bytes() -> int:
    """The process's resident memory now (Linux /proc; 0 where it cannot be read)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


BASELINE_RESIDENT = resident_bytes()  # at import, with Paddle loaded: the overhead before any table


@dataclass(frozen=True)
class ProcessMemory:
    """What the process holds: resident memory on the CPU (now, and at import of paddle_edo with Paddle
    loaded: the fixed overhead before any table), and on a GPU what Paddle's allocator has handed out
    and what it keeps reserved."""

    resident_bytes: int
    baseline_resident_bytes: int
    device_allocated_bytes: int = 0
    device_reserved_bytes: int = 0


def process_memory() -> ProcessMemory:
    allocated = reserved = 0
    if gpu_available():
        allocated, reserved = paddle.device.cuda.memory_allocated(), paddle.device.cuda.memory_reserved()
    return ProcessMemory(resident_bytes(), BASELINE_RESIDENT, int(allocated), int(reserved))


@dataclass(frozen=True)
class TableMemory:
    name: str
    kind: str
    rows: int
    dim: int
    dtype: str
    estimated_bytes: int
    held_bytes: int
    host_bytes: int = 0  # a cached table's full copy in host RAM or files, beside the device bytes
    note: str = ""       # e.g. why a table the config caches stayed resident
    error: float | None = None  # packed rows' mean relative L2 error against the trained fp32 rows
    optimizer: str = ""              # the rule that trains it ("adam", "rowwise_adagrad (fused)"), if any
    optimizer_estimated_bytes: int = 0  # its state for this table, by formula
    optimizer_held_bytes: int = 0       # and as held (Paddle's optimizers create theirs at the first step)
    gradient_estimated_bytes: int = 0   # a training step's row gradients, at most (GradientPeaks.bound)
    gradient_held_bytes: int = 0        # and the largest a step of this run held (GradientPeaks.observe)


@dataclass(frozen=True)
class MemoryReport:
    tables: list[TableMemory]
    process: ProcessMemory | None = None

    @property
    def estimated_bytes(self) -> int:
        return sum(t.estimated_bytes for t in self.tables)

    @property
    def held_bytes(self) -> int:
        return sum(t.held_bytes for t in self.tables)

    @property
    def host_bytes(self) -> int:
        return sum(t.host_bytes for t in self.tables)

    @property
    def optimizer_estimated_bytes(self) -> int:
        return sum(t.optimizer_estimated_bytes for t in self.tables)

    @property
    def optimizer_held_bytes(self) -> int:
        return sum(t.optimizer_held_bytes for t in self.tables)

    @property
    def gradient_estimated_bytes(self) -> int:
        return sum(t.gradient_estimated_bytes for t in self.tables)

    @property
    def gradient_held_bytes(self) -> int:
        return sum(t.gradient_held_bytes for t in self.tables)

    def to_dict(self) -> dict:
        return {"tables": [asdict(t) for t in self.tables], "estimated_bytes": self.estimated_bytes,
                "held_bytes": self.held_bytes, "host_bytes": self.host_bytes,
                "optimizer_estimated_bytes": self.optimizer_estimated_bytes,
                "optimizer_held_bytes": self.optimizer_held_bytes,
                "gradient_estimated_bytes": self.gradient_estimated_bytes,
                "gradient_held_bytes": self.gradient_held_bytes,
                "process": None if self.process is None else asdict(self.process)}

    def __str__(self) -> str:
        host = self.host_bytes > 0  # a column for cached tables' host copies, when there are any
        error = any(t.error is not None for t in self.tables)  # and for packed tables' errors
        trained = any(t.optimizer for t in self.tables)  # and for optimizer state, when an optimizer was given
        stepped = any(t.gradient_estimated_bytes for t in self.tables)  # and for row gradients, once measured
        header = (("table", "type", "rows", "dim", "dtype", "estimated", "held") + (("host",) if host else ())
                  + (("error",) if error else ()) + (("optimizer", "state estimated", "state held") if trained else ())
                  + (("gradient bound", "gradient peak") if stepped else ()))
        rows = [(t.name, t.kind, str(t.rows), str(t.dim), t.dtype, format_bytes(t.estimated_bytes),
                 format_bytes(t.held_bytes)) + ((format_bytes(t.host_bytes),) if host else ())
                + (("" if t.error is None else f"{t.error:.4f}",) if error else ())
                + ((t.optimizer, format_bytes(t.optimizer_estimated_bytes), format_bytes(t.optimizer_held_bytes))
                   if trained else ())
                + ((format_bytes(t.gradient_estimated_bytes), format_bytes(t.gradient_held_bytes)) if stepped else ())
                for t in self.tables]
        rows.append(("total", "", "", "", "", format_bytes(self.estimated_bytes), format_bytes(self.held_bytes))
                    + ((format_bytes(self.host_bytes),) if host else ()) + (("",) if error else ())
                    + (("", format_bytes(self.optimizer_estimated_bytes), format_bytes(self.optimizer_held_bytes))
                       if trained else ())
                    + ((format_bytes(self.gradient_estimated_bytes), format_bytes(self.gradient_held_bytes))
                       if stepped else ()))
        left = (0, 1, 4) + ((len(header) - 3 - 2 * stepped,) if trained else ())
        lines = text_table(header, rows, left=left)
        lines.extend(f"{t.name}: {t.note}" for t in self.tables if t.note)
        if error:
            lines.append("error: packed rows' mean relative L2 error against the trained fp32 rows")
        if self.process is not None:
            lines.append(process_line(self.process, self.held_bytes, self.optimizer_held_bytes))
        return "\n".join(lines)


def text_table(header: tuple[str, ...], rows: list[tuple[str, ...]], left: tuple[int, ...]) -> list[str]:
    """Lines of a plain-text table whose last row is a total: columns padded to their widest cell (those in
    ``left`` flush left, the others right), rules under the header and above the total."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in [header, *rows]]
    lines.insert(1, "-" * len(lines[0]))
    lines.insert(len(lines) - 1, "-" * len(lines[0]))
    return lines


def process_line(process: ProcessMemory, held: int, optimizer_held: int = 0) -> str:
    """What the process holds beside the tables (and their optimizer state), in one line."""
    beside = process.resident_bytes - process.baseline_resident_bytes - held - optimizer_held
    state = f"their optimizer state {format_bytes(optimizer_held)} + " if optimizer_held else ""
    line = (f"process: {format_bytes(process.resident_bytes)} resident = the overhead at import "
            f"{format_bytes(process.baseline_resident_bytes)} + tables {format_bytes(held)} + {state}"
            f"{format_bytes(max(beside, 0)) if beside >= 0 else '-' + format_bytes(-beside)} else")
    if process.device_reserved_bytes:
        line += (f"; GPU {format_bytes(process.device_allocated_bytes)} allocated, "
                 f"{format_bytes(process.device_reserved_bytes)} reserved")
    return line


def format_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError


def tensor_bytes(tensor: paddle.Tensor) -> int:
    return int(tensor.size) * tensor.element_size()


def held_bytes(layer: paddle.nn.Layer) -> int:
    """Bytes of every parameter and buffer under the layer, each tensor counted once."""
    seen, total = set(), 0
    for tensor in [*layer.parameters(), *layer.buffers()]:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            total += tensor_bytes(tensor)
    return total


# Paddle's optimizers by class name: (state tensors shaped like each parameter, state tensors of one value)
PADDLE_STATES = {"SGD": (0, 0), "Adagrad": (1, 0), "Momentum": (1, 0), "RMSProp": (3, 0), "Adam": (2, 2),
                 "AdamW": (2, 2), "Lamb": (2, 2)}


class GradientPeaks:
    """A training run's row gradients per table: after each backward pass, ``observe`` measures what each
    table's gradients hold (``row_gradient_bytes``) and keeps the largest; ``bound`` is what a step can hold
    at most, given the ids each table looks up per step (``lookups``: table name -> ids a batch gives it)."""

    def __init__(self, lookups: dict[str, int]) -> None:
        self.lookups = dict(lookups)
        self.peaks: dict[str, int] = {}
        self.bounds: dict[str, int] = {}  # as the tables trained (a table packed after training trains no more)
        self._parts: dict[str, list[paddle.nn.Layer]] = {}  # each table's layers, found at the first step

    def observe(self, model: paddle.nn.Layer) -> None:
        """Measure the row gradients each table holds now (called after every backward pass: the tables,
        their parts and bounds are found once, at the first call)."""
        if not self._parts:
            for name, layer in embedding_layers(model):
                self._parts[name] = layer.sublayers(include_self=True)
                self.bounds[name] = self.bound(name, layer)
        fused = fused_gradient_rows(model)
        for name, parts in self._parts.items():
            self.peaks[name] = max(self.peaks.get(name, 0), row_gradient_bytes(parts, fused))

    def table(self, name: str, layer: paddle.nn.Layer) -> tuple[int, int]:
        """(bound, peak) of a table: as it trained, or, before a step, the bound of the layer as it is."""
        return self.bounds.get(name, self.bound(name, layer)), self.peaks.get(name, 0)

    def bound(self, name: str, layer: paddle.nn.Layer) -> int:
        """Row-gradient bytes a step can hold for table ``name``: each sparse table weight at most one row
        per lookup (a hash table's ``num_hashes`` per id), capped at its rows; other trained parameters
        (projections, a table trained with dense gradients) whole."""
        lookups = self.lookups.get(name, 0)
        total = 0
        for part in layer.sublayers(include_self=True):
            for parameter in part.parameters(include_sublayers=False):
                if parameter.stop_gradient:
                    continue
                if getattr(part, "sparse", False) and parameter is getattr(part, "weight", None):
                    rows, width = parameter.shape
                    total += min(lookups * getattr(layer, "num_hashes", 1), rows) * (width * 4 + 8)
                else:
                    total += int(parameter.size) * parameter.element_size()
        return total


def fused_gradient_rows(model: paddle.nn.Layer) -> dict[int, tuple[int, int]]:
    """id(table) -> (rows, dim) of the rows each fused table's last backward summed in its collection."""
    return {id(collection[key]): (rows, collection[key].embedding_dim)
            for collection in collections_of(model).values() for key, rows in collection.last_gradient_rows.items()}


def row_gradient_bytes(parts: list[paddle.nn.Layer], fused: dict[int, tuple[int, int]] | None = None) -> int:
    """Bytes of the gradients a table's parameters (those of ``parts``: the table's layer and its sublayers)
    hold now (after a backward pass, before the step): a sparse gradient's rows as fp32 values and int64
    row numbers, a dense one whole; a table a collection trains holds none, and its backward summed
    ``fused`` rows the same way (values and ids)."""
    total = 0
    fused = fused or {}
    for part in parts:
        if id(part) in fused:
            rows, dim = fused[id(part)]
            total += rows * (dim * 4 + 8)
            continue
        for parameter in part.parameters(include_sublayers=False):
            grad = parameter._grad_ivar()
            if grad is None or not grad._is_initialized():
                continue
            if grad.is_selected_rows():
                values = grad._get_tensor_from_selected_rows()
                total += int(values.shape[0]) * (int(np.prod(values.shape[1:])) * values.element_size() + 8)
            else:
                total += int(grad.size) * grad.element_size()
    return total


def memory_report(model: paddle.nn.Layer, optimizer: paddle.optimizer.Optimizer | None = None,
                  gradients: GradientPeaks | None = None) -> MemoryReport:
    """One row per embedding table (the estimate is the layer's formula, held is what its tensors take,
    error a packed table's), and what the process holds now. The optimizer state training keeps for each
    table (estimated by the rule's formula, held as its tensors are) is counted for the rule a model's
    collections fuse or a RowTrainer applies (``TableOptimizer``) and for ``optimizer``, Paddle's optimizer of the other
    parameters (its state appears at its first step: held 0 before). A low_precision table's row state under
    train.optimizer's row rule is a buffer of the table, counted in its own bytes (under a table rule, its
    RowTrainer's state, counted as the others'); a cached table's rows keep theirs in the host store
    (its host bytes), its device cache's in ``optimizer``. With ``gradients`` (a training run's
    GradientPeaks), each table's row gradients too: at most by formula, and the largest a step held. An
    optimizer class outside PADDLE_STATES is refused (EdoValueError names it)."""
    if optimizer is not None and type(optimizer).__name__ not in PADDLE_STATES:
        raise EdoValueError(f"memory_report: optimizer {type(optimizer).__name__} has no state formula; known: "
                            f"{', '.join(PADDLE_STATES)}")
    fused = {id(collection[key]): (collection, key) for collection in collections_of(model).values()
             for key in collection.trained_tables()}  # (a table packed after training keeps its state there)
    fused.update({id(layer): layer.row_trainer for layer in model.sublayers(include_self=True)
                  if getattr(layer, "row_trainer", None) is not None})  # tables trained from their own gradients
    tables = []
    for name, layer in embedding_layers(model):
        if isinstance(layer, EmbeddingBase):
            kind, rows, dim = layer.registry_name or type(layer).__name__, layer.num_embeddings, layer.embedding_dim
            dtype, estimate = layer.storage_dtype, layer.estimated_bytes()
        else:
            rows, dim = layer.weight.shape
            kind, dtype = "paddle.nn.Embedding", dtype_name(layer.weight.dtype)
            estimate = rows * dim * layer.weight.element_size()
        host = layer.host_bytes() if callable(getattr(layer, "host_bytes", None)) else 0
        note = layer.report_note if isinstance(layer, EmbeddingBase) else ""
        error = layer.packing_error if isinstance(layer, EmbeddingBase) else None
        rule, state_estimate, state_held = _optimizer_state(layer, fused, optimizer)
        gradient_bound, gradient_peak = gradients.table(name, layer) if gradients is not None else (0, 0)
        tables.append(TableMemory(name or type(layer).__name__, kind, rows, dim, dtype, estimate, held_bytes(layer),
                                  host, note, error, rule, state_estimate, state_held, gradient_bound, gradient_peak))
    return MemoryReport(tables, process_memory())


def _optimizer_state(layer: paddle.nn.Layer, fused: dict, optimizer: paddle.optimizer.Optimizer | None
                     ) -> tuple[str, int, int]:
    """(rule, estimated bytes, held bytes) of the optimizer state kept for a table's parameters."""
    rules, estimate, held = [], 0, 0
    for part in layer.sublayers(include_self=True):  # a composite's parts may be a collection's tables
        if id(part) in fused:
            trainer, key = fused[id(part)]  # a collection (its backward), or a RowTrainer (its tables' gradients)
            rules.append(f"{trainer.optimizer.name} ({'by rows' if isinstance(trainer, RowTrainer) else 'fused'})")
            estimate += trainer.optimizer.state_bytes(part.num_embeddings, part.embedding_dim)
            held += trainer.state_held_bytes(key)
    for parameter in layer.parameters():
        if optimizer is not None and not parameter.stop_gradient and _trains(optimizer, parameter):
            per_value, single = PADDLE_STATES[type(optimizer).__name__]
            rules.append(type(optimizer).__name__.lower())
            estimate += (per_value * int(parameter.size) + single) * parameter.element_size()
            held += sum(tensor_bytes(states[parameter.name]) for states in optimizer._accumulators.values()
                        if parameter.name in states)
    return " + ".join(dict.fromkeys(rules)), estimate, held


def _trains(optimizer: paddle.optimizer.Optimizer, parameter: paddle.Tensor) -> bool:
    """Whether ``optimizer`` was given ``parameter`` (alone or in a parameter group)."""
    for entry in optimizer._parameter_list or []:
        group = entry["params"] if isinstance(entry, dict) else [entry]
        if any(p is parameter for p in group):
            return True
    return False
