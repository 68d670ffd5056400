"""Parameter-server benchmark for tools/bench.py: examples per second with 1 and 2 trainers, and the bytes
a step's sparse gradient push carries against a dense gradient of the same tables."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from paddle_edo import load_config
from paddle_edo.data import CTRBatches, load_dataset

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "ps_movielens.yaml"


def throughput(trainers: int, output_dir: Path) -> dict:
    """Run a 1-server job with ``trainers`` trainers; examples per second summed over trainers."""
    command = [sys.executable, "-m", "paddle.distributed.launch", "--server_num=1", f"--trainer_num={trainers}",
               "--log_dir", str(output_dir / "log"), str(ROOT / "tools" / "train.py"), "-c", str(CONFIG),
               "-o", f"train.output_dir={output_dir}"]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=600,
                   env={**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": str(ROOT)})
    per_trainer = [json.loads((output_dir / f"results.trainer{r}.json").read_text()) for r in range(trainers)]
    test = json.loads((output_dir / "results.json").read_text())
    return {"trainers": trainers, "examples_per_second": sum(r["examples_per_second"] for r in per_trainer),
            "per_trainer": [r["examples_per_second"] for r in per_trainer], "test_auc": test["test_auc"]}


def push_bytes(config_path: Path) -> dict:
    """Per step of the config's batches: a sparse push sends each distinct id once with show, click and
    the gradient of its row ((3 + dim) float32 in the accessor's push layout); a dense gradient would
    send every row of every table (vocab x dim float32). Computed from the batches, not read off the wire."""
    config = load_config(config_path)
    splits, dim = load_dataset(config["data"]), config["embedding"]["dim"]
    dense = sum(f.vocab_size for f in splits.fields) * dim * 4
    sparse = []
    for batch in CTRBatches(splits.train, config["train"]["batch_size"], shuffle=True, seed=0):
        distinct = sum(len(np.unique(batch[f.name][batch[f.name] != 0] if f.multi_valued else batch[f.name]))
                       for f in splits.fields)
        sparse.append(distinct * (3 + dim) * 4)
    return {"config": str(config_path.relative_to(ROOT)), "batch_size": config["train"]["batch_size"],
            "dim": dim, "rows": sum(f.vocab_size for f in splits.fields), "dense_bytes_per_step": dense, "sparse_bytes_per_step_mean": float(np.mean(sparse)),
            "sparse_vs_dense": float(np.mean(sparse)) / dense, "saving_pct": 100 * (1 - float(np.mean(sparse)) / dense)}


def ps_benchmark() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        runs = [throughput(n, Path(tmp) / f"t{n}") for n in (1, 2)]
    return {"config": str(CONFIG.relative_to(ROOT)), "throughput": runs,
            "push": [push_bytes(CONFIG), push_bytes(ROOT / "configs" / "synthetic_dense.yaml")]}
