"""Sharded tables across processes: each rank holds the rows whose id % N is its rank, looks the batch's
rows up from their owners, and sends their gradients back; a hash table (whose rows are not ids) lives whole
on one rank, which looks up what every rank asks; the dense layer is data-parallel.

  python examples/sharded_tables.py [--ranks 2] [--rows 200000] [--steps 30]

Run as it is, it starts itself under ``paddle.distributed.launch``; each rank prints what it holds, and rank
0 checks that the job trained the weights one process trains on the same batches.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def build(rows: int, rank: int, world: int):
    import paddle

    from paddle_edo.distributed.sharded import choose_exchange, shard_collections
    from paddle_edo.nn import EmbeddingCollection, build_embedding
    from paddle_edo.nn.shards import row_shares

    class Model(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            with row_shares(rank, world, min_rows=1000):  # tables of 1000 rows or more: shares
                tables = {"user": build_embedding({"type": "dense", "dim": 16}, rows, padding_idx=0),
                          "item": build_embedding({"type": "dense", "dim": 16}, rows // 2, padding_idx=0),
                          "hour": build_embedding({"type": "dense", "dim": 16}, 24),   # small: whole on every rank
                          "query": build_embedding({"type": "hash", "dim": 16, "num_buckets": 5000}, rows)}
            self.tables = EmbeddingCollection(tables, {"user": "none", "item": "mean", "hour": "none",
                                                       "query": "none"})
            self.head = paddle.nn.Linear(64, 1)

        def forward(self, user, items, hour, query):
            return self.head(self.tables([user, items, hour, query])).squeeze(-1)

    paddle.seed(0)
    model = Model()
    if world > 1:
        shard_collections(model, choose_exchange("auto", rank, world, "cpu"))
    return model


def train(rows: int, steps: int, rank: int, world: int) -> dict[str, np.ndarray]:
    import paddle
    import paddle.nn.functional as F

    from paddle_edo.distributed.sharded import GradientSum, sharded_parameters
    from paddle_edo.distributed.sharded.batches import slice_bounds

    model = build(rows, rank, world)
    sharded = sharded_parameters(model)
    gradients = GradientSum([p for p in model.parameters() if id(p) not in sharded], world)
    optimizer = paddle.optimizer.Adam(0.01, parameters=model.parameters(), lazy_mode=True)
    data = np.random.default_rng(1)
    batch = 512
    for step in range(steps):
        users = np.minimum(data.zipf(1.2, batch), rows - 1)
        items = np.minimum(data.zipf(1.2, (batch, 5)), rows // 2 - 1) * (data.random((batch, 5)) < 0.8)
        hours = data.integers(0, 24, batch)
        queries = data.integers(0, rows, batch)
        labels = ((users % 3 == 0) ^ (hours < 12)).astype("float32")
        start, stop = slice_bounds(batch, rank, world)      # this rank's slice of the global batch
        logits = model(*(paddle.to_tensor(x[start:stop]) for x in (users, items, hours, queries)))
        loss = F.binary_cross_entropy_with_logits(logits, paddle.to_tensor(labels[start:stop]))
        loss = loss * ((stop - start) / batch)              # its share of the global batch's mean loss
        loss.backward()
        total = gradients(float(loss))                      # the dense layers' gradients summed over ranks
        optimizer.step()
        optimizer.clear_grad()
        if rank == 0 and step % 10 == 0:
            print(f"step {step}: loss {total:.4f}", flush=True)
    held = {key: value.numpy() for key, value in model.state_dict().items() if key.startswith("tables.")}
    return held | {"head": model.head.weight.numpy()}   # a rank holds no state of a table on another rank


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--out", default=None, help="(set by the launch) where ranks leave their weights")
    args = parser.parse_args()
    if "PADDLE_TRAINER_ENDPOINTS" not in os.environ:        # not launched yet: launch the ranks
        with tempfile.TemporaryDirectory() as out:
            command = [sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(args.ranks),
                       "--log_dir", str(Path(out) / "log"), __file__, "--rows", str(args.rows), "--steps",
                       str(args.steps), "--out", out]
            done = subprocess.run(command, env={**os.environ, "GLOG_minloglevel": "2"})
            for log in sorted((Path(out) / "log").glob("workerlog.*")):
                print("".join(line for line in log.read_text().splitlines(keepends=True)
                              if not line.startswith(("I1", "W1", "LAUNCH"))), end="")
            return done.returncode
    import paddle.distributed as dist

    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    weights = train(args.rows, args.steps, rank, world)
    query = "the whole query table" if any(k.startswith("tables.query") for k in weights) else "no query rows"
    print(f"rank {rank} of {world}: holds user rows {weights['tables.user.weight'].shape[0]:,} of {args.rows:,}, "
          f"item rows {weights['tables.item.weight'].shape[0]:,} of {args.rows // 2:,}, hour rows "
          f"{weights['tables.hour.weight'].shape[0]} (whole), {query}", flush=True)
    np.savez(Path(args.out) / f"rank{rank}.npz", **weights)
    dist.barrier()
    if rank == 0:
        alone = train(args.rows, args.steps, 0, 1)           # one process, the same batches
        shares = [dict(np.load(Path(args.out) / f"rank{r}.npz")) for r in range(world)]
        worst = 0.0
        for key, reference in alone.items():
            if key.startswith(("tables.user", "tables.item")):   # rows by id modulo the ranks
                joined = np.empty_like(reference)
                for r in range(world):
                    joined[r::world] = shares[r][key]
            else:                                             # whole: on every rank, or on its owner
                joined = next(share[key] for share in shares if key in share)
            worst = max(worst, float(np.abs(joined - reference).max() / np.abs(reference).max()))
        print(f"largest difference from one process, relative to the weights: {worst:.1e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
