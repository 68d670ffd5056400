"""Pooled lookups: EmbeddingBag sums, averages or takes the max of a bag of ids per sample, like
``torch.nn.EmbeddingBag``, over any paddle_edo table (here an int8 packed one too).

    python examples/embedding_bag.py [--rows 100000] [--bag 20] [--batch 4096]

Shows both input forms (padded bags, and flat ids with offsets), per-id weights, that the gradient
reaching the table is sparse (each row once, in increasing order), and times a pooled lookup against
``paddle.nn.Embedding`` followed by a sum.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import paddle

from paddle_edo.data import zipf_ids
from paddle_edo.nn import EmbeddingBag, QuantizedEmbedding
from paddle_edo.runtime import set_num_threads


def median_ms(function, repeats: int = 7) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--bag", type=int, default=20, help="ids per bag")
    parser.add_argument("--batch", type=int, default=4096)
    args = parser.parse_args(argv)
    set_num_threads(2)
    rng = np.random.default_rng(0)
    padded = zipf_ids(args.rows, (args.batch, args.bag), 1.05, rng)
    padded[:, args.bag // 2:][rng.random((args.batch, args.bag - args.bag // 2)) < 0.5] = 0  # shorter bags
    bag = EmbeddingBag(args.rows, args.dim, "sum", padding_idx=0)

    # padded bags [batch, L], or flat ids with the start of each bag (as torch takes them): the same sums
    lengths = (padded != 0).sum(axis=1)
    flat = padded[padded != 0]
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    with paddle.no_grad():
        from_padded = bag(paddle.to_tensor(padded)).numpy()
        from_offsets = bag(paddle.to_tensor(flat), paddle.to_tensor(offsets)).numpy()
    print(f"padded and offsets forms agree: largest difference {np.abs(from_padded - from_offsets).max():.2g}")

    # training: the table's gradient holds each row of the batch once, in increasing order
    weights = paddle.to_tensor(rng.random(padded.shape).astype(np.float32))
    bag(paddle.to_tensor(padded), per_sample_weights=weights).sum().backward()
    gradient = bag.table.weight._grad_ivar()
    rows = np.asarray(gradient.rows())
    print(f"gradient: sparse {gradient.is_selected_rows()}, {len(rows):,} rows for {int(lengths.sum()):,} lookups, "
          f"increasing {bool(np.all(np.diff(rows) > 0))}")

    # speed: a pooled lookup against nn.Embedding + sum, and an int8 table pooled the same way
    ids = paddle.to_tensor(padded)
    plain = paddle.nn.Embedding(args.rows, args.dim, padding_idx=0)
    packed = EmbeddingBag(args.rows, args.dim, "sum", padding_idx=0,
                          table=QuantizedEmbedding.from_embedding(bag.table, "int8"))
    with paddle.no_grad():
        times = {"nn.Embedding + sum": median_ms(lambda: plain(ids).sum(axis=1).numpy()),
                 "EmbeddingBag fp32": median_ms(lambda: bag(ids).numpy()),
                 "EmbeddingBag int8": median_ms(lambda: packed(ids).numpy())}
    print(f"{args.batch} bags of up to {args.bag} ids, {args.rows:,} x {args.dim} table:")
    for name, ms in times.items():
        print(f"  {name}: {ms:.1f} ms ({times['nn.Embedding + sum'] / ms:.1f}x)")
    return {"difference": float(np.abs(from_padded - from_offsets).max()), "gradient_rows": len(rows), "ms": times}


if __name__ == "__main__":
    main()
