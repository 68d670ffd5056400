"""Benchmark helpers: steady allocator settings and side-by-side timing reported as medians."""
from __future__ import annotations

import ctypes
import ctypes.util
import time
from typing import Callable

import numpy as np

# glibc mallopt parameters
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
MMAP_THRESHOLD = 32 * 1024 * 1024
TRIM_THRESHOLD = 4 * 1024 * 1024 * 1024 - 1
MMAP_MAX = 0
# the same settings for a child process (glibc reads them at its start)
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD), "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD),
              "MALLOC_MMAP_MAX_": str(MMAP_MAX)}


def steady_malloc() -> str:
    """Keep freed large buffers in the heap instead of returning them to the OS.

    With glibc's defaults, Paddle's large outputs are page-faulted afresh on some calls, making the
    same lookup up to 5x slower and noisy; glibc maps every buffer over 32 MiB (the most its threshold
    takes) afresh and unmaps it when freed, so those come from the heap too (M_MMAP_MAX = 0: a training
    batch's 225 MB row gradients faulted 55,000 pages each step). Same effect as ``MALLOC_ENV`` in the
    environment. Returns a description of what was set.
    """
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or not hasattr(libc, "mallopt"):
        return "glibc mallopt unavailable: allocator defaults"
    ok = (libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
          and libc.mallopt(_M_MMAP_MAX, MMAP_MAX))
    return (f"mallopt M_MMAP_THRESHOLD={MMAP_THRESHOLD} M_TRIM_THRESHOLD={TRIM_THRESHOLD} M_MMAP_MAX={MMAP_MAX}" if ok
            else "mallopt refused: allocator defaults")


PRIMING_S = 0.02  # a primed call's untimed calls before it, at least (see side_by_side)


class TimedElsewhere:
    """A candidate that times itself where it runs (a peer library in another process): ``call()`` makes one
    timed call there, primed or not as that side does it, and returns its milliseconds. In side_by_side's
    rounds beside local candidates, it meets the same machine load as they do. ``settle_s``: a pause before
    each of its timed turns, in which this process's OpenMP workers stop spinning, so that they take no core
    from it (Paddle's Intel OpenMP spins 200 ms after each parallel region); a pause before every turn, local
    ones too, left every local candidate to meet idle cores, and made the timings of a shared 2-core machine
    scatter (means of bags timed faster than their sums)."""

    def __init__(self, call: Callable[[], float], settle_s: float = 0.0) -> None:
        self.call = call
        self.settle_s = settle_s


def side_by_side(candidates: dict[str, Callable[[], object] | TimedElsewhere], repeats: int = 15, warmup: int = 3,
                 sync: Callable[[], None] | None = None, primed: bool = False) -> dict[str, float]:
    """Median milliseconds per call of each candidate, measured round-robin so that all see the same
    machine load. ``sync`` waits for the device (e.g. paddle.device.synchronize on a GPU). ``primed``: each
    timed call follows untimed calls of the same candidate (one, and more until PRIMING_S has passed), so
    that each meets the caches, and the processor, as its own calls left them (as a candidate timed in
    consecutive calls does), not as the others left them: measured on a 2-core AMD EPYC, a bag kernel's
    call after one untimed call was 5-25% slower than after a few. A ``TimedElsewhere`` candidate reports
    its own time, after its pause."""
    sync = sync or (lambda: None)
    for fn in candidates.values():
        for _ in range(warmup):
            fn.call() if isinstance(fn, TimedElsewhere) else fn()
    sync()
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, fn in candidates.items():
            if isinstance(fn, TimedElsewhere):
                time.sleep(fn.settle_s)
                times[name].append(fn.call())
                continue
            if primed:
                primed_until = time.perf_counter() + PRIMING_S
                fn()
                sync()
                while time.perf_counter() < primed_until:
                    fn()
                    sync()
            start = time.perf_counter()
            fn()
            sync()
            times[name].append((time.perf_counter() - start) * 1e3)
    return {name: float(np.median(t)) for name, t in times.items()}
