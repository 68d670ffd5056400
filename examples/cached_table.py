"""A table larger than the device: a CachedEmbedding keeps the full table on the host (in RAM, or in a
memory-mapped file) and a few rows at a time on the device, and trains exactly as the resident table.

    python examples/cached_table.py [--rows 1000000] [--cache-ratio 0.05] [--steps 200] [--mmap DIR]

Trains a click model over Zipf(1.05) ids on a cached table and on a resident one side by side (same
seeds), checks that both end with the same rows, and prints the hit rate and where the bytes are.
"""
from __future__ import annotations

import argparse

import numpy as np
import paddle

from paddle_edo.data import zipf_ids
from paddle_edo.nn import CachedEmbedding, DenseEmbedding, bind_optimizer
from paddle_edo.runtime import seed_everything, set_num_threads


def train(table: paddle.nn.Layer, batches: list[np.ndarray], labels: list[np.ndarray]) -> paddle.nn.Layer:
    """A logistic model on the mean of the table's rows; lazy Adam, as for any sparse table."""
    seed_everything(0)
    head = paddle.nn.Linear(table.embedding_dim, 1)
    optimizer = paddle.optimizer.Adam(0.01, parameters=[*table.parameters(), *head.parameters()], lazy_mode=True)
    bind_optimizer(table, optimizer)  # cached rows carry their Adam moments to and from the host
    for ids, label in zip(batches, labels):
        logit = head(table(paddle.to_tensor(ids)).mean(axis=1)).squeeze(-1)
        loss = paddle.nn.functional.binary_cross_entropy_with_logits(logit, paddle.to_tensor(label))
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
    return table


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--cache-ratio", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--mmap", default=None, help="a folder: keep the host table in a memory-mapped file there")
    args = parser.parse_args(argv)
    set_num_threads(2)
    rng = np.random.default_rng(0)
    batches = [zipf_ids(args.rows, (512, 8), 1.05, rng) for _ in range(args.steps)]
    labels = [(ids[:, 0] % 2).astype(np.float32) for ids in batches]  # a rule the rows can learn
    host = {"host": "mmap", "path": args.mmap} if args.mmap else {}
    cached = CachedEmbedding(args.rows, args.dim, cache_ratio=args.cache_ratio, policy="lfu", **host)
    resident = DenseEmbedding(args.rows, args.dim)
    resident.weight.set_value(np.ascontiguousarray(cached.host.column("weight")))  # the same start
    train(cached, batches, labels)
    train(resident, batches, labels)
    full = cached.to_dense().weight.numpy()
    difference = float(np.abs(full - resident.weight.numpy()).max())
    statistics = cached.statistics()
    device_bytes = cached.cache_rows * args.dim * 4
    print(f"table: {args.rows:,} rows x {args.dim}; on the device: {cached.cache_rows:,} rows ({device_bytes:,} B), "
          f"on the host: {cached.host_bytes():,} B{' (memory-mapped)' if args.mmap else ''}")
    print(f"hit rate {statistics['hit_rate']:.3f}, {statistics['misses']:,} misses, {statistics['evictions']:,} "
          f"evictions in {args.steps} steps")
    print(f"largest difference from the resident table after training: {difference:.3g}")
    return {"hit_rate": statistics["hit_rate"], "difference": difference, "device_bytes": device_bytes,
            "host_bytes": cached.host_bytes()}


if __name__ == "__main__":
    main()
