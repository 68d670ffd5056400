"""Cache benchmarks for tools/bench.py: policy hit rates against Belady's optimum on Zipf traces, and
training step time through the cache against the whole table resident."""
from __future__ import annotations

import time

import numpy as np
import paddle
import paddle.nn.functional as F

from paddle_edo.benchmark import side_by_side
from paddle_edo.cache import SlotMap, belady_hit_rate
from paddle_edo.data import zipf_ids
from paddle_edo.nn import CachedEmbedding, DenseEmbedding, bind_optimizer
from paddle_edo.runtime import gpu_available


def distinct_per_batch(rows: int, steps: int, batch_ids: int, alpha: float, seed: int) -> list[np.ndarray]:
    """A Zipf(alpha) id trace cut into batches, each reduced to its distinct ids (what a cache sees)."""
    trace = zipf_ids(rows, (steps, batch_ids), alpha, np.random.default_rng(seed))  # one CDF for all steps
    return [np.unique(batch) for batch in trace]


def policy_hit_rate(batches: list[np.ndarray], rows: int, capacity: int, policy: str) -> float:
    """Hit rate of the cache's own slot map and policy on the trace (distinct ids per batch)."""
    slots = SlotMap(rows, capacity, policy)
    hits = total = 0
    for ids in batches:
        hits += int((slots.slot_of[ids] >= 0).sum())
        total += len(ids)
        slots.admit(ids, pin=False)
    return hits / total


def hit_rate_benchmark(rows_list: list[int], ratios: list[float], steps: int, batch_ids: int, alpha: float) -> dict:
    results = []
    for rows in rows_list:
        batches = distinct_per_batch(rows, steps, batch_ids, alpha, seed=rows)
        trace = np.concatenate(batches)
        for ratio in ratios:
            capacity = int(ratio * rows)
            entry = {"rows": rows, "cache_ratio": ratio, "cache_rows": capacity}
            for policy in ("lru", "lfu"):
                entry[policy] = policy_hit_rate(batches, rows, capacity, policy)
            start = time.perf_counter()
            entry["belady"] = belady_hit_rate(trace, capacity)
            entry["belady_seconds"] = time.perf_counter() - start
            for policy in ("lru", "lfu"):
                entry[f"{policy}_vs_belady"] = entry[policy] / entry["belady"]
            print(f"rows {rows:>9,}  cache {ratio:>4.0%}  lru {entry['lru']:.4f}  lfu {entry['lfu']:.4f}  "
                  f"belady {entry['belady']:.4f}  lfu/belady {entry['lfu_vs_belady']:.3f}", flush=True)
            results.append(entry)
    return {"settings": {"steps": steps, "ids_per_step": batch_ids, "zipf_alpha": alpha,
                         "distinct_ids_in_trace": "per batch; the trace is their concatenation"},
            "hit_rates": results}


class PooledModel(paddle.nn.Layer):
    """Sum-pooled multi-hot ids -> MLP -> logit: a CTR tower with one large table."""

    def __init__(self, table: paddle.nn.Layer, dim: int) -> None:
        super().__init__()
        self.table = table
        self.mlp = paddle.nn.Sequential(paddle.nn.Linear(dim, 64), paddle.nn.ReLU(), paddle.nn.Linear(64, 1))

    def forward(self, ids: paddle.Tensor) -> paddle.Tensor:
        return self.mlp(self.table(ids).sum(axis=1)).squeeze(-1)


def step_time_benchmark(rows: int, dim: int, batch: int, ids_per_sample: int, ratio: float, alpha: float,
                        warmup: int, repeats: int) -> dict:
    """Median training-step time (lazy Adam) with the table resident, through a cache of ``ratio`` (prefetch
    off and on), and through a cache of half a batch's distinct rows (the rest served from the host every
    step), on the same Zipf batches, measured round-robin."""
    batches = list(zipf_ids(rows, (warmup + repeats + 1, batch, ids_per_sample), alpha, np.random.default_rng(0)))
    labels = [paddle.to_tensor((b.sum(axis=1) % 2).astype("float32")) for b in batches]
    cache_rows = int(ratio * rows)
    small_rows = min(len(np.unique(b)) for b in batches) // 2

    def runner(table: paddle.nn.Layer, prefetch: bool):
        paddle.seed(0)
        model = PooledModel(table, dim)
        optimizer = paddle.optimizer.Adam(1e-3, parameters=model.parameters(), lazy_mode=True)
        bind_optimizer(model, optimizer)
        position = [0]

        def step() -> None:
            i = position[0]
            position[0] += 1
            loss = F.binary_cross_entropy_with_logits(model(paddle.to_tensor(batches[i])), labels[i])
            if prefetch:
                table.prefetch(batches[i + 1])
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
        return step, table

    candidates, tables = {}, {}
    for name, make, prefetch in (
            ("resident", lambda: DenseEmbedding(rows, dim), False),
            ("cached, prefetch off", lambda: CachedEmbedding(rows, dim, cache_rows=cache_rows, policy="lfu",
                                                             prefetch=False), False),
            ("cached, prefetch on", lambda: CachedEmbedding(rows, dim, cache_rows=cache_rows, policy="lfu",
                                                            prefetch=True), True),
            ("cache under a batch", lambda: CachedEmbedding(rows, dim, cache_rows=small_rows, policy="lfu",
                                                            prefetch=True), True)):
        candidates[name], tables[name] = runner(make(), prefetch)
    sync = paddle.device.synchronize if gpu_available() else None
    ms = side_by_side(candidates, repeats=repeats, warmup=warmup, sync=sync)
    hit_rates = {n: t.statistics()["hit_rate"] for n, t in tables.items() if isinstance(t, CachedEmbedding)}
    return {"settings": {"rows": rows, "dim": dim, "batch": batch, "ids_per_sample": ids_per_sample,
                         "cache_rows": cache_rows, "small_cache_rows": small_rows,
                         "policy": "lfu", "zipf_alpha": alpha, "optimizer": "adam lazy",
                         "warmup_steps": warmup, "timed_steps": repeats, "device": paddle.get_device()},
            "ms_per_step": ms, "hit_rate": hit_rates,
            "bypass_rows_per_step": tables["cache under a batch"].statistics()["bypass_rows"] / (warmup + repeats),
            "time_vs_resident": {n: v / ms["resident"] for n, v in ms.items()}}


def markdown(hit_rates: dict, step_times: list[dict]) -> str:
    """The hit rates' table (none when the run skipped them, in a folder without earlier ones) and the step
    times' table."""
    lines = []
    if hit_rates["hit_rates"]:
        lines += ["| rows | cache | LRU | LFU | Belady | LRU / Belady | LFU / Belady |", "|---|---|---|---|---|---|---|"]
        for e in hit_rates["hit_rates"]:
            lines.append(f"| {e['rows']:,} | {e['cache_ratio']:.0%} | {e['lru']:.4f} | {e['lfu']:.4f} | "
                         f"{e['belady']:.4f} | {e['lru_vs_belady']:.3f} | {e['lfu_vs_belady']:.3f} |")
        lines.append("")
    lines += ["| device | rows | cache | step ms resident | cache, no prefetch | cache, prefetch | "
              "ratio (prefetch) | cache of half a batch (rows) | its ms | rows from the host a step |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in step_times:
        s, ms = r["settings"], r["ms_per_step"]
        lines.append(f"| {s['device']} | {s['rows']:,} | {s['cache_rows']:,} | {ms['resident']:.2f} | "
                     f"{ms['cached, prefetch off']:.2f} | {ms['cached, prefetch on']:.2f} | "
                     f"{r['time_vs_resident']['cached, prefetch on']:.2f}x | {s['small_cache_rows']:,} | "
                     f"{ms['cache under a batch']:.2f} | {r['bypass_rows_per_step']:.0f} |")
    return "\n".join(lines)
