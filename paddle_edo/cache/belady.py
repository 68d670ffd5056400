"""Belady's optimal hit rate: the offline bound no eviction policy can beat on a trace."""
from __future__ import annotations

import heapq

import numpy as np

from ..errors import EdoValueError


def next_use(trace: np.ndarray) -> np.ndarray:
    """For each position, the next position of the same id (len(trace) when it never comes back)."""
    n = len(trace)
    order = np.argsort(trace, kind="stable")
    following = np.full(n, n, dtype=np.int64)
    same = trace[order[1:]] == trace[order[:-1]]
    following[order[:-1][same]] = order[1:][same]
    return following


def belady_hit_rate(trace: np.ndarray, capacity: int) -> float:
    """Hit rate of MIN on ``trace`` with ``capacity`` slots: every miss is admitted and, when the cache
    is full, the resident id used farthest in the future is evicted (a demand cache, as ours is)."""
    if capacity < 1:
        raise EdoValueError(f"belady_hit_rate: capacity = {capacity} must be >= 1")
    following = next_use(np.asarray(trace)).tolist()
    ids = np.asarray(trace).tolist()
    resident: dict[int, int] = {}  # id -> its next use
    heap: list[tuple[int, int]] = []  # (-next use, id); entries whose next use changed are stale
    hits = 0
    for position, (row, nxt) in enumerate(zip(ids, following)):
        if row in resident:
            hits += 1
        elif len(resident) >= capacity:
            while True:
                farthest, victim = heapq.heappop(heap)
                if resident.get(victim) == -farthest:
                    del resident[victim]
                    break
        resident[row] = nxt
        heapq.heappush(heap, (-nxt, row))
    return hits / len(ids) if ids else 0.0
