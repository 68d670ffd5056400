"""MemoryMonitor: bytes per table (the memory report) and cache statistics, over time, in VisualDL."""
from __future__ import annotations

from typing import Any

from ..callbacks import Callback
from ..memory import memory_report
from ..nn.base import embedding_layers


class MemoryMonitor(Callback):
    """Logs each table's estimated and held bytes (and a packed table's row error), the optimizer state
    training keeps for it (given the optimizer: the engine's), the process's resident memory, and the counters of any table that keeps them (a layer with ``statistics() -> dict[str,
    number]``, such as a cache), every ``every_n_steps`` steps."""

    def __init__(self, writer: Any, every_n_steps: int = 10) -> None:
        self.writer = writer
        self.every_n_steps = every_n_steps

    def log(self, model, step: int, optimizer: Any = None) -> None:
        report = memory_report(model, optimizer)
        for table in report.tables:
            self.writer.add_scalar(f"table_bytes/{table.name}/held", table.held_bytes, step)
            self.writer.add_scalar(f"table_bytes/{table.name}/estimated", table.estimated_bytes, step)
            if table.optimizer:
                self.writer.add_scalar(f"optimizer_state_bytes/{table.name}/held", table.optimizer_held_bytes, step)
            if table.error is not None:
                self.writer.add_scalar(f"quantization_error/{table.name}", table.error, step)
        self.writer.add_scalar("table_bytes/total/held", report.held_bytes, step)
        self.writer.add_scalar("table_bytes/total/estimated", report.estimated_bytes, step)
        if any(table.optimizer for table in report.tables):
            self.writer.add_scalar("optimizer_state_bytes/total/held", report.optimizer_held_bytes, step)
        self.writer.add_scalar("process/resident_bytes", report.process.resident_bytes, step)
        if report.process.device_reserved_bytes:
            self.writer.add_scalar("process/device_allocated_bytes", report.process.device_allocated_bytes, step)
            self.writer.add_scalar("process/device_reserved_bytes", report.process.device_reserved_bytes, step)
        for name, layer in embedding_layers(model):
            statistics = getattr(layer, "statistics", None)
            if callable(statistics):
                for key, value in statistics().items():
                    self.writer.add_scalar(f"cache/{name}/{key}", float(value), step)

    def on_train_begin(self, engine) -> None:
        self.log(engine.model, engine.global_step, engine.optimizer)

    def on_step_end(self, engine, step: int, logs: dict[str, float]) -> None:
        if step % self.every_n_steps == 0:
            self.log(engine.model, step, engine.optimizer)

    def on_train_end(self, engine, logs: dict[str, float]) -> None:
        self.log(engine.model, engine.global_step, engine.optimizer)  # after packing: the bytes served
        self.writer.flush()
