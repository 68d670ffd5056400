"""Peers of `tools/bench.py lookups`, run by a Python that has torch and fbgemm-gpu-cpu (`make setup-peers`
makes one: .venv-peers), never by the package's own: torch's F.embedding / F.embedding_bag over the same
fp32 table, and FBGEMM's int8 inference TBE (IntNBitTableBatchedEmbeddingBagsCodegen, bounds checked as
paddle_edo's lookups are) over that table's rows quantized min-max with fp16 scale and bias, on the very
ids the Paddle candidates read.

  python tools/bench_peers.py DIR --threads 2 --priming-s 0.02

DIR holds weight.npy [rows, dim] fp32, ids.npy [batch, fields] and bags_L<n>.npy [bags, n]. The process
stays up as a server of timed calls, so that the bench times each peer call by call in its rounds beside
Paddle's candidates (the same machine load): it first writes one JSON line, {"torch": version,
"candidates": [names]}; then for each candidate name read from a line of stdin it makes untimed calls
(one, and more until --priming-s has passed: paddle_edo.benchmark.side_by_side's priming) and one timed
call, waits until its OpenMP workers stop spinning, and writes the timed call's milliseconds on a line.
It ends at the end of stdin.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from fbgemm_gpu.split_embedding_configs import SparseType
from fbgemm_gpu.split_table_batched_embeddings_ops_common import BoundsCheckMode, EmbeddingLocation, PoolingMode
from fbgemm_gpu.split_table_batched_embeddings_ops_inference import IntNBitTableBatchedEmbeddingBagsCodegen

SPIN_S = 0.02  # torch's GNU OpenMP workers spin about 10 ms after a parallel region (measured) before they sleep


def int8_tbe(weight: np.ndarray, pooling: PoolingMode) -> IntNBitTableBatchedEmbeddingBagsCodegen:
    """FBGEMM's int8 table of ``weight``: each row min-max to 255 levels, fp16 scale and bias (stored
    before the codes, FBGEMM's CPU layout), fp32 output."""
    rows, dim = weight.shape
    tbe = IntNBitTableBatchedEmbeddingBagsCodegen([("", rows, dim, SparseType.INT8, EmbeddingLocation.HOST)],
                                                  device="cpu", pooling_mode=pooling, output_dtype=SparseType.FP32,
                                                  bounds_check_mode=BoundsCheckMode.FATAL)
    tbe.initialize_weights()
    low, high = weight.min(axis=1, keepdims=True), weight.max(axis=1, keepdims=True)
    scale = ((high - low) / 255).astype(np.float16)
    bias = low.astype(np.float16)
    safe = np.where(scale > 0, scale, 1).astype(np.float32)
    codes = np.clip(np.rint((weight - bias.astype(np.float32)) / safe), 0, 255).astype(np.uint8)
    params = np.concatenate([scale, bias], axis=1).view(np.uint8)
    tbe.assign_embedding_weights([(torch.from_numpy(codes), torch.from_numpy(params.copy()))])
    return tbe


def median_ms(fn, repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times))


def candidates(folder: Path) -> dict[str, Callable[[], object]]:
    """The peers' calls over DIR's table and ids, by the names the bench reports them under."""
    weight_np = np.load(folder / "weight.npy")
    weight = torch.from_numpy(weight_np)
    ids = torch.from_numpy(np.load(folder / "ids.npy"))
    flat = ids.reshape(-1)
    tbe_sum, tbe_mean = int8_tbe(weight_np, PoolingMode.SUM), int8_tbe(weight_np, PoolingMode.MEAN)
    one_each = torch.arange(flat.numel() + 1, dtype=torch.int64)
    calls = {"torch F.embedding fp32": lambda: F.embedding(ids, weight),
             "FBGEMM int8 TBE, bags of 1": lambda: tbe_sum(flat, one_each)}
    for path in sorted(folder.glob("bags_L*.npy"), key=lambda p: int(p.stem.split("_L")[1])):
        length = int(path.stem.split("_L")[1])
        bag_flat = torch.from_numpy(np.load(path)).reshape(-1)
        starts = torch.arange(0, bag_flat.numel(), length, dtype=torch.int64)
        bounds = torch.arange(0, bag_flat.numel() + 1, length, dtype=torch.int64)
        for mode, tbe in (("sum", tbe_sum), ("mean", tbe_mean)):
            calls[f"torch F.embedding_bag fp32 {mode}, L={length}"] = (
                lambda m=mode, f=bag_flat, s=starts: F.embedding_bag(f, weight, s, mode=m))
            calls[f"FBGEMM int8 TBE {mode}, L={length}"] = lambda t=tbe, f=bag_flat, b=bounds: t(f, b)
    return calls


def serve(calls: dict[str, Callable[[], object]], priming_s: float, requests, replies) -> None:
    """Answer each requested name with the milliseconds of one call, made right after untimed ones."""
    replies.write(json.dumps({"torch": torch.__version__, "candidates": list(calls)}) + "\n")
    replies.flush()
    for line in requests:
        call = calls[line.strip()]
        primed_until = time.perf_counter() + priming_s
        call()
        while time.perf_counter() < primed_until:
            call()
        start = time.perf_counter()
        call()
        ms = (time.perf_counter() - start) * 1e3
        time.sleep(SPIN_S)
        replies.write(f"{ms}\n")
        replies.flush()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--priming-s", type=float, default=0.02)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with torch.inference_mode():
        serve(candidates(Path(args.dir)), args.priming_s, sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
