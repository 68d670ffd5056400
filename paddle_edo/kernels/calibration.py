"""Which path serves a lookup on this processor, the native kernel or Paddle's composite ops: timed once.

The kernels beat the composite ops on the processors they were tuned on; on another microarchitecture
(other prefetch queues, caches, memory) a composite op can win. A plain fp32 gather is Paddle's own
``embedding`` loop against ours: the faster differs by processor, and by batch (a call into a custom
operator costs more than Paddle's few ids take). So the first call of each class of lookup (kind, format,
width, and the table's bytes and the batch's ids, each to the nearest power of two) times both paths on its
own inputs, interleaved: the medians of ``TIMINGS`` rounds, or one round where a path is ``CLEAR_MARGIN``
times slower (a round of a class of a few ids calls each path several times, ``ROUND_MS`` in all, as one
call of tens of microseconds is mostly noise). The faster serves from then on. The records are kept beside
the built extension (``kernel_paths.json``), per processor, kernel instruction set and thread count, so
later processes take the recorded path at once; ``python -m paddle_edo.kernels`` lists this processor's
(``--recalibrate`` forgets them).

Only dynamic-graph calls are timed. A static program traced inside ``fused_static_programs`` takes the
kernels, as it asks. ``PADDLE_EDO_KERNEL_PATHS=fused`` skips the timing and lets the kernels serve wherever
they can (the test suite's setting: its tests compare each kernel with the composite ops, bit for bit).
Both paths give the same values, so the choice changes speed only.
"""
from __future__ import annotations

import fcntl
import functools
import json
import logging
import math
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Callable, NamedTuple, TypeVar

import paddle

from ..benchmark import side_by_side
from ..errors import EdoValueError
from ..runtime import processor_name
from . import c_function, kernel_isa, library_path

logger = logging.getLogger("paddle_edo")

SETTING = "PADDLE_EDO_KERNEL_PATHS"
SETTINGS = ("calibrate", "fused")  # time both paths once per class; or the kernels wherever they serve
RECORDS = "kernel_paths.json"
TIMINGS = 7        # rounds of both paths, interleaved; the medians decide
CLEAR_MARGIN = 3  # a path this many times slower in a first round loses without more rounds
ROUND_MS = 0.5    # the least time a round calls each path for

T = TypeVar("T")
_records: dict[str, dict[str, dict]] = {}  # machine -> its records once read (class key -> record)
_served: Counter = Counter()    # (class key, path) -> calls served in this process
_machines: dict[int, str] = {}  # thread count -> machine()


class LookupClass(NamedTuple):
    """The lookups one timing decides for: ``kind`` ("gather", "decode", "bag"), ``variant`` (format,
    output dtype, pooling), the rows' width, and the table's bytes and the call's ids (each counted to the
    nearest power of two; ``ids`` None: a static program, never timed). A tuple: made on every lookup."""

    kind: str
    variant: str
    dim: int
    table_bytes: int
    ids: int | None

    @property
    def key(self) -> str:
        return _class_key(self.kind, self.variant, self.dim, _octave(self.table_bytes),
                          None if self.ids is None else _octave(self.ids))


@functools.lru_cache(maxsize=1024)
def _class_key(kind: str, variant: str, dim: int, table_octave: int, ids_octave: int | None) -> str:
    calls = "in static programs" if ids_octave is None else f"~2^{ids_octave} ids"
    return f"{kind} {variant}, dim {dim}, table ~2^{table_octave} bytes, {calls}"


@paddle.jit.not_to_static
def lookup_class(kind: str, variant: str, dim: int, table_bytes: int, ids: paddle.Tensor) -> LookupClass:
    """The class of a call with these ids."""
    count = math.prod(ids.shape) if paddle.in_dynamic_mode() else None  # (Tensor.size goes through numpy)
    return LookupClass(kind, variant, int(dim), int(table_bytes), count)


def _octave(count: int) -> int:
    return round(math.log2(max(int(count), 1)))


def setting() -> str:
    """PADDLE_EDO_KERNEL_PATHS (default "calibrate"); EdoValueError for another value."""
    value = os.environ.get(SETTING, "calibrate")
    if value not in SETTINGS:
        raise EdoValueError(f"{SETTING}={value!r}: expected one of {', '.join(SETTINGS)}")
    return value


def machine() -> str:
    """What a record holds for: the processor, the kernels' instruction set and their threads."""
    threads = c_function("edo_openmp_threads")
    count = threads() if threads else 1
    if count not in _machines:
        _machines[count] = f"{processor()}; {count} threads"
    return _machines[count]


def processor() -> str:
    """The processor and the kernels' instruction set: machine() at any thread count."""
    return f"{processor_name()}; {kernel_isa()} kernels"


def records_file() -> Path | None:
    """kernel_paths.json beside the built extension (None without one)."""
    library = library_path()
    return None if library is None else library.parent / RECORDS


def _read_all(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):  # none yet, or a file cut short: timed again
        return {}


def records() -> dict[str, dict]:
    """This machine's records (its thread count included): class key -> {"path", "fused_ms", "composite_ms"}."""
    here = machine()
    if here not in _records:
        path = records_file()
        _records[here] = _read_all(path).get(here, {}) if path is not None else {}
    return _records[here]


def _chosen_path(key: str) -> str | None:
    """The path that serves the class ``key`` now: "fused" or "composite", None while it is untimed."""
    if setting() == "fused" or not paddle.in_dynamic_mode():
        return "fused"
    record = records().get(key)
    return None if record is None else record["path"]


@paddle.jit.not_to_static
def serve(lookup: LookupClass, fused: Callable[[], T], composite: Callable[[], T]) -> T:
    """The lookup by its class's faster path (``fused``: the kernel; ``composite``: Paddle's ops, with the
    checks of the ids that the kernel makes), timing both first if the class is untimed: the kernel's
    result is returned then (an id it refuses is refused before any timing)."""
    key = lookup.key
    path = _chosen_path(key)
    if path is None:
        result = fused()
        composite()
        candidates = {"fused": fused, "composite": composite}
        ms = side_by_side(candidates, repeats=1, warmup=0)
        if max(ms.values()) < CLEAR_MARGIN * min(ms.values()):  # else one round tells (a slow path costs seconds)
            calls = max(1, math.ceil(ROUND_MS / max(min(ms.values()), 1e-6)))
            ms = side_by_side({name: _repeated(path, calls) for name, path in candidates.items()}, repeats=TIMINGS,
                              warmup=0)
            ms = {name: value / calls for name, value in ms.items()}
        path = "fused" if ms["fused"] <= ms["composite"] else "composite"
        _record(key, {"path": path, "fused_ms": round(ms["fused"], 4), "composite_ms": round(ms["composite"], 4)})
    else:
        result = fused() if path == "fused" else composite()
    _served[key, path] += 1
    return result


def _repeated(path: Callable[[], object], calls: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(calls):
            path()
    return run


def _record(key: str, record: dict) -> None:
    """Keep the timing of class ``key`` in this process and on disk."""
    records()[key] = record
    logger.debug("paddle_edo: %s: the %s path serves (kernel %.3f ms, composite ops %.3f ms)", key,
                record["path"], record["fused_ms"], record["composite_ms"])
    try:
        _rewrite(lambda mine: mine.__setitem__(key, record))
    except OSError as error:  # a read-only cache: the timing holds for this process
        logger.warning("paddle_edo: the kernel paths could not be written beside the extension (%s)", error)


def _rewrite(change: Callable[[dict], None]) -> None:
    """Apply ``change`` to this machine's records on disk: under a lock, merged with what other processes
    wrote, replaced atomically."""
    _rewrite_all(lambda everything: change(everything.setdefault(machine(), {})))


def _rewrite_all(change: Callable[[dict], None]) -> None:
    """Apply ``change`` to every machine's records on disk (machine -> records), as _rewrite does."""
    path = records_file()
    if path is None:
        return
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        everything = _read_all(path)
        change(everything)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as file:
            json.dump(everything, file, indent=1, sort_keys=True)
        os.replace(file.name, path)


def served() -> dict[str, dict]:
    """What served in this process: class key -> {"calls": {path: calls}, and "fused_ms" and "composite_ms"
    where this machine timed the class}."""
    out: dict[str, dict] = {}
    for (key, path), calls in sorted(_served.items()):
        timing = {name: value for name, value in records().get(key, {}).items() if name != "path"}
        out.setdefault(key, {"calls": {}, **timing})["calls"][path] = calls
    return out


def forget() -> int:
    """Drop this processor's records, at every thread count, on disk and in this process; how many there were."""
    count = sum(len(mine) for mine in timed_here().values())
    _drop_this_processor(_records)
    _rewrite_all(_drop_this_processor)
    return count


def _drop_this_processor(records_by_machine: dict) -> None:
    for key in [key for key in records_by_machine if _same_processor(key)]:
        del records_by_machine[key]


def timed_here() -> dict[str, dict[str, dict]]:
    """This processor's records at every thread count, as kept on disk: machine() -> class key -> record."""
    path = records_file()
    return {key: mine for key, mine in (_read_all(path) if path is not None else {}).items() if _same_processor(key)}


def _same_processor(machine_key: str) -> bool:
    """Whether a records' machine key names this processor and kernel instruction set (at any thread count)."""
    return machine_key.rsplit("; ", 1)[0] == processor()
