"""The batches of a sharded job: every rank reads the same global batches (same order, same seed) and
trains its own slice of each, so that N ranks take the steps one process takes on the whole batch (its
loss weighted by the slice's share of the batch); evaluation scores slices and gathers them in order."""
from __future__ import annotations

import collections
from typing import Iterator

import numpy as np
import paddle
import paddle.distributed as dist


def slice_bounds(size: int, rank: int, world_size: int) -> tuple[int, int]:
    """Rows [start, stop) of a batch of ``size`` that rank ``rank`` takes: contiguous, sizes differing by
    one at most (``np.array_split``)."""
    base, extra = divmod(size, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def rank_slice(arrays: dict[str, np.ndarray], rank: int, world_size: int) -> dict[str, np.ndarray]:
    """This rank's rows of a batch."""
    size = len(next(iter(arrays.values())))
    start, stop = slice_bounds(size, rank, world_size)
    return {name: values[start:stop] for name, values in arrays.items()}


class RankSlices:
    """``batches`` (CTRBatches: ``epoch`` and ``skip_batches`` pass through) as this rank's slices;
    ``next_share()`` gives the slices' parts of their global batches in the order they were yielded (a
    trainer reads one batch ahead), ``whole`` the last global batch yielded. A global batch smaller than the world size is
    skipped (every rank needs an example to take its part in the step's exchange)."""

    def __init__(self, batches, rank: int, world_size: int) -> None:
        self.batches, self.rank, self.world_size = batches, rank, world_size
        self.shares: collections.deque[float] = collections.deque()
        self.whole: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.batches)

    def __getattr__(self, name: str):
        return getattr(self.__dict__["batches"], name)

    def __setattr__(self, name: str, value) -> None:
        if name in ("epoch", "skip_batches") and "batches" in self.__dict__:
            setattr(self.batches, name, value)
        else:
            super().__setattr__(name, value)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        self.shares.clear()
        for arrays in self.batches:
            size = len(arrays["label"])
            if size < self.world_size:
                continue
            part = rank_slice(arrays, self.rank, self.world_size)
            self.whole = arrays
            self.shares.append(len(part["label"]) / size)
            yield part

    def next_share(self) -> float:
        """The part of its global batch that the oldest slice not yet trained holds."""
        return self.shares.popleft()


def gather_slices(values: paddle.Tensor, world_size: int) -> paddle.Tensor:
    """Every rank's ``values`` (its slice of a batch, first axis) joined in rank order, on every rank."""
    if world_size == 1:
        return values
    sizes: list[paddle.Tensor] = []
    dist.all_gather(sizes, paddle.to_tensor([int(values.shape[0])], dtype="int64"))
    counts = [int(s.item()) for s in sizes]
    longest = max(counts)
    padded = values if counts[dist.get_rank()] == longest else paddle.concat(
        [values, paddle.zeros([longest - int(values.shape[0]), *values.shape[1:]], dtype=values.dtype)])
    gathered: list[paddle.Tensor] = []
    dist.all_gather(gathered, padded)
    return paddle.concat([g[:count] for g, count in zip(gathered, counts) if count])
