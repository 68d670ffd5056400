"""Eviction policies: each keeps an int64 key per slot, updated only for the slots a batch touches;
the slots with the lowest keys are evicted first."""
from __future__ import annotations

import numpy as np


class LRUPolicy:
    """Least recently used: a slot's key is the batch it was last used in, so the victim is the slot
    untouched longest (ties to the lowest slot). ``capacity`` slots for ids in [0, ``num_ids``)."""

    name = "lru"

    def __init__(self, capacity: int, num_ids: int) -> None:
        self.clock = 0
        self.keys = np.zeros(capacity, dtype=np.int64)

    def touch(self, slots: np.ndarray, ids: np.ndarray) -> None:
        """One call per lookup batch, with the slots and ids it used (each once)."""
        self.clock += 1
        self.keys[slots] = self.clock

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes


class LFUPolicy(LRUPolicy):
    """Least frequently used, counting every use of an id since the start (also while evicted), so an
    id that comes back keeps its history; ties go to the least recently used (key: count << 32 | batch)."""

    name = "lfu"

    def __init__(self, capacity: int, num_ids: int) -> None:
        super().__init__(capacity, num_ids)
        self.counts = np.zeros(num_ids, dtype=np.int32)

    def touch(self, slots: np.ndarray, ids: np.ndarray) -> None:
        self.clock += 1
        self.counts[ids] += 1
        self.keys[slots] = (self.counts[ids].astype(np.int64) << 32) | self.clock

    @property
    def nbytes(self) -> int:
        return super().nbytes + self.counts.nbytes


#: Eviction policies by the name ``embedding.policy`` takes.
POLICIES = {p.name: p for p in (LRUPolicy, LFUPolicy)}
