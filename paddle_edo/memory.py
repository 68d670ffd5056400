"""Memory report: per embedding table, bytes by formula beside bytes actually held by its tensors."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import paddle

from .nn.base import EmbeddingBase, dtype_name, embedding_layers


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


@dataclass(frozen=True)
class MemoryReport:
    tables: list[TableMemory]

    @property
    def estimated_bytes(self) -> int:
        return sum(t.estimated_bytes for t in self.tables)

    @property
    def held_bytes(self) -> int:
        return sum(t.held_bytes for t in self.tables)

    @property
    def host_bytes(self) -> int:
        return sum(t.host_bytes for t in self.tables)

    def to_dict(self) -> dict:
        return {"tables": [asdict(t) for t in self.tables], "estimated_bytes": self.estimated_bytes,
                "held_bytes": self.held_bytes, "host_bytes": self.host_bytes}

    def __str__(self) -> str:
        host = self.host_bytes > 0  # a column for cached tables' host copies, when there are any
        header = ("table", "type", "rows", "dim", "dtype", "estimated", "held") + (("host",) if host else ())
        rows = [(t.name, t.kind, str(t.rows), str(t.dim), t.dtype, format_bytes(t.estimated_bytes),
                 format_bytes(t.held_bytes)) + ((format_bytes(t.host_bytes),) if host else ()) for t in self.tables]
        rows.append(("total", "", "", "", "", format_bytes(self.estimated_bytes), format_bytes(self.held_bytes))
                    + ((format_bytes(self.host_bytes),) if host else ()))
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        lines = ["  ".join(c.ljust(w) if i < 2 or i == 4 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                 for r in [header, *rows]]
        lines.insert(1, "-" * len(lines[0]))
        lines.insert(len(lines) - 1, "-" * len(lines[0]))
        lines.extend(f"{t.name}: {t.note}" for t in self.tables if t.note)
        return "\n".join(lines)


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


def memory_report(model: paddle.nn.Layer) -> MemoryReport:
    """One row per embedding table; the estimate is the layer's formula, held is what its tensors take."""
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
        tables.append(TableMemory(name or type(layer).__name__, kind, rows, dim, dtype, estimate, held_bytes(layer),
                                  host, note))
    return MemoryReport(tables)
