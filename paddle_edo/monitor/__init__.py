"""VisualDL monitoring: sparse-gradient health and memory of embedding tables."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..runtime import available_cores
from .memory import MemoryMonitor
from .alerts import AlertSettings
from .sparse_grad import SparseGradMonitor
from .writer import BufferedLogWriter, DeferredLogWriter, MonitorError, check_writable, open_log_writer


def monitors_from_config(config: dict[str, Any], run: str | None = None, memory: bool = True) -> list:
    """The monitors a validated config asks for, sharing one LogWriter under <output_dir>/vdl (or its
    ``run`` subfolder: one per parameter-server trainer). ``memory=False`` leaves out the MemoryMonitor
    (a PS trainer holds no table rows)."""
    section = config["monitor"]
    if not section["enable"]:
        return []
    logdir = Path(section["logdir"] or Path(config["train"]["output_dir"]) / "vdl")
    writer = DeferredLogWriter(logdir / run if run else logdir)
    alerts = AlertSettings(**section["alerts"])
    background = section["background"]
    if background is None:  # a worker thread pays off beside a free core; where Paddle's threads take every
        # core it slows the loop (measured on 2 cores: docs/benchmarks.md)
        background = available_cores() > config["train"]["num_threads"]
    monitors: list = [SparseGradMonitor(writer, section["every_n_steps"], alerts, section["histogram_every_n_steps"],
                                        background=background)]
    if section["memory"] and memory:
        monitors.append(MemoryMonitor(writer, section["memory_every_n_steps"]))
    return monitors


__all__ = ["AlertSettings", "BufferedLogWriter", "DeferredLogWriter", "MemoryMonitor", "MonitorError", "check_writable",
           "SparseGradMonitor", "monitors_from_config", "open_log_writer"]
