"""TorchRec's sharded tables on CPU ranks, the peer of `tools/bench.py sharded --peers`: run by a Python that
has torch, fbgemm-gpu-cpu and torchrec (`make setup-peers`: .venv-peers), never by the package's own, under
``torch.distributed.run`` (gloo):

  python -m torch.distributed.run --nproc_per_node 2 tools/bench_sharded_peers.py OUT KIND TABLES ROWS DIM BATCH STEPS

An EmbeddingBagCollection of TABLES tables of ROWS x DIM, one id per example and table (Zipf(1.2), the same
draws as the package's side of the bench), sharded by DistributedModelParallel with every table of sharding
type KIND (``table_wise``, ``row_wise``, ...), Adagrad fused into the backward (TorchRec's
``apply_optimizer_in_backward``); each rank times a step (lookup, backward, optimizer) on its half of a
global BATCH and writes OUT.<rank>.json: the median step time, or the error the planner or the step raised.
"""
from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from bench_sharded import WARMUP, zipf_ids  # the package's side's draws (this script runs from tools/, beside it)


def step_times(kind: str, tables: int, rows: int, dim: int, batch: int, steps: int) -> dict:
    import torchrec
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.model_parallel import DistributedModelParallel
    from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
    from torchrec.distributed.types import ShardingType
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    rank, world = dist.get_rank(), dist.get_world_size()
    names = [f"t{t}" for t in range(tables)]
    collection = torchrec.EmbeddingBagCollection(device=torch.device("meta"), tables=[
        torchrec.EmbeddingBagConfig(name=name, embedding_dim=dim, num_embeddings=rows, feature_names=[name],
                                    pooling=torchrec.PoolingType.SUM) for name in names])
    apply_optimizer_in_backward(torch.optim.Adagrad, collection.parameters(), {"lr": 0.01})
    constraints = {name: ParameterConstraints(sharding_types=[ShardingType(kind).value]) for name in names}
    planner = EmbeddingShardingPlanner(topology=Topology(world_size=world, compute_device="cpu"),
                                       constraints=constraints)
    plan = planner.collective_plan(collection, [EmbeddingBagCollectionSharder()], dist.GroupMember.WORLD)
    model = DistributedModelParallel(collection, device=torch.device("cpu"), plan=plan)
    mine = batch // world
    times = []
    for step in range(WARMUP + steps):
        ids = torch.from_numpy(zipf_ids(rows, (tables, mine), step * 1000 + rank).reshape(-1))
        features = KeyedJaggedTensor.from_lengths_sync(keys=names, values=ids,
                                                       lengths=torch.ones(tables * mine, dtype=torch.int64))
        dist.barrier()
        start = time.perf_counter()
        model(features).values().sum().backward()
        if step >= WARMUP:
            times.append(time.perf_counter() - start)
    return {"step_ms": float(np.median(times)) * 1e3}


def main() -> None:
    out, kind = Path(sys.argv[1]), sys.argv[2]
    tables, rows, dim, batch, steps = map(int, sys.argv[3:8])
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    try:
        found = step_times(kind, tables, rows, dim, batch, steps)
    except Exception as error:  # noqa: BLE001 - the peer's refusal is the result
        found = {"error": f"{type(error).__name__}: {str(error).splitlines()[0]}", "trace": traceback.format_exc()[-2000:]}
    out.with_suffix(f".{dist.get_rank()}.json").write_text(json.dumps(found))


if __name__ == "__main__":
    main()
