"""Reads the rows a coming batch will miss from the host store on a background thread."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from .host import HostStore
from .slots import SlotMap


@dataclass
class Staged:
    """A coming batch's ids and the host rows of those (distinct, sorted) that were not resident
    when they were read."""

    ids: np.ndarray
    row_ids: np.ndarray = field(default=None)
    rows: np.ndarray = field(default=None)  # [len(row_ids), len(names), dim], as HostStore.read gives
    names: list[str] = field(default_factory=list)


class Prefetcher:
    """One batch ahead: ``start(ids)`` returns at once; ``take(ids)`` joins and hands over what was read.

    A row written back to the host after ``start`` is never served from the staging buffer (it may
    have been read before the write landed): ``take`` reports those ids so they are read again.
    """

    def __init__(self, host: HostStore, slots: SlotMap) -> None:
        self.host = host
        self.slots = slots
        self._thread: threading.Thread | None = None
        self._staged: Staged | None = None
        self._error: BaseException | None = None
        self._written: list[np.ndarray] = []

    def start(self, ids: np.ndarray) -> None:
        self.cancel()
        self._staged = Staged(np.array(ids, dtype=np.int64, copy=True))
        self._thread = threading.Thread(target=self._read, args=(self._staged, self.host.names), daemon=True,
                                        name="paddle_edo-prefetch")
        self._thread.start()

    def _read(self, staged: Staged, names: list[str]) -> None:
        try:
            flat = staged.ids.reshape(-1)
            staged.row_ids = np.unique(flat[self.slots.slot_of[flat] < 0])
            staged.names = list(names)
            staged.rows = self.host.read(staged.row_ids)
        except BaseException as exc:  # surfaced in take(), on the training thread
            self._error = exc

    def note_written(self, ids: np.ndarray) -> None:
        """Host rows just written back: any staged copy of them is stale."""
        if self._staged is not None and len(ids):
            self._written.append(ids)

    def take(self, ids: np.ndarray) -> tuple[Staged, np.ndarray] | None:
        """What was staged for exactly these ids and the ids written since, or None (other ids, or none)."""
        if self._thread is None:
            return None
        self._thread.join()
        staged, written, error = self._staged, self._written, self._error
        self._reset()
        if error is not None:
            raise error
        if staged.ids.shape != ids.shape or not np.array_equal(staged.ids, ids):
            return None
        return staged, (np.concatenate(written) if written else np.zeros(0, dtype=np.int64))

    def cancel(self) -> None:
        """Drop what is in flight (waiting for the reader to finish)."""
        if self._thread is not None:
            self._thread.join()
        self._reset()

    def _reset(self) -> None:
        self._thread, self._staged, self._error, self._written = None, None, None, []
