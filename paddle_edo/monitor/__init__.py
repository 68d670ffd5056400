"""VisualDL monitoring: sparse-gradient health and memory of embedding tables."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .memory import MemoryMonitor
from .sparse_grad import AlertSettings, SparseGradMonitor
from .writer import DeferredLogWriter, MonitorError, check_writable, open_log_writer


def monitors_from_config(config: dict[str, Any]) -> list:
    """The monitors a validated config asks for, sharing one LogWriter under <output_dir>/vdl."""
    section = config["monitor"]
    if not section["enable"]:
        return []
    logdir = section["logdir"] or str(Path(config["train"]["output_dir"]) / "vdl")
    writer = DeferredLogWriter(logdir)
    alerts = AlertSettings(**section["alerts"])
    monitors: list = [SparseGradMonitor(writer, section["every_n_steps"], alerts,
                                                section["histogram_every_n_steps"])]
    if section["memory"]:
        monitors.append(MemoryMonitor(writer, section["every_n_steps"]))
    return monitors


__all__ = ["AlertSettings", "DeferredLogWriter", "MemoryMonitor", "MonitorError", "check_writable", "SparseGradMonitor", "monitors_from_config",
           "open_log_writer"]
