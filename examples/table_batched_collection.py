"""All of a model's tables in one op: an EmbeddingCollection of Criteo-sized tables trained with its fused
optimizer, beside the same tables as per-table layers trained by Paddle's optimizer.

  python examples/table_batched_collection.py --tables 26 --rows 100000 --steps 20

Both start from the same weights and see the same batches; the collection's Adagrad gives the same rows
bit for bit (the padding row aside, which Paddle's sparse gradients train though no lookup reads it),
in a fraction of the step time.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import paddle

from paddle_edo.nn import DenseEmbedding, EmbeddingCollection
from paddle_edo.optim import TableOptimizer


def tables(count: int, rows: int, dim: int) -> dict[str, DenseEmbedding]:
    paddle.seed(0)
    return {f"C{t + 1}": DenseEmbedding(rows, dim, padding_idx=0) for t in range(count)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", type=int, default=26)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    collection = EmbeddingCollection(tables(args.tables, args.rows, args.dim))
    collection.bind_optimizer(TableOptimizer("adagrad", 0.05))
    layers = tables(args.tables, args.rows, args.dim)
    optimizer = paddle.optimizer.Adagrad(0.05, parameters=[t.weight for t in layers.values()])
    rng = np.random.default_rng(0)
    seconds = {"collection": 0.0, "layers": 0.0}
    for _ in range(args.steps):
        ids = [paddle.to_tensor(rng.zipf(1.2, args.batch) % args.rows) for _ in range(args.tables)]
        grad = paddle.to_tensor(rng.standard_normal([args.batch, args.tables * args.dim]).astype("float32"))
        start = time.perf_counter()
        collection(ids).backward(grad)  # the rows are updated here: no gradient tensor, no optimizer step
        seconds["collection"] += time.perf_counter() - start
        start = time.perf_counter()
        paddle.concat([layer(x) for layer, x in zip(layers.values(), ids)], axis=1).backward(grad)
        optimizer.step()
        optimizer.clear_grad()
        seconds["layers"] += time.perf_counter() - start
    differs = max(float(np.abs(collection[name].weight.numpy()[1:] - layer.weight.numpy()[1:]).max())
                  for name, layer in layers.items())
    print(f"largest difference from the per-table layers after {args.steps} steps: {differs:g}")
    print("| tables | ms per step |")
    print("|---|---|")
    for name, total in seconds.items():
        print(f"| {name} | {total / args.steps * 1e3:.1f} |")


if __name__ == "__main__":
    main()
