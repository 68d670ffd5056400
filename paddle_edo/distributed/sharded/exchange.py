"""The exchange of a sharded step: every rank sends each other rank a 1-D tensor (ids, rows or row
gradients) and receives one from each, the sizes known to the receiver beforehand. One interface, three
implementations chosen at run time (``choose_exchange``):

- ``PairwiseExchange`` (gloo, the CPU backend, which has no all-to-all): blocking ``send`` / ``recv`` in
  rounds of a round-robin tournament (the circle method: N - 1 rounds for even N, N for odd), each pair
  once, the lower rank sending first and the higher receiving first, so that no two ranks wait on each
  other, each pair in a group of its own. Paddle's gloo ``send`` returns only once the peer has received (an ``isend`` to a rank that is
  itself sending times out), which rules out the shifted schedule r -> r + k with both directions posted at
  once.
- ``GatheredExchange``: one ``all_gather`` of every rank's parts, padded to the longest; each rank keeps
  what was meant for it. N times the bytes, one call: measured against the pairwise exchange by
  ``tools/bench.py sharded``.
- ``AllToAllExchange`` (NCCL on a GPU): ``alltoall_single`` with the split sizes.

A world of one process (``LocalExchange``) returns what it was given. Every implementation counts the bytes
it sends to other ranks (``bytes_sent``), which the bench compares with the formula."""
from __future__ import annotations

import itertools
from typing import Callable, Sequence

import paddle
import paddle.distributed as dist

from ...errors import EdoValueError

EXCHANGES = ("auto", "pairwise", "all_gather", "all_to_all")


class Exchange:
    """Sends ``parts[d]`` to rank d and returns what each rank s sent this one (``receive_sizes[s]``
    elements each), for 1-D tensors of one dtype; the part for this rank is returned as it is."""

    name = ""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size
        self.bytes_sent = 0  # to other ranks, as each implementation sends them

    def exchange(self, parts: Sequence[paddle.Tensor], receive_sizes: Sequence[int]) -> list[paddle.Tensor]:
        if len(parts) != self.world_size or len(receive_sizes) != self.world_size:
            raise EdoValueError(f"{type(self).__name__}: {len(parts)} parts and {len(receive_sizes)} sizes for "
                                f"{self.world_size} ranks")
        return self._exchange(list(parts), [int(size) for size in receive_sizes])

    def _count_parts(self, parts: list[paddle.Tensor]) -> None:
        """Count the parts meant for other ranks as sent (what point-to-point and all-to-all send)."""
        self.bytes_sent += sum(int(part.size) * part.element_size() for d, part in enumerate(parts) if d != self.rank)

    def _exchange(self, parts: list[paddle.Tensor], receive_sizes: list[int]) -> list[paddle.Tensor]:
        raise NotImplementedError


class LocalExchange(Exchange):
    name = "local"

    def __init__(self) -> None:
        super().__init__(0, 1)

    def _exchange(self, parts, receive_sizes):
        return parts


def tournament_rounds(world_size: int) -> list[list[tuple[int, int]]]:
    """The pairs (low, high) of each round of a round-robin tournament over ``world_size`` ranks: every
    pair meets once, no rank plays twice in a round."""
    players = list(range(world_size)) + ([None] if world_size % 2 else [])
    count = len(players)
    rounds = []
    for _ in range(count - 1):
        pairs = [(players[i], players[count - 1 - i]) for i in range(count // 2)]
        rounds.append([tuple(sorted(p)) for p in pairs if None not in p])
        players = [players[0], players[-1], *players[1:-1]]
    return rounds


class PairwiseExchange(Exchange):
    name = "pairwise"

    def __init__(self, rank: int, world_size: int) -> None:
        super().__init__(rank, world_size)
        # One group per pair: gloo matches a send with a receive by the group's count of operations, which
        # ranks that sit a round out would put out of step in a group of all ranks. Every rank creates every
        # group, in the same order (new_group is collective).
        groups = {pair: dist.new_group(list(pair)) for pair in itertools.combinations(range(world_size), 2)}
        self.partners = []  # (this rank's partner, their group) in each round it plays
        for pairs in tournament_rounds(world_size):
            for low, high in pairs:
                if rank in (low, high):
                    self.partners.append((high if rank == low else low, groups[low, high]))

    def _exchange(self, parts, receive_sizes):
        self._count_parts(parts)
        received: list[paddle.Tensor | None] = [None] * self.world_size
        received[self.rank] = parts[self.rank]
        for peer, group in self.partners:
            buffer = paddle.empty([receive_sizes[peer]], dtype=parts[peer].dtype)
            outgoing = parts[peer]
            if self.rank < peer:
                _send(outgoing, peer, group)
                _receive(buffer, peer, group)
            else:
                _receive(buffer, peer, group)
                _send(outgoing, peer, group)
            received[peer] = buffer
        return received


def _send(tensor: paddle.Tensor, peer: int, group) -> None:
    if tensor.size:  # both sides know the size: an empty part is neither sent nor awaited
        dist.send(tensor, peer, group=group)


def _receive(buffer: paddle.Tensor, peer: int, group) -> None:
    if buffer.size:
        dist.recv(buffer, peer, group=group)


class GatheredExchange(Exchange):
    name = "all_gather"

    def _exchange(self, parts, receive_sizes):
        # every rank needs every part's size to cut the gathered rows: an all_gather of the sizes first
        sizes = paddle.to_tensor([int(part.size) for part in parts], dtype="int64")
        all_sizes: list[paddle.Tensor] = []
        dist.all_gather(all_sizes, sizes)
        table = paddle.stack(all_sizes).numpy()            # [source, destination]
        longest = int(table.sum(axis=1).max())
        joined = joined_flat(parts)
        padded = joined_flat([joined, paddle.zeros([longest - int(joined.size)], dtype=joined.dtype)])
        gathered: list[paddle.Tensor] = []
        dist.all_gather(gathered, padded)
        received = []
        for source in range(self.world_size):
            start = int(table[source, :self.rank].sum())
            received.append(gathered[source][start:start + int(table[source, self.rank])])
        self.bytes_sent += (self.world_size - 1) * longest * padded.element_size()  # every rank gets all of it
        return received


class AllToAllExchange(Exchange):
    """``all_to_all``: a collective with ``paddle.distributed.alltoall_single``'s signature (``out, in,
    in_split_sizes, out_split_sizes``), that one by default."""

    name = "all_to_all"

    def __init__(self, rank: int, world_size: int,
                 all_to_all: Callable[[paddle.Tensor, paddle.Tensor, list[int], list[int]], object] | None = None
                 ) -> None:
        super().__init__(rank, world_size)
        self.all_to_all = all_to_all or dist.alltoall_single

    def _exchange(self, parts, receive_sizes):
        self._count_parts(parts)
        joined = joined_flat(parts)
        out = paddle.empty([sum(receive_sizes)], dtype=joined.dtype)
        self.all_to_all(out, joined, [int(p.size) for p in parts], receive_sizes)
        bounds = [0, *itertools.accumulate(receive_sizes)]
        return [out[bounds[i]:bounds[i + 1]] for i in range(self.world_size)]


def joined_flat(parts: Sequence[paddle.Tensor]) -> paddle.Tensor:
    """Parts flattened and joined end to end, empty ones included (Paddle's concat refuses to join only
    empty tensors)."""
    kept = [p.reshape([-1]) for p in parts if int(p.size)]
    if not kept:
        return paddle.zeros([0], dtype=parts[0].dtype)
    return kept[0] if len(kept) == 1 else paddle.concat(kept)


def choose_exchange(kind: str, rank: int, world_size: int, device: str) -> Exchange:
    """The exchange ``distributed.exchange`` names; ``auto``: all-to-all on a GPU (NCCL), pairwise on the
    CPU (gloo has no all-to-all, and its all_gather measured slower at every size: docs/benchmarks.md)."""
    if kind not in EXCHANGES:
        raise EdoValueError(f"distributed.exchange = {kind!r}; expected one of {', '.join(map(repr, EXCHANGES))}")
    if world_size == 1:
        return LocalExchange()
    if kind == "auto":
        kind = "all_to_all" if device != "cpu" else "pairwise"
    if kind == "all_to_all" and device == "cpu":
        raise EdoValueError("distributed.exchange = 'all_to_all' needs NCCL (a GPU): gloo, the CPU backend, has no "
                            "all-to-all; use 'pairwise' or 'all_gather'")
    return {"pairwise": PairwiseExchange, "all_gather": GatheredExchange,
            "all_to_all": AllToAllExchange}[kind](rank, world_size)
