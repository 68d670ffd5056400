"""The job of tests/distributed/test_exchange.py, run under ``paddle.distributed.launch``: every rank sends
every other rank seeded parts (``part``) through each exchange and saves what it received and the bytes it
counted as sent, under ROOT/<exchange>.rank<R>.npz:

  python -m paddle.distributed.launch --nproc_per_node N tests/distributed/exchange_job.py ROOT

The all-to-all exchange runs over gloo with a send/recv all-to-all of ``alltoall_single``'s signature in
place of NCCL's, which no CPU has: its own work (joining the parts, cutting what comes back, counting bytes)
runs as on a GPU."""
import itertools
import os
import sys
from pathlib import Path

import numpy as np
import paddle
import paddle.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from paddle_edo.distributed.sharded.exchange import (AllToAllExchange, GatheredExchange,  # noqa: E402
                                                     PairwiseExchange, joined_flat)

DTYPES = ("int64", "float32")
MESSAGES = 4  # per dtype; some parts are empty


def part(message: int, dtype: str, source: int, destination: int) -> np.ndarray:
    """What ``source`` sends ``destination`` in a message: 0 to 40 seeded values."""
    rng = np.random.default_rng([message, DTYPES.index(dtype), source, destination])
    size = int(rng.integers(0, 41)) if message else 0 if (source + destination) % 2 else 7
    return (rng.integers(-10**12, 10**12, size) if dtype == "int64" else rng.standard_normal(size)).astype(dtype)


def all_to_all_over(pairwise: PairwiseExchange):
    """``alltoall_single(out, in, in_split_sizes, out_split_sizes)`` built on gloo's send and recv."""
    def all_to_all_single(out, tensor, in_split_sizes, out_split_sizes):
        bounds = [0, *itertools.accumulate(in_split_sizes)]
        received = pairwise.exchange([tensor[bounds[d]:bounds[d + 1]] for d in range(pairwise.world_size)],
                                     out_split_sizes)
        paddle.assign(joined_flat(received), output=out)
    return all_to_all_single


def main() -> None:
    root = Path(sys.argv[1])
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    exchanges = {"pairwise": PairwiseExchange(rank, world), "all_gather": GatheredExchange(rank, world)}
    exchanges["all_to_all"] = AllToAllExchange(rank, world, all_to_all=all_to_all_over(PairwiseExchange(rank, world)))
    for name, exchange in exchanges.items():
        saved = {}
        for dtype, message in itertools.product(DTYPES, range(MESSAGES)):
            parts = [paddle.to_tensor(part(message, dtype, rank, d)) for d in range(world)]
            sizes = [part(message, dtype, s, rank).size for s in range(world)]
            for source, got in enumerate(exchange.exchange(parts, sizes)):
                saved[f"{dtype}.{message}.{source}"] = got.numpy()
        saved["bytes_sent"] = np.array(exchange.bytes_sent)
        np.savez(root / f"{name}.rank{rank}.npz", **saved)
    print("paddle_edo: finished as exchange test job", flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
