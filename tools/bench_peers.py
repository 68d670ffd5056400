"""Peers of `tools/bench.py lookups`, run by a Python that has torch and fbgemm-gpu-cpu (`make setup-peers`
makes one: .venv-peers), never by the package's own: torch's F.embedding / F.embedding_bag over the same
fp32 table, and FBGEMM's int8 inference TBE (IntNBitTableBatchedEmbeddingBagsCodegen, bounds checked as
paddle_edo's lookups are) over that table's rows quantized min-max with fp16 scale and bias, on the very
ids the Paddle candidates read.

  python tools/bench_peers.py DIR --repeats 11 --threads 2

DIR holds weight.npy [rows, dim] fp32, ids.npy [batch, fields] and bags_L<n>.npy [bags, n]; the median
milliseconds of each peer's consecutive calls are written to DIR/peers.json.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from fbgemm_gpu.split_embedding_configs import SparseType
from fbgemm_gpu.split_table_batched_embeddings_ops_common import BoundsCheckMode, EmbeddingLocation, PoolingMode
from fbgemm_gpu.split_table_batched_embeddings_ops_inference import IntNBitTableBatchedEmbeddingBagsCodegen


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir")
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    folder = Path(args.dir)
    weight_np = np.load(folder / "weight.npy")
    weight = torch.from_numpy(weight_np)
    ids = torch.from_numpy(np.load(folder / "ids.npy"))
    flat = ids.reshape(-1)
    tbe_sum, tbe_mean = int8_tbe(weight_np, PoolingMode.SUM), int8_tbe(weight_np, PoolingMode.MEAN)
    ms = {}
    with torch.inference_mode():
        one_each = torch.arange(flat.numel() + 1, dtype=torch.int64)
        ms["torch F.embedding fp32"] = median_ms(lambda: F.embedding(ids, weight), args.repeats)
        ms["FBGEMM int8 TBE, bags of 1"] = median_ms(lambda: tbe_sum(flat, one_each), args.repeats)
        for path in sorted(folder.glob("bags_L*.npy"), key=lambda p: int(p.stem.split("_L")[1])):
            length = int(path.stem.split("_L")[1])
            bags = torch.from_numpy(np.load(path))
            bag_flat = bags.reshape(-1)
            starts = torch.arange(0, bag_flat.numel(), length, dtype=torch.int64)
            bounds = torch.arange(0, bag_flat.numel() + 1, length, dtype=torch.int64)
            for mode, tbe in (("sum", tbe_sum), ("mean", tbe_mean)):
                ms[f"torch F.embedding_bag fp32 {mode}, L={length}"] = median_ms(
                    lambda m=mode: F.embedding_bag(bag_flat, weight, starts, mode=m), args.repeats)
                ms[f"FBGEMM int8 TBE {mode}, L={length}"] = median_ms(lambda t=tbe: t(bag_flat, bounds), args.repeats)
    (folder / "peers.json").write_text(json.dumps({"torch": torch.__version__, "ms": ms}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
