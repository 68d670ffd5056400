"""Normal initial values for large fp32 tables on the CPU, drawn in parallel: Paddle's gaussian op draws
one value at a time in one thread (std::normal_distribution, measured 19 ns a value: 1.3 s for four
1e6 x 16 tables, a fifth of a one-epoch run of them)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import paddle

from ..host_memory import host_view
from ..runtime import cpu_threads

STREAM_VALUES = 1 << 20   # values drawn from one seeded stream: the values do not depend on the thread count


def fill_normal(weight: paddle.Tensor, std: float) -> None:
    """Overwrite a float32 CPU tensor with draws of N(0, std^2): numpy's ziggurat sampler, one stream per
    STREAM_VALUES values, the streams spawned from one seed drawn from Paddle's generator (so
    ``paddle.seed`` makes the values reproducible), written in place by the CPU threads."""
    values = host_view(weight).reshape(-1)
    seed = int(paddle.randint(0, 2 ** 31 - 1, [1]).item())
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
