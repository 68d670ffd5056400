"""The table-batched collection's training step against per-table layers and peers (tools/bench.py collection).

Criteo's 26 categorical fields with their vocabulary sizes capped (six tables of 10^6 rows at the default
cap), dim 16, batch 4096, Zipf(1.1) ids; and a 100-table set cycling those sizes under a tenth of the cap
(seven candidates of 100 tables at the full cap would hold more than this 24 GiB machine has). One step of the tables
alone = forward, backward with the given output gradient, and the optimizer; the whole DeepFM step adds
first-order tables, FM, an MLP 256-128 and 13 dense features. Paddle candidates are timed round-robin in
one process (medians); the peers (FBGEMM's training TBE, a torch DeepFM) run in the peers venv on the
same ids, right after (tools/bench_collection_peers.py).

The engine's side (``engine_rows`` > 0): ``tools/train.py -c configs/criteo.yaml`` on that many
``criteo-synthetic`` rows with the tables as collections (the default) and as per-table layers
(``embedding.collection=false``), and the same two for the plan ``tools/plan.py --budget 1MiB`` writes for
them; each run twice, alternating, its examples/s the mean of the two and its test AUC the first's.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import paddle

from paddle_edo.benchmark import MALLOC_ENV, side_by_side
from paddle_edo.data.criteo import CRITEO_CARDINALITIES
from paddle_edo.data.ctr import FieldSpec
from paddle_edo.data.synthetic import zipf_ids
from paddle_edo.models.ctr import DeepFM
from paddle_edo.models.optimizers import create_optimizer
from paddle_edo.nn import DenseEmbedding, EmbeddingCollection
from paddle_edo.nn.collection import bind_table_optimizer
from paddle_edo.optim import TableOptimizer

ROOT = Path(__file__).resolve().parent.parent
DENSE_FEATURES = 13
ENGINE_RUNS = {"fp32 tables, collection": ("fp32", []), "fp32 tables, per-table layers": ("fp32", ["embedding.collection=false"]),
               "1 MiB plan, collection": ("plan", []), "1 MiB plan, per-table layers": ("plan", ["embedding.collection=false"])}
HIDDEN = [256, 128]
TRAIN = {"learning_rate": 0.001, "embedding_learning_rate": None}


def table_rows(count: int, cap: int) -> list[int]:
    """Criteo's vocabulary sizes, capped, cycled to ``count`` tables."""
    return [min(CRITEO_CARDINALITIES[t % len(CRITEO_CARDINALITIES)], cap) for t in range(count)]


def draw_ids(rows: list[int], batch: int, alpha: float, seed: int) -> np.ndarray:
    """[batch, tables] ids, each column Zipf(alpha) over its table (id 0, the padding id, never drawn)."""
    rng = np.random.default_rng(seed)
    return np.stack([np.minimum(zipf_ids(r - 1, batch, alpha, rng) + 1, r - 1) for r in rows], axis=1)


def tables_step(lookup, ids: list[paddle.Tensor], grad: paddle.Tensor, optimizer=None):
    """One step of the tables alone: forward, backward of ``grad``, the optimizer (if not fused)."""
    def step() -> None:
        out = lookup(ids)
        out.backward(grad)
        if optimizer is not None:
            optimizer.step()
            optimizer.clear_grad()
    return step


def table_candidates(rows: list[int], dim: int, ids: np.ndarray, seed: int) -> dict:
    """The tables-alone steps: the collection with each fused rule, and per-table layers with Paddle's."""
    tensors = [paddle.to_tensor(ids[:, t].copy()) for t in range(len(rows))]
    grad = paddle.to_tensor(np.random.default_rng(seed).standard_normal([ids.shape[0], dim * len(rows)])
                            .astype("float32"))

    def dense_tables() -> dict[str, DenseEmbedding]:
        return {f"t{t}": DenseEmbedding(r, dim, padding_idx=0) for t, r in enumerate(rows)}

    candidates = {}
    for rule in ("rowwise_adagrad", "adagrad", "adam", "sgd"):
        collection = EmbeddingCollection(dense_tables())
        collection.bind_optimizer(TableOptimizer(rule, 0.01))
        candidates[f"paddle_edo EmbeddingCollection, fused {rule}"] = tables_step(collection, tensors, grad)
    for name, optimizer in (("lazy Adam", "adam"), ("Adagrad", "adagrad")):
        layers = dense_tables()
        params = [t.weight for t in layers.values()]
        paddle_opt = (paddle.optimizer.Adam(0.01, parameters=params, lazy_mode=True) if optimizer == "adam"
                      else paddle.optimizer.Adagrad(0.01, parameters=params))
        candidates[f"{len(rows)} DenseEmbedding layers, Paddle {name}"] = tables_step(
            lambda x, layers=layers: paddle.concat([layer(i) for layer, i in zip(layers.values(), x)], axis=1),
            tensors, grad, paddle_opt)
    plain = [paddle.nn.Embedding(r, dim, sparse=True) for r in rows]
    candidates[f"{len(rows)} paddle.nn.Embedding(sparse=True), lazy Adam"] = tables_step(
        lambda x: paddle.concat([layer(i) for layer, i in zip(plain, x)], axis=1), tensors, grad,
        paddle.optimizer.Adam(0.01, parameters=[p for layer in plain for p in layer.parameters()], lazy_mode=True))
    return candidates


def deepfm_candidates(rows: list[int], dim: int, ids: np.ndarray, dense: np.ndarray, labels: np.ndarray) -> dict:
    """The whole DeepFM step: tables through the collection (fused lazy Adam) and per-table layers (Paddle's
    lazy Adam), the dense part with Paddle's Adam in both."""
    fields = [FieldSpec(f"C{t + 1}", r) for t, r in enumerate(rows)]
    features = [f"I{i + 1}" for i in range(DENSE_FEATURES)]
    batch = {**{f.name: paddle.to_tensor(ids[:, t].copy()) for t, f in enumerate(fields)},
             "dense": paddle.to_tensor(dense), "label": paddle.to_tensor(labels)}
    candidates = {}
    for collection in (True, False):
        model = DeepFM(fields, {"type": "dense", "dim": dim, "collection": collection}, HIDDEN,
                       dense_features=features)
        fused = bind_table_optimizer(model, TableOptimizer("adam", TRAIN["learning_rate"])) if collection else []
        optimizer = create_optimizer({**TRAIN, "optimizer": "adam"}, model, fused)

        def step(model=model, optimizer=optimizer) -> None:
            loss = model.create_loss(model(model.inputs(batch)), batch)
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
        name = "collection, fused lazy Adam" if collection else "per-table layers, Paddle lazy Adam"
        candidates[f"paddle_edo DeepFM, {name}"] = step
    return candidates


def run_peers(peers: str, folder: Path, rows: dict[str, list[int]], dim: int, ids: dict[str, np.ndarray],
              dense: np.ndarray, labels: np.ndarray, repeats: int, threads: int) -> dict:
    """The peers' medians on the same ids (FBGEMM TBE steps, torch DeepFM steps), or why there are none."""
    batch = dense.shape[0]
    for suffix, key in (("", "26"), ("_100", "100")):
        if key in rows:
            spec = {"rows": rows[key], "dim": dim, "batch": batch, "dense": DENSE_FEATURES, "hidden": HIDDEN}
            (folder / f"tables{suffix}.json").write_text(json.dumps(spec))
            np.save(folder / f"ids{suffix}.npy", ids[key])
    np.save(folder / "dense.npy", dense)
    np.save(folder / "labels.npy", labels)
    script = Path(__file__).with_name("bench_collection_peers.py")
    done = subprocess.run([peers, str(script), str(folder), "--repeats", str(repeats), "--threads", str(threads)],
                          env={**os.environ, **MALLOC_ENV}, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads((folder / "collection_peers.json").read_text())


def _tool(args: list[str]) -> str:
    """A tool's standard output and error (where its progress goes), its failure raised with its last line."""
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env={**os.environ, **MALLOC_ENV}, capture_output=True,
                          text=True)
    if done.returncode != 0:
        lines = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}").splitlines()
        raise RuntimeError(f"{' '.join(args[:3])}: {lines[-1]}")
    return done.stdout + done.stderr


def engine_runs(rows: int, folder: Path) -> dict:
    """Training examples/s and test AUC of ENGINE_RUNS on ``rows`` criteo-synthetic rows (see the module's
    docstring)."""
    data, plan = folder / "criteo", folder / "plan1m.yaml"
    _tool(["tools/get_data.py", "criteo-synthetic", "--rows", str(rows), "--out", str(data)])
    common = [f"data.files.path={data}", "monitor.enable=false"]
    _tool(["tools/plan.py", "-c", "configs/criteo.yaml", *[a for o in common for a in ("-o", o)],
           "-o", f"train.output_dir={folder / 'planning'}", "--budget", "1MiB", "--out", str(plan)])
    configs = {"fp32": "configs/criteo.yaml", "plan": str(plan)}
    speeds: dict[str, list[float]] = {name: [] for name in ENGINE_RUNS}
    aucs: dict[str, float] = {}
    for repeat in range(2):
        for name, (config, overrides) in ENGINE_RUNS.items():
            options = [*common, *overrides, f"train.output_dir={folder / f'run{repeat}'}"]
            out = _tool(["tools/train.py", "-c", configs[config], *[a for o in options for a in ("-o", o)]])
            speeds[name].append(float(re.findall(r"([\d,]+) samples/s", out)[-1].replace(",", "")))
            aucs.setdefault(name, float(re.search(r"test auc ([\d.]+)", out).group(1)))
    return {"rows": rows, "examples_per_second": {name: float(np.mean(v)) for name, v in speeds.items()},
            "test_auc": aucs}


def main_collection(cap: int, batch: int, dim: int, repeats: int, threads: int, peers: str | None,
                    folder: Path, seed: int = 0, engine_rows: int = 0) -> dict:
    rows = {"26": table_rows(26, cap), "100": table_rows(100, cap // 10)}
    ids = {key: draw_ids(r, batch, 1.1, seed + len(r)) for key, r in rows.items()}
    rng = np.random.default_rng(seed)
    dense = rng.standard_normal([batch, DENSE_FEATURES]).astype("float32")
    labels = (rng.random(batch) < 0.25).astype("float32")
    ms = {}
    for key in ("26", "100"):
        measured = side_by_side(table_candidates(rows[key], dim, ids[key], seed), repeats)
        ms.update({f"{name} [{key} tables]": value for name, value in measured.items()})
    ms.update(side_by_side(deepfm_candidates(rows["26"], dim, ids["26"], dense, labels), repeats))
    result = {"settings": {"tables": 26, "rows_cap": cap, "rows_cap_100_tables": cap // 10, "dim": dim, "batch": batch, "zipf_alpha": 1.1,
                           "repeats": repeats, "threads": threads, "paddle": paddle.__version__},
              "ms": ms}
    if peers:
        result["peers"] = run_peers(peers, folder, rows, dim, ids, dense, labels, repeats, threads)
    if engine_rows:
        result["engine"] = engine_runs(engine_rows, folder)
    return result


def markdown(result: dict) -> str:
    lines = ["| step | ms (median) | examples/s |", "|---|---|---|"]
    batch = result["settings"]["batch"]
    measured = dict(result["ms"])
    measured.update({f"{name} (peer)": value for name, value in result.get("peers", {}).get("ms", {}).items()})
    for name, value in measured.items():
        lines.append(f"| {name} | {value:.1f} | {batch / value * 1e3:,.0f} |")
    if "error" in result.get("peers", {}):
        lines.append(f"\npeers not measured: {result['peers']['error']}")
    if "engine" in result:
        engine = result["engine"]
        lines += ["", f"tools/train.py on {engine['rows']:,} criteo-synthetic rows | examples/s | test AUC", "|---|---|---|"]
        lines += [f"| {name} | {speed:,.0f} | {engine['test_auc'][name]:.4f} |"
                  for name, speed in engine["examples_per_second"].items()]
    return "\n".join(lines)
