"""Sharded-tables benchmark for tools/bench.py: one process against 2 ranks holding half the rows each, the
same job data-parallel with replicated tables (collective) and, where Paddle has them, parameter servers;
the bytes a rank exchanges per step against the formula from the batch's ids; a table larger than one
process's memory limit trained by 2 ranks; pooled bags' bytes with tables placed by rows and whole; and, on
paper, the bytes per step for a 10^9-row table."""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "sharded_criteo.yaml"
ENV = {**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": str(ROOT)}


def table_overrides(fields: int, rows: int, dim: int, samples: int, batch: int) -> list[str]:
    """Criteo-format synthetic data (Zipf ids, a planted rule): ``fields`` tables of ``rows`` x ``dim``."""
    return ["data.name=synthetic", f"data.synthetic.num_fields={fields}", f"data.synthetic.rows_per_field={rows}",
            f"data.synthetic.num_samples={samples}", f"embedding.dim={dim}", f"train.batch_size={batch}",
            "train.epochs=1", "distributed.shard_min_rows=4096", "train.log_every_steps=1000000"]


def run_job(name: str, out: Path, overrides: list[str], processes: int, mode: str, limit_bytes: int | None = None,
            timeout: int = 3600) -> dict:
    """Train the config in ``mode`` with ``processes`` ranks (1: tools/train.py alone); each rank's results."""
    out.mkdir(parents=True, exist_ok=True)
    # the machine's cores: 2 math threads for one process, 1 for each of 2 ranks
    settings = [*overrides, f"distributed.mode={mode}", f"train.output_dir={out}",
                f"train.num_threads={2 if processes == 1 else 1}"]
    if mode == "collective":
        settings.append("embedding.sparse=false")
    if processes == 1 and mode != "ps":
        command = [sys.executable, str(ROOT / "tools" / "train.py"), "-c", str(CONFIG)]
    else:
        command = [sys.executable, str(ROOT / "tools" / "launch.py"), "-c", str(CONFIG),
                   *(["--server_num", "1", "--trainer_num", str(processes)] if mode == "ps"
                     else ["--nproc_per_node", str(processes)])]
    command += [x for o in settings for x in ("-o", o)]

    def capped() -> None:
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=ENV,
                          preexec_fn=capped)
    found = {"name": name, "mode": mode, "processes": processes, "ok": done.returncode == 0,
             "wall_seconds": time.perf_counter() - start}
    if done.returncode != 0:
        lines = [l for l in (done.stdout + done.stderr).splitlines() if l.strip()]
        errors = [l for l in lines if "Error" in l or l.startswith("error")]
        logs = sorted((out / "log").glob("workerlog.*")) if (out / "log").is_dir() else []
        for log in logs:  # a rank's own error, where the launcher only says that one failed
            errors += [f"{log.name}: {l}" for l in log.read_text(errors="replace").splitlines() if "Error" in l]
        found["error"] = (errors[-1] if errors else lines[-1] if lines else f"exit {done.returncode}")[:300]
        found["last_line"] = lines[-1][:300] if lines else ""
        return found
    if mode == "ps":
        ranks = [json.loads((out / f"results.trainer{r}.json").read_text()) for r in range(processes)]
    else:
        ranks = [json.loads((out / f"results.rank{r}.json").read_text()) for r in range(processes)]
    found["examples_per_second"] = sum(r["examples_per_second"] for r in ranks)
    found["peak_rss_bytes"] = [r.get("peak_rss_bytes") for r in ranks]
    found["peak_virtual_bytes"] = [r.get("peak_virtual_bytes") for r in ranks]
    found["test_auc"] = ranks[0].get("test_auc")
    if mode == "ps" and (out / "results.json").is_file():  # the PS job scores the test split once, in trainer 0
        found["test_auc"] = json.loads((out / "results.json").read_text()).get("test_auc")
    for key in ("exchange_bytes_per_step", "allreduce_bytes_per_step"):
        if key in ranks[0]:
            found[key] = [r[key] for r in ranks]
    return found


def formula_bytes(overrides: list[str], world: int) -> dict:
    """Bytes each rank sends per step by the exchange's formula, from the job's own batches: per table and
    rank, the distinct ids d of its slice (padding dropped), of which d_remote live elsewhere, and a_in, those
    other ranks ask of it: 8 d_remote (ids) + 4 D (a_in + d_remote) (rows out, gradients back) + 8 T (N - 1)
    (the counts), for each collection (the tables of width D and the first-order ones, width 1)."""
    sys.path.insert(0, str(ROOT))
    from paddle_edo import load_config
    from paddle_edo.data import CTRBatches, load_dataset
    from paddle_edo.distributed.sharded.batches import RankSlices

    config = load_config(CONFIG, [*overrides, "distributed.mode=sharded"])
    splits = load_dataset(config["data"])
    dims = [config["embedding"]["dim"]] + ([1] if config["model"]["first_order"] else [])
    fields = [f.name for f in splits.fields]
    per_rank = np.zeros(world)
    steps = 0
    slices = [RankSlices(CTRBatches(splits.train, config["train"]["batch_size"], shuffle=True,
                                    seed=config["train"]["seed"]), r, world) for r in range(world)]
    for parts in zip(*slices):
        steps += 1
        for field in fields:
            distinct = [np.unique(part[field][part[field] != 0]) for part in parts]
            for r in range(world):
                remote = int((distinct[r] % world != r).sum())
                asked = sum(int((distinct[s] % world == r).sum()) for s in range(world) if s != r)
                per_rank[r] += sum(8 * remote + 4 * dim * (asked + remote) for dim in dims)
        per_rank += 8 * len(fields) * (world - 1) * len(dims)
    return {"bytes_per_step": (per_rank / max(steps, 1)).tolist(), "steps": steps}


EXCHANGE_SIZES = (16, 1024, 16_384, 262_144, 1_048_576)  # float32 values each rank sends each peer


def exchange_times(world: int = 2, repeats: int = 50) -> list[dict]:
    """Median time of one exchange of each size, pairwise send/recv against all_gather, ``world`` ranks
    launched on this machine (this file's ``--probe``)."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "times.json"
        subprocess.run([sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(world),
                        "--log_dir", str(Path(folder) / "log"), __file__, "--probe", str(out), str(repeats)],
                       cwd=ROOT, env=ENV, check=True, capture_output=True, timeout=900)
        return json.loads(out.read_text())


def _probe(out: Path, repeats: int) -> None:
    import paddle
    import paddle.distributed as dist

    from paddle_edo.distributed.sharded.exchange import GatheredExchange, PairwiseExchange

    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    kinds = {"pairwise": PairwiseExchange(rank, world), "all_gather": GatheredExchange(rank, world)}
    found = []
    for size in EXCHANGE_SIZES:
        parts = [paddle.full([size], float(rank), dtype="float32") for _ in range(world)]
        row = {"values_per_peer": size, "bytes_per_peer": 4 * size}
        for name, exchange in kinds.items():
            times = []
            for _ in range(repeats):
                dist.barrier()
                start = time.perf_counter()
                received = exchange.exchange(parts, [size] * world)
                times.append(time.perf_counter() - start)
            assert all(float(r[0]) == s for s, r in enumerate(received))
            row[f"{name}_us"] = float(np.median(times)) * 1e6
        found.append(row)
    if rank == 0:
        out.write_text(json.dumps(found, indent=2))


def criteo_parity(path: Path | None, rows: int = 300_000) -> dict:
    """Test AUC of ``configs/sharded_criteo.yaml`` (Criteo-format files, 26 categorical fields) in one
    process and with 2 ranks, on ``path`` or on ``rows`` rows of criteo-synthetic made here."""
    with tempfile.TemporaryDirectory() as folder:
        if path is None:
            path = Path(folder) / "criteo"
            subprocess.run([sys.executable, str(ROOT / "tools" / "get_data.py"), "criteo-synthetic", "--rows",
                            str(rows), "--out", str(path)], cwd=ROOT, env=ENV, check=True, capture_output=True)
        overrides = [f"data.files.path={path}", "train.log_every_steps=1000000"]
        one = run_job("one process", Path(folder) / "one", overrides, 1, "sharded")
        two = run_job("sharded, 2 ranks", Path(folder) / "two", overrides, 2, "sharded")
    return {"data": str(path), "one": one, "two": two,
            "auc_difference": (two["test_auc"] - one["test_auc"]) if one["ok"] and two["ok"] else None}


def on_paper(rows: float = 1e9, dim: int = 64, batch: int = 4096, fields: int = 26,
             distinct_share: float = 0.5) -> list[dict]:
    """Bytes per step and rank for a ``rows``-row table (all fields' rows), at ``batch`` examples per rank
    and ``distinct_share`` of a rank's ids distinct: the sharded exchange (ids, rows, gradients) against a
    data-parallel all-reduce of the table (2 (N-1)/N of it, ring) and a parameter-server pull and push of
    each distinct row (dim floats down, dim + 3 up)."""
    table = rows * dim * 4
    table_and_adam = 3 * table
    distinct = batch * fields * distinct_share
    found = []
    for world in (8, 64, 512):
        remote = distinct * (world - 1) / world
        sharded = 8 * remote + 2 * 4 * dim * remote + 8 * fields * (world - 1)
        found.append({"ranks": world, "sharded_exchange": sharded, "allreduce_table": 2 * (world - 1) / world * table,
                      "ps_pull_push": distinct * (dim + dim + 3) * 4,
                      "table_and_adam_per_rank_sharded": table_and_adam / world,
                      "table_and_adam_per_rank_replicated": table_and_adam})
    return found


PLACEMENT_BAGS = (("none", 1), ("sum", 1), ("sum", 4), ("sum", 16), ("sum", 64))  # pooling, ids per example
PLACEMENT_PLANS = {"row": ("row", "after_exchange"), "row_at_owner": ("row", "at_owner"),  # placement, bag pooling
                   "row_auto": ("row", "auto"), "table": ("table", "auto")}


def placement_bytes(rows: int = 1_000_000, dim: int = 64, batch: int = 4096, repeats: int = 20) -> list[dict]:
    """Two tables of ``rows`` x ``dim``, Zipf ids, single (not pooled) or in bags of each PLACEMENT_BAGS
    length (summed), a global batch of ``batch`` over 2 ranks: per step (lookup, backward and the Adagrad
    rule), the bytes each rank sends and the median step time, with the tables placed by rows (bags pooled
    after the exchange, at the owners, and as ``auto`` chooses) and placed whole (one on each rank) (this
    file's ``--placement-probe``)."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "placement"
        subprocess.run([sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2", "--log_dir",
                        str(Path(folder) / "log"), __file__, "--placement-probe", str(out), str(rows), str(dim),
                        str(batch), str(repeats)], cwd=ROOT, env=ENV, check=True, capture_output=True, timeout=1800)
        ranks = [json.loads(out.with_suffix(f".{rank}.json").read_text()) for rank in range(2)]
    return [{"pooling": mine["pooling"], "bag_length": mine["bag_length"],
             **{f"{key}_by_rank": [r[i][key] for r in ranks] for key in mine if key not in ("pooling", "bag_length")}}
            for i, mine in enumerate(ranks[0])]


def _placement_probe(out: Path, rows: int, dim: int, batch: int, repeats: int) -> None:
    import paddle
    import paddle.distributed as dist

    from paddle_edo.distributed.sharded.exchange import PairwiseExchange

    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    exchange = PairwiseExchange(rank, world)
    found = []
    for pooling, length in PLACEMENT_BAGS:
        shape = (batch // world,) if pooling == "none" else (batch // world, length)
        ids = [paddle.to_tensor(zipf_ids(rows, shape, seed=rank * 10 + t)) for t in range(2)]
        row = {"pooling": pooling, "bag_length": length}
        for plan, (placement, bag_pooling) in PLACEMENT_PLANS.items():
            if pooling == "none" and placement == "row" and bag_pooling != "after_exchange":
                continue  # nothing to pool
            collection, trainer = _sharded_tables(placement, ["a", "b"], rows, dim, pooling, exchange)
            collection.bag_pooling = bag_pooling
            sent, times = [], []
            for _ in range(repeats):
                dist.barrier()
                before, start = exchange.bytes_sent, time.perf_counter()
                collection(ids).sum().backward()
                trainer.step()  # the rule, for shares that did not take it in the backward pass
                times.append(time.perf_counter() - start)
                sent.append(exchange.bytes_sent - before)
                trainer.clear_grad()
            row[f"{plan}_bytes"] = int(np.median(sent))
            row[f"{plan}_ms"] = float(np.median(times)) * 1e3
        found.append(row)
    out.with_suffix(f".{rank}.json").write_text(json.dumps(found))


def _sharded_tables(placement: str, names: list[str], rows: int, dim: int, pooling: str, exchange):
    """A ShardedCollection of fp32 tables of ``rows`` x ``dim`` placed by ``placement`` over the exchange's
    ranks, and the RowTrainer that trains the rows this rank holds with the Adagrad rule, as the engine
    trains a sharded job's tables (``train.optimizer: adagrad``)."""
    from paddle_edo.distributed.sharded import ShardedCollection
    from paddle_edo.nn import build_embedding
    from paddle_edo.nn.remote_table import RemoteTable
    from paddle_edo.nn.row_trainer import RowTrainer
    from paddle_edo.nn.shards import row_shares
    from paddle_edo.optim import TableOptimizer

    with row_shares(exchange.rank, exchange.world_size, 0, placement):
        layers = {name: build_embedding({"type": "dense", "dim": dim}, rows) for name in names}
    collection = ShardedCollection(layers, {name: pooling for name in names}, exchange)
    held = {name: layer for name, layer in layers.items() if not isinstance(layer, RemoteTable)}
    return collection, RowTrainer(TableOptimizer("adagrad", 0.01), held)


PLAN_NAMES = {"row": "by rows, pooled after the exchange", "row_at_owner": "by rows, pooled at the owners",
              "row_auto": "by rows, bag_pooling auto", "table": "whole"}


def placement_markdown(rows: list[dict], tables: str) -> str:
    lines = [f"Tables placed by rows (bags pooled after the exchange, at the owners, or as `distributed.bag_pooling: "
             f"auto` chooses) against whole (one on each rank): {tables}; per step, KiB sent and median time "
             f"(lookup, backward and the Adagrad rule), rank 0 / rank 1, and the bytes against by rows pooled after "
             f"the exchange:", "",
             "| ids per example | " + " | ".join(PLAN_NAMES.values()) + " |", "|---|" + "---|" * len(PLAN_NAMES)]
    for row in rows:
        ids = "1, not pooled" if row["pooling"] == "none" else f"bag of {row['bag_length']}, summed"
        baseline = sum(row["row_bytes_by_rank"])
        cells = []
        for plan in PLAN_NAMES:
            if f"{plan}_bytes_by_rank" not in row:
                cells.append("")
                continue
            sent = row[f"{plan}_bytes_by_rank"]
            cells.append(f"{' / '.join(f'{b / 2**10:,.0f}' for b in sent)} KiB ({sum(sent) / baseline:.2f}x), "
                         f"{' / '.join(f'{t:.1f}' for t in row[f'{plan}_ms_by_rank'])} ms")
        lines.append(f"| {ids} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


PEER_KINDS = ("table_wise", "row_wise")  # TorchRec's sharding types tried on CPU ranks
WARMUP = 3  # untimed steps before the timed ones


def zipf_ids(rows: int, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Zipf(1.2) ids below ``rows`` (numpy's draws, the tail clipped onto the last row), drawn from ``seed``:
    both sides of the peer run draw the same, the peers' Python with numpy alone (no Paddle, so not
    ``paddle_edo.data.zipf_ids``, whose finite-support Zipf is another distribution)."""
    return np.minimum(np.random.default_rng(seed).zipf(1.2, shape), rows - 1).astype(np.int64)


def peer_steps(peers: str, tables: int = 4, rows: int = 500_000, dim: int = 64, batch: int = 4096,
               steps: int = 20) -> list[dict]:
    """A training step of ``tables`` tables of ``rows`` x ``dim`` (one Zipf id per example and table, Adagrad)
    on 2 CPU ranks, one thread each: TorchRec's DistributedModelParallel with every table table-wise, then
    row-wise (``peers``: a Python with torchrec, tools/bench_sharded_peers.py), and the package's sharded
    collection with the tables placed by rows, then whole, their rows trained by the Adagrad table rule
    (as the engine trains them). Per run, each rank's median step or the error."""
    found = []
    with tempfile.TemporaryDirectory() as folder:
        sizes = [str(v) for v in (tables, rows, dim, batch, steps)]
        for kind in PEER_KINDS:
            out = Path(folder) / f"torchrec_{kind}"
            subprocess.run([peers, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                            str(ROOT / "tools" / "bench_sharded_peers.py"), str(out), kind, *sizes],
                           cwd=ROOT, capture_output=True, timeout=1800)
            found.append({"side": "TorchRec", "placement": kind, "batch": batch, **_ranks(out)})
        for placement in ("row", "table"):
            out = Path(folder) / f"edo_{placement}"
            subprocess.run([sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", "2", "--log_dir",
                            str(Path(folder) / f"log_{placement}"), __file__, "--step-probe", str(out), placement,
                            *sizes], cwd=ROOT, env=ENV, capture_output=True, timeout=1800)
            found.append({"side": "paddle_edo", "placement": placement, "batch": batch, **_ranks(out)})
    return found


def _ranks(out: Path) -> dict:
    """Both ranks' results of a peer run: their step times, or the first error either wrote (or that none
    wrote a result)."""
    results = [json.loads(path.read_text()) if path.is_file() else {"error": "no result (the rank died)"}
               for path in (out.with_suffix(f".{rank}.json") for rank in range(2))]
    errors = [r["error"] for r in results if "error" in r]
    return {"error": errors[0]} if errors else {"step_ms_by_rank": [r["step_ms"] for r in results]}


def _step_probe(out: Path, placement: str, tables: int, rows: int, dim: int, batch: int, steps: int) -> None:
    import paddle
    import paddle.distributed as dist

    from paddle_edo.distributed.sharded.exchange import PairwiseExchange
    from paddle_edo.runtime import set_num_threads

    dist.init_parallel_env()
    set_num_threads(1)
    rank, world = dist.get_rank(), dist.get_world_size()
    collection, trainer = _sharded_tables(placement, [f"t{t}" for t in range(tables)], rows, dim, "none",
                                          PairwiseExchange(rank, world))
    mine = batch // world
    times = []
    for step in range(WARMUP + steps):
        ids = zipf_ids(rows, (tables, mine), step * 1000 + rank)
        dist.barrier()
        start = time.perf_counter()
        collection([paddle.to_tensor(column) for column in ids]).sum().backward()
        trainer.step()
        trainer.clear_grad()
        if step >= WARMUP:
            times.append(time.perf_counter() - start)
    out.with_suffix(f".{rank}.json").write_text(json.dumps({"step_ms": float(np.median(times)) * 1e3}))


def peers_markdown(rows: list[dict], tables: str) -> str:
    lines = [f"A training step (lookup, backward, Adagrad) on 2 CPU ranks, one thread each: {tables}; median step, "
             f"rank 0 / rank 1, and examples/s of the global batch at the slower rank:", "",
             "| library | placement | step | examples/s |", "|---|---|---|---|"]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['side']} | {row['placement']} | refused: {row['error']} | |")
            continue
        times = row["step_ms_by_rank"]
        lines.append(f"| {row['side']} | {row['placement']} | {' / '.join(f'{t:.1f} ms' for t in times)} | "
                     f"{row['batch'] / max(times) * 1e3:,.0f} |")
    return "\n".join(lines) + "\n"


def sharded_benchmark(fields: int = 4, rows: int = 500_000, dim: int = 64, samples: int = 400_000, batch: int = 4096,
                      criteo: Path | None = None, work: Path | None = None, peers: str | None = None) -> dict:
    from paddle_edo.compat import has_parameter_servers

    if work is None:
        with tempfile.TemporaryDirectory(prefix="bench_sharded") as folder:
            return sharded_benchmark(fields, rows, dim, samples, batch, criteo, Path(folder), peers)
    overrides = table_overrides(fields, rows, dim, samples, batch)
    runs = [run_job("one process", work / "one", overrides, 1, "sharded"),
            run_job("sharded, 2 ranks", work / "sharded2", overrides, 2, "sharded")]
    small = table_overrides(fields, rows, dim, max(samples // 20, batch * 4), batch)  # ~1 s a step
    runs.append(run_job("collective, 2 ranks (replicated, dense all-reduce)", work / "collective2", small, 2,
                        "collective"))
    if has_parameter_servers():
        runs.append(run_job("parameter servers, 1 server + 2 trainers", work / "ps2",
                            [*overrides, "model.first_order=false"], 2, "ps"))
    table_bytes = fields * rows * dim * 4
    cap = memory_cap(runs[0], runs[1])
    capped = []
    if cap is not None:
        capped = [run_job("one process, capped", work / "capped1", overrides, 1, "sharded", cap),
                  run_job("sharded, 2 ranks, capped", work / "capped2", overrides, 2, "sharded", cap)]
    return {"tables": {"fields": fields, "rows_per_table": rows, "dim": dim, "samples": samples, "batch": batch,
                       "fp32_bytes": table_bytes},
            "runs": runs, "formula": formula_bytes(overrides, 2), "memory_cap_bytes": cap, "capped": capped,
            "exchange_times": exchange_times(), "placement": placement_bytes(rows, dim, batch),
            "peers": peer_steps(peers, fields, rows, dim, batch) if peers else [],
            "criteo_parity": criteo_parity(criteo), "on_paper": on_paper()}


def memory_cap(one: dict, ranks: dict) -> int | None:
    """An address-space limit (RLIMIT_AS, per process, inherited by the launcher's ranks) 15% above the
    largest peak address space a rank of the 2-rank job reached, below the peak one process reached: each
    rank can train under it, one process cannot (None when one process needed no more than that)."""
    if not (one.get("ok") and ranks.get("ok")):
        return None
    alone, shared = one["peak_virtual_bytes"][0], max(ranks["peak_virtual_bytes"])
    cap = int(shared * 1.15)
    return cap if cap < alone else None


def markdown(result: dict) -> str:
    t = result["tables"]
    lines = [f"Tables: {t['fields']} x {t['rows_per_table']:,} rows x {t['dim']} (fp32 {t['fp32_bytes'] / 2**30:.2f} GiB, "
             f"Adam state twice that), {t['samples']:,} synthetic Criteo-format examples, batch {t['batch']} "
             f"(global), 1 epoch.", "",
             "| run | examples/s | vs one process | peak RSS per rank | exchanged / rank / step | all-reduced / rank / step | test AUC |",
             "|---|---|---|---|---|---|---|"]
    base = result["runs"][0].get("examples_per_second")
    for run in result["runs"]:
        if not run["ok"]:
            lines.append(f"| {run['name']} | failed: {run['error']} | | | | | |")
            continue
        rss = ", ".join(f"{b / 2**30:.2f} GiB" for b in run["peak_rss_bytes"] if b)
        exchanged = ", ".join(f"{b / 2**20:.2f} MiB" for b in run.get("exchange_bytes_per_step", []))
        reduced = ", ".join(f"{b / 2**20:.2f} MiB" for b in run.get("allreduce_bytes_per_step", []))
        auc = f"{run['test_auc']:.4f}" if run["test_auc"] is not None else "n/a"
        lines.append(f"| {run['name']} | {run['examples_per_second']:,.0f} | {run['examples_per_second'] / base:.2f}x | "
                     f"{rss or 'n/a'} | {exchanged or '-'} | {reduced or '-'} | {auc} |")
    sharded = next(r for r in result["runs"] if r["name"].startswith("sharded"))
    if sharded["ok"]:
        formula = result["formula"]["bytes_per_step"]
        ratios = [m / f for m, f in zip(sharded["exchange_bytes_per_step"], formula)]
        lines += ["", "Exchanged bytes per step, measured by the exchange against the formula from the batches' ids: " +
                  ", ".join(f"rank {r}: {m / 2**20:.3f} MiB vs {f / 2**20:.3f} MiB ({q:.3f}x)"
                            for r, (m, f, q) in enumerate(zip(sharded["exchange_bytes_per_step"], formula, ratios)))]
    if result["memory_cap_bytes"]:
        lines += ["", f"Memory cap (RLIMIT_AS) {result['memory_cap_bytes'] / 2**30:.2f} GiB per process:"]
        for run in result["capped"]:
            lines.append(f"- {run['name']}: " + ("trained, " + f"{run['examples_per_second']:,.0f} examples/s, test AUC "
                                                 f"{run['test_auc']:.4f}" if run["ok"] else
                                                 f"failed: {run['error']} (its last line: {run['last_line']})"))
    lines += ["", "One exchange, 2 ranks, median of 50 (the time of the slower rank is what a step waits for):", "",
              "| float32 values to each peer | pairwise send/recv | all_gather |", "|---|---|---|"]
    for row in result["exchange_times"]:
        lines.append(f"| {row['values_per_peer']:,} ({row['bytes_per_peer'] / 1024:,.0f} KiB) | {row['pairwise_us']:,.0f} us | "
                     f"{row['all_gather_us']:,.0f} us |")
    if result.get("placement"):
        lines += ["", placement_markdown(result["placement"], f"2 x {t['rows_per_table']:,} x {t['dim']}, global batch "
                                         f"{t['batch']}, Zipf(1.2) ids").rstrip()]
    if result.get("peers"):
        lines += ["", peers_markdown(result["peers"], f"{t['fields']} x {t['rows_per_table']:,} x {t['dim']}, one Zipf(1.2) "
                                                      f"id per example and table, global batch {t['batch']}").rstrip()]
    parity = result["criteo_parity"]
    if parity["auc_difference"] is not None:
        lines += ["", f"Criteo-format data ({parity['data']}, configs/sharded_criteo.yaml, 26 categorical fields): test AUC "
                  f"{parity['one']['test_auc']:.4f} in one process, {parity['two']['test_auc']:.4f} with 2 ranks "
                  f"(difference {parity['auc_difference']:+.4f}); {parity['one']['examples_per_second']:,.0f} against "
                  f"{parity['two']['examples_per_second']:,.0f} examples/s."]
    lines += ["", "On paper, a 10^9-row x 64 table (26 fields, 4096 examples per rank, half of a rank's ids distinct), "
              "bytes per rank per step:", "",
              "| ranks | sharded exchange | all-reduce of the table | PS pull + push | table + Adam per rank, sharded | replicated |",
              "|---|---|---|---|---|---|"]
    for row in result["on_paper"]:
        lines.append(f"| {row['ranks']} | {row['sharded_exchange'] / 2**20:.1f} MiB | {row['allreduce_table'] / 2**30:.0f} GiB | "
                     f"{row['ps_pull_push'] / 2**20:.1f} MiB | {row['table_and_adam_per_rank_sharded'] / 2**30:.1f} GiB | "
                     f"{row['table_and_adam_per_rank_replicated'] / 2**30:.0f} GiB |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # a rank of exchange_times' or placement_bytes' launch
    sys.path.insert(0, str(ROOT))
    if len(sys.argv) == 4 and sys.argv[1] == "--probe":
        _probe(Path(sys.argv[2]), int(sys.argv[3]))
    if len(sys.argv) == 7 and sys.argv[1] == "--placement-probe":
        _placement_probe(Path(sys.argv[2]), *map(int, sys.argv[3:]))
    if len(sys.argv) == 9 and sys.argv[1] == "--step-probe":
        _step_probe(Path(sys.argv[2]), sys.argv[3], *map(int, sys.argv[4:]))
