"""The job of tests/distributed/test_bag_pooling.py, run under ``paddle.distributed.launch``: each rank trains
its slice of seeded global batches of bags through a ShardedCollection of row shares (pooled after the
exchange, at the owners, or as ``auto`` chooses), and saves its shares' rows, what the collection gave and
the bytes it sent, under ROOT/<pooling>-<layout>-<optimizer>.rank<R>.npz:

  python -m paddle.distributed.launch --nproc_per_node N tests/distributed/bags_job.py ROOT

``batches`` and ``whole_tables`` give the same batches and starting tables to the test, which trains them
in one process."""
import itertools
import os
import sys
from pathlib import Path

import numpy as np
import paddle
import paddle.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from paddle_edo.distributed.sharded import ShardedCollection  # noqa: E402
from paddle_edo.distributed.sharded.batches import slice_bounds  # noqa: E402
from paddle_edo.distributed.sharded.exchange import PairwiseExchange  # noqa: E402
from paddle_edo.nn import EmbeddingCollection, RowTrainer, build_embedding  # noqa: E402
from paddle_edo.nn.shards import row_shares  # noqa: E402
from paddle_edo.optim import TableOptimizer  # noqa: E402

ROWS, DIMS, BATCH, LENGTH, STEPS = 600, {"long": 8, "short": 4}, 24, 20, 3
POOLING = {"long": "sum", "short": "mean"}
POOLINGS, LAYOUTS, OPTIMIZERS = ("after_exchange", "at_owner", "auto"), ("padded", "offsets"), ("sgd", "adagrad")


def batches(step: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The global batch of a step, per table: padded ids [BATCH, LENGTH] (0 is padding) and, for the
    offsets layout, each bag's kept length. "long": bags of 20 ids drawn from 600 (few repeats); "short":
    bags of up to 3 ids from the 12 smallest (many)."""
    rng = np.random.default_rng(step)
    long_ids = rng.integers(1, ROWS, [BATCH, LENGTH])
    long_ids[:, LENGTH - 4:] *= rng.integers(0, 2, [BATCH, 4])  # some padding at the ends
    short_ids = np.zeros([BATCH, LENGTH], dtype=np.int64)
    short_ids[:, :3] = rng.integers(0, 12, [BATCH, 3])
    return {"long": long_ids.astype(np.int64), "short": short_ids}


def flat(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Padded bags as flat ids (padding dropped) and the bags' starts."""
    kept = [row[row != 0] for row in ids]
    return np.concatenate(kept).astype(np.int64), np.cumsum([0] + [k.size for k in kept[:-1]]).astype(np.int64)


def whole_tables() -> dict[str, paddle.nn.Layer]:
    paddle.seed(3)
    return {key: build_embedding({"type": "dense", "dim": dim}, ROWS, padding_idx=0) for key, dim in DIMS.items()}


def inputs(arrays: dict[str, np.ndarray], layout: str) -> tuple[list, list]:
    ids, offsets = [], []
    for key in DIMS:
        if layout == "padded":
            ids.append(paddle.to_tensor(arrays[key]))
            offsets.append(None)
        else:
            values, starts = flat(arrays[key])
            ids.append(paddle.to_tensor(values))
            offsets.append(paddle.to_tensor(starts))
    return ids, offsets


def upstream(step: int, rows: int) -> paddle.Tensor:
    """The gradient the model sends into the collection's output [rows, 12] (a fixed weighting)."""
    return paddle.to_tensor(np.random.default_rng(100 + step).normal(size=[rows, sum(DIMS.values())]).astype(np.float32))


def train(collection, optimizer, layout: str, rows: slice) -> list[np.ndarray]:
    """STEPS steps of the rows ``rows`` of each global batch; returns the outputs."""
    outputs = []
    for step in range(STEPS):
        arrays = {key: ids[rows] for key, ids in batches(step).items()}
        ids, offsets = inputs(arrays, layout)
        out = collection(ids, offsets=offsets)
        (out * upstream(step, BATCH)[rows]).sum().backward()
        optimizer.step()
        optimizer.clear_grad()
        outputs.append(out.numpy())
    return outputs


def optimizer_for(name: str, tables: dict):
    if name == "sgd":
        return paddle.optimizer.SGD(0.5, parameters=[t.weight for t in tables.values()])
    return RowTrainer(TableOptimizer("adagrad", 0.5), tables)


def main() -> None:
    root = Path(sys.argv[1])
    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    exchange = PairwiseExchange(rank, world)
    start, stop = slice_bounds(BATCH, rank, world)
    for pooling, layout, name in itertools.product(POOLINGS, LAYOUTS, OPTIMIZERS):
        paddle.seed(3)
        with row_shares(rank, world, 0):
            shares = {key: build_embedding({"type": "dense", "dim": dim}, ROWS, padding_idx=0)
                      for key, dim in DIMS.items()}
        collection = ShardedCollection(shares, POOLING, exchange)
        collection.bag_pooling = pooling
        optimizer = optimizer_for(name, shares)
        sent = exchange.bytes_sent
        outputs = train(collection, optimizer, layout, slice(start, stop))
        np.savez(root / f"{pooling}-{layout}-{name}.rank{rank}.npz", bytes_sent=np.array(exchange.bytes_sent - sent),
                 **{f"out{step}": out for step, out in enumerate(outputs)},
                 **{f"table.{key}": table.weight.numpy() for key, table in shares.items()})
    print("paddle_edo: finished as bag pooling test job", flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
