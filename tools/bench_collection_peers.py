"""Peers of the table-batched training step, run by a Python that has torch and fbgemm-gpu-cpu
(`make setup-peers` makes one: .venv-peers), never by the package's own: FBGEMM's training TBE
(SplitTableBatchedEmbeddingBagsCodegen on the CPU, one fp32 table per field, bags of one id, the optimizer
fused into the backward) with exact rowwise Adagrad, exact Adagrad and exact SGD; a torch DeepFM step over
one sparse nn.Embedding per field (SparseAdam for the tables, Adam for the dense part); and the same DeepFM
with its two table sets as two FBGEMM TBEs (exact rowwise Adagrad fused).

  python tools/bench_collection_peers.py DIR --repeats 11 --threads 2

DIR holds tables.json {"rows": [...], "dim", "batch", "dense", "hidden": [...]}, ids.npy [batch, tables]
int64 (column t below rows[t]), dense.npy [batch, dense] float32 and labels.npy [batch] float32; optionally
tables_100.json and ids_100.npy, a second table set over the same dense features and labels. The median
milliseconds per step are written to DIR/collection_peers.json.

FBGEMM's tables need a dim that is a multiple of 4, so the DeepFM's first-order tables are dim-4 TBEs of
which column 0 is read.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import fbgemm_gpu
import numpy as np
import torch
import torch.nn.functional as F
from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
from fbgemm_gpu.split_table_batched_embeddings_ops_common import (BoundsCheckMode, ComputeDevice, EmbeddingLocation,
                                                                  PoolingMode)
from fbgemm_gpu.split_table_batched_embeddings_ops_training import SplitTableBatchedEmbeddingBagsCodegen
from torch import Tensor, nn

from bench_peers import median_ms  # the lookup peers' timer (this script runs from tools/, beside it)

TBE_OPTIMIZERS = (("rowwise Adagrad", EmbOptimType.EXACT_ROWWISE_ADAGRAD), ("Adagrad", EmbOptimType.EXACT_ADAGRAD),
                  ("SGD", EmbOptimType.EXACT_SGD))  # the optimizers FBGEMM's CPU TBE accepts, EMA aside
OPTIONAL_SET = ("tables_100.json", "ids_100.npy")
WARMUP = 3  # untimed steps before the timed ones
FIRST_ORDER_DIM = 4  # FBGEMM's smallest dim


def make_tbe(rows: list[int], dim: int, optimizer: EmbOptimType) -> SplitTableBatchedEmbeddingBagsCodegen:
    """One fp32 host table of ``dim`` per entry of ``rows``, sum-pooled, ``optimizer`` fused into the backward
    (lr 0.01, eps 1e-8), bounds checked; weights uniform in +-0.01."""
    tbe = SplitTableBatchedEmbeddingBagsCodegen(
        [(r, dim, EmbeddingLocation.HOST, ComputeDevice.CPU) for r in rows], optimizer=optimizer,
        learning_rate=0.01, eps=1e-8, pooling_mode=PoolingMode.SUM, weights_precision=SparseType.FP32,
        output_dtype=SparseType.FP32, bounds_check_mode=BoundsCheckMode.FATAL)
    tbe.init_embedding_weights_uniform(-0.01, 0.01)
    return tbe


def table_major(ids: Tensor) -> tuple[Tensor, Tensor]:
    """FBGEMM's input for ``ids`` [batch, tables]: the ids of table 0 for every sample, then table 1's, ...,
    and the offsets of bags of one id (tables * batch + 1)."""
    indices = ids.t().reshape(-1)
    return indices, torch.arange(indices.numel() + 1, dtype=torch.int64)


class TorchTables(nn.Module):
    """Per field a sparse nn.Embedding of ``dim`` and one of 1 (the first-order weight)."""

    def __init__(self, rows: list[int], dim: int) -> None:
        super().__init__()
        self.vectors = nn.ModuleList(nn.Embedding(r, dim, sparse=True) for r in rows)
        self.first = nn.ModuleList(nn.Embedding(r, 1, sparse=True) for r in rows)

    def forward(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """[batch, tables, dim] vectors and [batch, tables] first-order weights of ``ids`` [batch, tables]."""
        columns = ids.unbind(1)
        vectors = torch.stack([table(c) for table, c in zip(self.vectors, columns)], 1)
        first = torch.cat([table(c) for table, c in zip(self.first, columns)], 1)
        return vectors, first


class TBETables(nn.Module):
    """The same two table sets as two FBGEMM TBEs, exact rowwise Adagrad fused into their backward."""

    def __init__(self, rows: list[int], dim: int) -> None:
        super().__init__()
        self.vectors = make_tbe(rows, dim, EmbOptimType.EXACT_ROWWISE_ADAGRAD)
        self.first = make_tbe(rows, FIRST_ORDER_DIM, EmbOptimType.EXACT_ROWWISE_ADAGRAD)

    def forward(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        batch, tables = ids.shape
        indices, offsets = table_major(ids)
        vectors = self.vectors(indices, offsets).view(batch, tables, -1)
        first = self.first(indices, offsets).view(batch, tables, FIRST_ORDER_DIM)[..., 0]
        return vectors, first


class DeepFM(nn.Module):
    """First-order weights + FM second-order term + MLP over the vectors and dense features + a linear term
    of the dense features, one logit per sample."""

    def __init__(self, tables: TorchTables | TBETables, num_tables: int, dim: int, dense: int,
                 hidden: list[int]) -> None:
        super().__init__()
        self.tables = tables
        layers: list[nn.Module] = []
        width = num_tables * dim + dense
        for units in hidden:
            layers += [nn.Linear(width, units), nn.ReLU()]
            width = units
        self.mlp = nn.Sequential(*layers, nn.Linear(width, 1))
        self.linear = nn.Linear(dense, 1)

    def dense_parameters(self) -> list[nn.Parameter]:
        return [*self.mlp.parameters(), *self.linear.parameters()]

    def forward(self, ids: Tensor, dense: Tensor) -> Tensor:
        vectors, first = self.tables(ids)
        fm = 0.5 * (vectors.sum(1).square() - vectors.square().sum(1)).sum(1)
        deep = self.mlp(torch.cat([vectors.flatten(1), dense], 1)).squeeze(1)
        return first.sum(1) + fm + deep + self.linear(dense).squeeze(1)


def tbe_step(tbe: SplitTableBatchedEmbeddingBagsCodegen, indices: Tensor, offsets: Tensor,
             grad: Tensor) -> Callable[[], None]:
    """Forward over every table's ids, then the backward of ``grad``, which updates the tables."""
    return lambda: tbe(indices, offsets).backward(grad)


def deepfm_step(model: DeepFM, optimizers: list[torch.optim.Optimizer], ids: Tensor, dense: Tensor,
                labels: Tensor) -> Callable[[], None]:
    def step() -> None:
        for optimizer in optimizers:
            optimizer.zero_grad()
        F.binary_cross_entropy_with_logits(model(ids, dense), labels).backward()
        for optimizer in optimizers:
            optimizer.step()
    return step


def bench_tables(spec: dict, ids: Tensor, dense: Tensor, labels: Tensor, repeats: int) -> dict[str, float]:
    """Median ms of each TBE step and both DeepFM steps over one table set."""
    rows, dim = list(spec["rows"]), int(spec["dim"])
    if ids.shape != (int(spec["batch"]), len(rows)):
        raise ValueError(f"ids {tuple(ids.shape)} do not match {spec['batch']} samples of {len(rows)} tables")
    suffix = f", {len(rows)} tables"
    ms = {}
    indices, offsets = table_major(ids)
    grad = torch.randn(ids.shape[0], len(rows) * dim, generator=torch.Generator().manual_seed(0))
    for name, optimizer in TBE_OPTIMIZERS:
        tbe = make_tbe(rows, dim, optimizer)
        ms[f"FBGEMM TBE {name} step{suffix}"] = median_ms(tbe_step(tbe, indices, offsets, grad), repeats, WARMUP)
        del tbe
    model = DeepFM(TorchTables(rows, dim), len(rows), dim, dense.shape[1], spec["hidden"])
    optimizers = [torch.optim.SparseAdam(list(model.tables.parameters()), lr=0.001),
                  torch.optim.Adam(model.dense_parameters(), lr=0.001)]
    ms[f"torch DeepFM step{suffix}"] = median_ms(deepfm_step(model, optimizers, ids, dense, labels), repeats, WARMUP)
    del model, optimizers
    model = DeepFM(TBETables(rows, dim), len(rows), dim, dense.shape[1], spec["hidden"])
    optimizers = [torch.optim.Adam(model.dense_parameters(), lr=0.001)]
    ms[f"torch DeepFM step, FBGEMM TBE tables{suffix}"] = median_ms(
        deepfm_step(model, optimizers, ids, dense, labels), repeats, WARMUP)
    return ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir")
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    folder = Path(args.dir)
    dense = torch.from_numpy(np.load(folder / "dense.npy"))
    labels = torch.from_numpy(np.load(folder / "labels.npy"))
    ms = {}
    sets = [("tables.json", "ids.npy")] + ([OPTIONAL_SET] if (folder / OPTIONAL_SET[0]).exists() else [])
    for spec_name, ids_name in sets:
        spec = json.loads((folder / spec_name).read_text())
        ids = torch.from_numpy(np.load(folder / ids_name))
        ms.update(bench_tables(spec, ids, dense, labels, args.repeats))
    (folder / "collection_peers.json").write_text(
        json.dumps({"torch": torch.__version__, "fbgemm": fbgemm_gpu.__version__, "ms": ms}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
