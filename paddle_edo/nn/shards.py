"""How a sharded job places its tables over the ranks, two plans:

- by rows (``RowShare``): rank r of N holds the rows whose global id g has g % N == r, at local row g // N.
  The modulo spreads both ids ranked by frequency (where the hot ids are the small ones) and hashed ids
  evenly over the ranks, and depends on nothing but the id and N, so a placement is the same after every
  restart. Only for types whose id g is row g (``row_shardable``).
- by tables (``TableShare``): one rank holds the whole table (any type: hash, QR, mixed-dimension and
  clustered tables, whose rows are not ids) and answers every rank's ids with its looked-up, pooled
  vectors; the others hold nothing of it (``RemoteTable``). Tables go, in the model's order, to the rank
  holding the fewest elements (rows x dim) of such tables so far: the same on every rank and after a
  restart with the same number of ranks.

While ``row_shares(rank, world_size, min_rows, placement)`` is active, ``TableSpec.build`` builds every table
with at least ``min_rows`` rows by its plan (``placement``: ``auto``, rows for the row-shardable types and
tables for the others; ``row``; ``table``) and every other table whole on every rank, with a dense gradient
(the ranks all-reduce it)."""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from ..errors import EdoValueError


@dataclass(frozen=True)
class RowShare:
    """Rank ``rank`` of ``world_size``'s share of a table of ``rows`` rows (ids); ``padding_idx``: the
    table's padding id, which the sharing collection answers with zeros."""

    rank: int
    world_size: int
    rows: int
    padding_idx: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise EdoValueError(f"RowShare: rank {self.rank} is outside [0, {self.world_size})")

    @property
    def held_rows(self) -> int:
        """Rows this rank holds."""
        return held_rows(self.rows, self.rank, self.world_size)

    @property
    def place(self) -> tuple[int, int]:
        """(first, stride): local row r is row first + r * stride of the whole table."""
        return self.rank, self.world_size

    def global_rows(self) -> np.ndarray:
        """The global id of each held row, int64 [held_rows]."""
        return self.global_ids(np.arange(self.held_rows, dtype=np.int64))

    def global_ids(self, local: np.ndarray) -> np.ndarray:
        """The global ids of local rows ``local`` (int64, any shape)."""
        return np.asarray(local, dtype=np.int64) * self.world_size + self.rank

    def owned_local(self, ids: np.ndarray) -> np.ndarray:
        """The local rows of those of ``ids`` (global, any shape) this rank holds, flat."""
        flat = np.asarray(ids, dtype=np.int64).reshape(-1)
        return flat[flat % self.world_size == self.rank] // self.world_size


@dataclass(frozen=True)
class TableShare:
    """Where a whole table lives in a job of ``world_size`` ranks: on rank ``owner``; ``rank`` is the rank
    holding this layer (the table itself when it is the owner, a ``RemoteTable`` else)."""

    owner: int
    rank: int
    world_size: int
    rows: int

    def __post_init__(self) -> None:
        for what, value in (("rank", self.rank), ("owner", self.owner)):
            if not 0 <= value < self.world_size:
                raise EdoValueError(f"TableShare: {what} {value} is outside [0, {self.world_size})")

    @property
    def held(self) -> bool:
        """Whether this rank holds the table."""
        return self.owner == self.rank


def place_of(layer: object) -> tuple[int, int]:
    """(first, stride) of a table layer's rows in its whole table: its share's place, or (0, 1) when whole."""
    share = getattr(layer, "row_share", None)
    return (0, 1) if share is None else share.place


def held_rows(rows: int, rank: int, world_size: int) -> int:
    """Rows of a ``rows``-row table that rank ``rank`` of ``world_size`` holds."""
    return max(0, (rows - rank + world_size - 1) // world_size)


PLACEMENTS = ("auto", "row", "table")


@dataclass(frozen=True)
class ShareRule:
    rank: int
    world_size: int
    min_rows: int
    placement: str = "auto"
    loads: list[int] = field(default_factory=list)   # elements of the tables placed whole on each rank so far
    owners: list[int] = field(default_factory=list)  # the owner of each table placed whole so far, in order

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise EdoValueError(f"row_shares: placement {self.placement!r} is not one of {', '.join(PLACEMENTS)}")
        self.loads.extend([0] * (self.world_size - len(self.loads)))

    def by_rows(self, row_shardable: bool) -> bool:
        """Whether a large table of a type that is (or is not) row-shardable is placed by rows."""
        return row_shardable and self.placement != "table"

    def by_table(self, row_shardable: bool) -> bool:
        """Whether a large table is placed whole on one rank."""
        return self.placement == "table" or (self.placement == "auto" and not row_shardable)

    def place_table(self, elements: int) -> int:
        """The rank that holds the next whole table (``elements``: its rows x dim), the least loaded."""
        owner = min(range(self.world_size), key=lambda r: (self.loads[r], r))
        self.loads[owner] += int(elements)
        self.owners.append(owner)
        return owner


_RULE: contextvars.ContextVar[ShareRule | None] = contextvars.ContextVar("paddle_edo_row_shares", default=None)
_BUILDING: contextvars.ContextVar[RowShare | None] = contextvars.ContextVar("paddle_edo_building_share", default=None)


@contextlib.contextmanager
def _set(variable: contextvars.ContextVar, value: object) -> Iterator[None]:
    token = variable.set(value)
    try:
        yield
    finally:
        variable.reset(token)


def row_shares(rank: int, world_size: int, min_rows: int, placement: str = "auto") -> contextlib.AbstractContextManager:
    """Tables built inside with at least ``min_rows`` rows are placed over ``world_size`` ranks by
    ``placement`` (see the module), as rank ``rank`` holds them."""
    return _set(_RULE, ShareRule(int(rank), int(world_size), int(min_rows), placement))


def share_rule() -> ShareRule | None:
    """The rule of the enclosing ``row_shares``, if any."""
    return _RULE.get()


def building_share(share: RowShare) -> contextlib.AbstractContextManager:
    """While a share's layer is built: its initial values are the rows the whole table would draw."""
    return _set(_BUILDING, share)


def share_being_built() -> RowShare | None:
    return _BUILDING.get()
