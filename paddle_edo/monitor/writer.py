"""VisualDL LogWriters for runs: the folder is checked when the run is set up and made at the first write."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any


class MonitorError(RuntimeError):
    """The monitor cannot work (an unwritable log folder, say); raised before training starts."""


def _unwritable(logdir: Path, reason: str) -> MonitorError:
    return MonitorError(f"monitor.logdir = {str(logdir)!r} cannot be written ({reason}); choose a writable folder")


def check_writable(logdir: str | Path) -> None:
    """Refuse a folder that cannot be created or written, without creating anything."""
    logdir = Path(logdir).absolute()
    ancestor = logdir
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise _unwritable(logdir, f"{ancestor} is a file")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise _unwritable(logdir, f"no write permission on {ancestor}")


def open_log_writer(logdir: str | Path):
    """A visualdl.LogWriter on ``logdir``, after proving the folder can be written."""
    from visualdl import LogWriter

    check_writable(logdir)
    logdir = Path(logdir)
    try:
        logdir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=logdir, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise _unwritable(logdir, exc.strerror or str(exc)) from None
    return LogWriter(logdir=str(logdir))


class DeferredLogWriter:
    """Stands for a LogWriter: checks the folder now, opens the writer at the first call, so that a run
    stopped before training (bad data, say) leaves no folder behind."""

    def __init__(self, logdir: str | Path) -> None:
        check_writable(logdir)
        self.logdir = Path(logdir)
        self._writer = None

    def __getattr__(self, name: str) -> Any:
        if self._writer is None:
            self._writer = open_log_writer(self.logdir)
        return getattr(self._writer, name)
