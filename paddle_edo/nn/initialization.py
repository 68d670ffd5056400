"""Normal initial values for large fp32 tables on the CPU, drawn in parallel: Paddle's gaussian op draws
one value at a time in one thread (std::normal_distribution, measured 19 ns a value: 1.3 s for four
1e6 x 16 tables, a fifth of a one-epoch run of them)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import paddle

from ..host_memory import host_view
from ..runtime import cpu_threads
from .shards import RowShare, share_being_built

STREAM_VALUES = 1 << 20   # values drawn from one seeded stream: the values do not depend on the thread count


def fill_normal(weight: paddle.Tensor, std: float) -> None:
    """Overwrite a float32 CPU tensor with draws of N(0, std^2): numpy's ziggurat sampler, one stream per
    STREAM_VALUES values, the streams spawned from one seed drawn from Paddle's generator (so
    ``paddle.seed`` makes the values reproducible), written in place by the CPU threads. A rank's share of a
    table (``shards.building_share``) takes the rows the whole table would have drawn."""
    values = host_view(weight).reshape(-1)
    seed = int(paddle.randint(0, 2 ** 31 - 1, [1]).item())
    share = share_being_built()
    if share is not None and weight.shape[0] == share.held_rows:
        _fill_share(values.reshape(weight.shape), seed, std, share)
        return
    streams = np.random.SeedSequence(seed).spawn(-(-values.size // STREAM_VALUES))
    scale = np.float32(std)

    def draw(index: int) -> None:
        part = values[index * STREAM_VALUES:(index + 1) * STREAM_VALUES]
        np.random.Generator(np.random.PCG64(streams[index])).standard_normal(out=part, dtype=np.float32)
        part *= scale

    threads = min(cpu_threads(), len(streams))
    if threads <= 1:
        for index in range(len(streams)):
            draw(index)
        return
    with ThreadPoolExecutor(threads) as pool:   # the sampler runs without the GIL
        list(pool.map(draw, range(len(streams))))


def _fill_share(rows: np.ndarray, seed: int, std: float, share: RowShare) -> None:
    """The held rows ([held, dim]) of the values ``fill_normal`` draws for the whole table: each stream is
    drawn in turn and the rank's rows are kept (every rank draws the whole table once, holding one stream)."""
    dim = rows.shape[1]
    total = share.rows * dim
    streams = np.random.SeedSequence(seed).spawn(-(-total // STREAM_VALUES))
    flat_rows = rows.reshape(-1)
    for index, stream in enumerate(streams):
        start, stop = index * STREAM_VALUES, min((index + 1) * STREAM_VALUES, total)
        part = np.empty(stop - start, dtype=np.float32)
        np.random.Generator(np.random.PCG64(stream)).standard_normal(out=part, dtype=np.float32)
        part *= np.float32(std)
        first, last = start // dim, (stop - 1) // dim            # global rows this stream touches
        low = -(-(first - share.rank) // share.world_size)       # held rows among them
        high = (last - share.rank) // share.world_size
        if high < low:
            continue
        local = np.arange(max(low, 0), high + 1, dtype=np.int64)
        columns = np.arange(dim, dtype=np.int64)
        sources = (share.global_ids(local) * dim)[:, None] + columns  # flat global positions
        inside = (sources >= start) & (sources < stop)
        targets = (local * dim)[:, None] + columns
        flat_rows[targets[inside]] = part[sources[inside] - start]
