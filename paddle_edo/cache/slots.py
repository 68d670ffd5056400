"""Which id sits in which cache slot: lookups, admission of misses, victims, pins and dirty rows."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import EdoValueError
from .policies import POLICIES


@dataclass(frozen=True)
class Admission:
    """What ``SlotMap.admit`` decided for one batch of distinct ids; the caller moves the data:
    first the dirty victims back to the host (``write_back_*``), then the new rows into ``new_slots``.
    Ids that found no free slot (the step holds more rows than the cache) are ``bypass_ids``: their
    slot is -1, and the caller serves them from the host for this lookup."""

    slots: np.ndarray            # slot of every id asked for, in order (-1: bypass)
    new_ids: np.ndarray          # distinct ids that missed, now given new_slots
    new_slots: np.ndarray
    write_back_ids: np.ndarray   # dirty victims: their rows must reach the host before new_slots are filled
    write_back_slots: np.ndarray
    evictions: int
    distinct_hits: int
    bypass_ids: np.ndarray


class VictimQueue:
    """The lowest-key slots, found with one argpartition and then served over several batches.

    An entry is still a right victim while its slot's key is unchanged (keys only grow when a slot is
    touched); the queue is dropped when a touched slot gets a key below the queue's largest (LFU: a
    new row with a lower count), so victims are those a full argpartition would pick, up to ties.
    """

    def __init__(self, keys: np.ndarray) -> None:
        self.keys = keys
        self.slots = np.zeros(0, dtype=np.int64)
        self.slot_keys = np.zeros(0, dtype=np.int64)
        self.position = 0

    def clear(self) -> None:
        self.slots, self.slot_keys, self.position = self.slots[:0], self.slot_keys[:0], 0

    def touched(self, slots: np.ndarray) -> None:
        if len(self.slot_keys) and len(slots) and self.keys[slots].min() < self.slot_keys[-1]:
            self.clear()

    def take(self, count: int, occupied: int, protected: np.ndarray) -> np.ndarray:
        """``count`` unprotected slots of the lowest keys among the first ``occupied`` (marks them protected)."""
        chosen: list[np.ndarray] = []
        while count:
            if self.position >= len(self.slots):
                self._refill(count, occupied, protected)
            window = self.slots[self.position: self.position + 2 * count]
            valid = (self.keys[window] == self.slot_keys[self.position: self.position + len(window)]) \
                & ~protected[window]
            picked = np.flatnonzero(valid)[:count]
            self.position += int(picked[-1]) + 1 if len(picked) == count else len(window)
            chosen.append(window[picked])
            protected[window[picked]] = True  # a refill must not offer them again
            count -= len(picked)
        return np.concatenate(chosen)

    def _refill(self, count: int, occupied: int, protected: np.ndarray) -> None:
        keys = self.keys[:occupied].copy()
        keys[protected] = np.iinfo(np.int64).max
        size = min(int((~protected).sum()), max(8 * count, 1024))
        lowest = np.argpartition(keys, size - 1)[:size]
        order = np.argsort(keys[lowest], kind="stable")
        self.slots = lowest[order].astype(np.int64)
        self.slot_keys = keys[self.slots]
        self.position = 0


class SlotMap:
    """Direct-mapped id -> slot index (an int32 per id) and slot -> id, with a policy for victims.

    Rows used by a training step are pinned until ``end_step`` (the optimizer has then applied their
    gradients), so a step never sees its rows moved under it; pinned rows are dirty until written back.
    """

    def __init__(self, num_ids: int, capacity: int, policy: str, owner: str = "SlotMap") -> None:
        if policy not in POLICIES:
            raise EdoValueError(f"{owner}: policy = {policy!r}; expected one of {', '.join(map(repr, POLICIES))}")
        self.owner = owner
        self.capacity = capacity
        self.policy = POLICIES[policy](capacity, num_ids)
        self.slot_of = np.full(num_ids, -1, dtype=np.int32)
        self.id_of_slot = np.full(capacity, -1, dtype=np.int64)
        self.pinned = np.zeros(capacity, dtype=bool)
        self.permanent = np.zeros(capacity, dtype=bool)
        self.dirty = np.zeros(capacity, dtype=bool)
        self.used = 0  # slots [0, used) are occupied
        self.victim_queue = VictimQueue(self.policy.keys)
        self._scratch = np.zeros(capacity, dtype=bool)  # marks a batch's hit slots to count them once

    def admit(self, ids: np.ndarray, pin: bool) -> Admission:
        """Give every id a slot (ids may repeat: no sort of the batch is needed, the map is direct),
        choosing victims among unprotected slots if the cache is full."""
        slots = self.slot_of[ids].astype(np.int64)
        missing = slots < 0
        new_ids = np.unique(ids[missing])
        self._scratch[slots[~missing]] = True
        hit_slots = np.flatnonzero(self._scratch[: self.used])  # distinct, without sorting the batch
        self._scratch[hit_slots] = False
        empty = np.zeros(0, dtype=np.int64)
        victims = empty
        new_slots = empty
        bypass_ids = empty
        if len(new_ids):
            occupied = self.used
            fresh = np.arange(occupied, min(self.capacity, occupied + len(new_ids)), dtype=np.int64)
            needed = len(new_ids) - len(fresh)
            if needed:
                victims = self._victims(needed, occupied, hit_slots)
                if len(victims) < needed:  # the rest stay on the host for this lookup
                    new_ids, bypass_ids = np.split(new_ids, [len(fresh) + len(victims)])
            self.used += len(fresh)
            new_slots = np.concatenate([fresh, victims])
        write_back = victims[self.dirty[victims]]
        write_back_ids = self.id_of_slot[write_back]
        if len(victims):
            self.slot_of[self.id_of_slot[victims]] = -1
        if len(new_ids):
            self.slot_of[new_ids] = new_slots
            self.id_of_slot[new_slots] = new_ids
            self.dirty[new_slots] = False
            slots[missing] = self.slot_of[ids[missing]]  # -1 where bypassed
        touched = np.concatenate([hit_slots, new_slots])
        self.policy.touch(touched, self.id_of_slot[touched])
        self.victim_queue.touched(touched)
        if pin:
            self.pinned[touched] = True
            self.dirty[touched] = True
        return Admission(slots, new_ids, new_slots, write_back_ids, write_back, len(victims), len(hit_slots),
                         bypass_ids)

    def _victims(self, count: int, occupied: int, hit_slots: np.ndarray) -> np.ndarray:
        """Up to ``count`` slots among the first ``occupied``, lowest priority first, never a protected one
        (fewer when the step in progress holds the others)."""
        protected = self.pinned[:occupied] | self.permanent[:occupied]
        protected[hit_slots] = True
        count = min(count, occupied - int(protected.sum()))
        return self.victim_queue.take(count, occupied, protected) if count else np.zeros(0, dtype=np.int64)

    def make_permanent(self, row_id: int) -> int:
        """Keep one id resident for good (the padding row); returns its slot."""
        slot = int(self.admit(np.array([row_id], dtype=np.int64), pin=False).slots[0])
        self.permanent[slot] = True
        return slot

    def reset(self) -> None:
        """Forget every resident row (their data is dropped, not written back); policy history stays."""
        occupied = self.id_of_slot[: self.used]
        self.slot_of[occupied[occupied >= 0]] = -1
        self.id_of_slot[:] = -1
        for flags in (self.pinned, self.permanent, self.dirty):
            flags[:] = False
        self.used = 0
        self.victim_queue.clear()

    def end_step(self) -> None:
        self.pinned[:] = False

    def dirty_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, slots) of the occupied slots whose rows changed since they were loaded."""
        slots = np.flatnonzero(self.dirty[: self.used]).astype(np.int64)
        return self.id_of_slot[slots], slots

    def mark_clean(self, slots: np.ndarray) -> None:
        self.dirty[slots] = False

    @property
    def nbytes(self) -> int:
        arrays = (self.slot_of, self.id_of_slot, self.pinned, self.permanent, self.dirty, self._scratch)
        return sum(a.nbytes for a in arrays) + self.policy.nbytes
