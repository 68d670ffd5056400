"""VisualDL LogWriters for runs: the folder is checked when the run is set up and made at the first write.

VisualDL 2.5's own file writer opens and closes the log file for every record and hands each record to
a thread (about 55 us a scalar, measured here): per-step monitoring of tens of tables writes hundreds of
scalars a step. ``BufferedLogWriter`` keeps LogWriter's API and records, and writes them, framed as
VisualDL frames them, through one buffered file handle flushed every ``flush_secs`` and on ``flush()``.
A step's scalars are encoded straight into the bytes protobuf gives VisualDL's scalar records (tested
byte for byte): building a protobuf message per scalar costs more than the rest of a monitored step.
"""
from __future__ import annotations

import atexit
import os
import struct
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import numpy as np
from visualdl import LogWriter

from ..errors import EdoRuntimeError


class MonitorError(EdoRuntimeError):
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


_FRAME = struct.Struct("<Q").pack


def _float32s(values: list[float]) -> np.ndarray:
    """Floats as protobuf stores float fields (little-endian float32; values beyond its range become
    +-inf): their bytes, four a value."""
    with np.errstate(over="ignore"):
        return np.asarray(values, dtype=np.float64).astype("<f4").view(np.uint8).reshape(-1, 4)


def _varint(value: int) -> bytes:
    """Protobuf base-128 varint; negative int64 values as their two's complement (ten bytes)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class ScalarRecords:
    """Framed VisualDL scalar records (``record_pb2.Record`` holding one ``Value``: id = step, tag,
    timestamp, float value), encoded without building messages. A monitor writes the same tags step after
    step, and their records differ only in the bytes of step, time and value: the bytes of a list of tags
    are kept as a template, with where each record's step, time and value go, for the lengths that step
    and time take, and filled in at once."""

    MAX_TEMPLATES = 256

    def __init__(self) -> None:
        self._templates: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}

    @staticmethod
    def _template(tags: tuple[str, ...], step_field: bytes, time_field: bytes
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(the records' bytes with these step and time fields and zero values, and the positions of each
        record's step field, time field and value)."""
        extra = len(step_field) + len(time_field)
        chunks, steps, times, values, at = [], [], [], [], 0
        for tag in tags:
            raw = tag.encode()
            field = b"\x12" + _varint(len(raw)) + raw if raw else b""
            body = extra + len(field) + 5                      # + the float field: its key and four bytes
            head = _FRAME(1 + len(_varint(body)) + body) + b"\x0a" + _varint(body)
            steps.append(at + len(head))
            times.append(steps[-1] + len(step_field) + len(field))
            values.append(times[-1] + len(time_field) + 1)
            chunks += (head, step_field, field, time_field, b"\x25", bytes(4))
            at = values[-1] + 4
        template = np.frombuffer(b"".join(chunks), dtype=np.uint8).copy()
        return (template, *(np.add.outer(np.asarray(starts, dtype=np.int64), np.arange(width))
                            for starts, width in ((steps, len(step_field)), (times, len(time_field)), (values, 4))))

    def encode(self, scalars: list[tuple[str, float]], step: int, walltime: int) -> bytes:
        step_field = (b"\x08" + _varint(step) if step else b"")
        time_field = (b"\x18" + _varint(walltime) if walltime else b"")
        tags = tuple(tag for tag, _ in scalars)
        key = (tags, len(step_field), len(time_field))
        found = self._templates.get(key)
        if found is None:
            if len(self._templates) >= self.MAX_TEMPLATES:
                self._templates.clear()
            found = self._templates[key] = self._template(tags, step_field, time_field)
        template, steps, times, values = found
        out = template.copy()
        out[steps] = np.frombuffer(step_field, dtype=np.uint8)
        out[times] = np.frombuffer(time_field, dtype=np.uint8)
        out[values] = _float32s([value for _, value in scalars])
        return out.tobytes()


class BufferedRecordFile:
    """What LogWriter writes records to: a ``vdlrecords.<time>.log`` file in VisualDL's framing (each
    record's length as a little-endian uint64, then the record), through one buffered handle."""

    def __init__(self, logdir: str, flush_secs: float, filename_suffix: str = "") -> None:
        self._logdir = logdir
        self._file_name = os.path.join(logdir, "vdlrecords.%010d.log%s" % (time.time(), filename_suffix))
        self._file = open(self._file_name, "ab", buffering=1 << 16)
        self._flush_secs = flush_secs
        self._next_flush = time.monotonic() + flush_secs

    def add_record(self, record) -> None:
        self.add_records([record])

    def add_records(self, records) -> None:
        """Frame and write several records in one write."""
        chunks = []
        for record in records:
            data = record.SerializeToString()
            chunks += (_FRAME(len(data)), data)
        self.add_framed(b"".join(chunks))

    def add_framed(self, data: bytes) -> None:
        """Write records already framed."""
        self._file.write(data)
        if time.monotonic() >= self._next_flush:
            self.flush()

    def flush(self) -> None:
        if not self._file.closed:
            self._file.flush()
        self._next_flush = time.monotonic() + self._flush_secs

    def close(self) -> None:
        self._file.close()

    def get_logdir(self) -> str:
        return self._logdir

    def get_filename(self) -> str:
        return self._file_name


class BufferedLogWriter(LogWriter):
    """visualdl.LogWriter whose records go through a BufferedRecordFile (flushed every ``flush_secs``),
    opened by LogWriter's constructor. Threads may share it.

    ``add_scalars_of_step`` keeps a step's scalars and encodes them with later steps' (up to
    ``PENDING_STEPS`` steps, or ``flush_secs``), before any other record and on ``flush``: inside a
    training loop a call costs mostly its cold start, so steps encoded together cost about one."""

    PENDING_STEPS = 16

    def __init__(self, logdir: str, flush_secs: float = 10.0, **kwargs: Any) -> None:
        self._pending: list[tuple[list[tuple[str, float]], int, int]] = []
        self._pending_due = 0.0
        self._pending_lock = threading.Lock()
        super().__init__(logdir=logdir, flush_secs=flush_secs, **kwargs)
        self._scalar_records = ScalarRecords()
        atexit.register(_flush_at_exit, weakref.ref(self))

    def add_scalars_of_step(self, scalars: list[tuple[str, float]], step: int) -> None:
        """``add_scalar`` for many tags of one step (what a monitor logs per step). The list is kept until
        written: do not change it afterwards."""
        walltime = round(time.time() * 1000)
        with self._pending_lock:
            if not self._pending:
                self._pending_due = time.monotonic() + self._flush_secs
            self._pending.append((scalars, step, walltime))
            if len(self._pending) >= self.PENDING_STEPS or time.monotonic() >= self._pending_due:
                self._write_pending()

    def _write_pending(self) -> None:
        """Encode and write the kept steps' scalars (the caller holds the lock)."""
        pending, self._pending = self._pending, []
        if pending:
            encode = self._scalar_records.encode
            self._record_file().add_framed(b"".join(encode(scalars, step, walltime)
                                                    for scalars, step, walltime in pending))

    def _record_file(self) -> BufferedRecordFile:
        if self._file_writer is None:
            os.makedirs(self._logdir, exist_ok=True)
            self._file_writer = BufferedRecordFile(self._logdir, self._flush_secs, self._filename_suffix)
            self._all_writers = {self._logdir: self._file_writer}
        return self._file_writer

    def _get_file_writer(self) -> BufferedRecordFile:
        """What LogWriter's own ``add_*`` write to: after the kept scalars."""
        with self._pending_lock:
            self._write_pending()
        return self._record_file()

    def flush(self) -> None:
        with self._pending_lock:
            self._write_pending()
        super().flush()

    def close(self) -> None:
        with self._pending_lock:
            self._write_pending()
        super().close()


def _flush_at_exit(writer: weakref.ref) -> None:
    """A process that ends without ``flush`` or ``close`` (a run that failed) still writes its kept
    scalars: the steps before a failure are the ones worth seeing."""
    alive = writer()
    if alive is not None:
        alive.flush()


def open_log_writer(logdir: str | Path) -> BufferedLogWriter:
    """A VisualDL LogWriter on ``logdir``, after proving the folder can be written."""
    check_writable(logdir)
    logdir = Path(logdir)
    try:
        logdir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=logdir, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise _unwritable(logdir, exc.strerror or str(exc)) from None
    return BufferedLogWriter(str(logdir))


class DeferredLogWriter:
    """Stands for a LogWriter: checks the folder now, opens the writer at the first call, so that a run
    stopped before training (bad data, say) leaves no folder behind."""

    def __init__(self, logdir: str | Path) -> None:
        check_writable(logdir)
        self.logdir = Path(logdir)
        self._writer = None
        self._opening = threading.Lock()  # the monitors' worker thread and the training thread share it

    def __getattr__(self, name: str) -> Any:
        if self._writer is None:
            with self._opening:
                if self._writer is None:
                    self._writer = open_log_writer(self.logdir)
        method = getattr(self._writer, name)
        setattr(self, name, method)  # later calls skip this lookup
        return method
