"""Capacity benchmark for tools/bench.py: the largest table (rows x dim, one table, every row allocated and
initialised) that each configuration trains for a number of steps, on batches whose ids are drawn from all
its rows, without passing a memory limit, found by doubling then bisection. Each trial runs in its own
process (``python tools/bench_capacity.py trial ...``); the parent polls its anonymous resident memory
(RssAnon + RssShmem: what must stay in RAM; an mmap table file's pages are the page cache's, which the
kernel writes back and drops) and stops it at the limit, so that a trial over the limit fails for the
reason measured, before the machine swaps or kills anything. Examples/s of every configuration is also
taken at the baseline's largest size, side by side."""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "paddle.nn.Embedding + Adam"
# name -> (what the trial builds, bytes a value takes in memory by formula: to start the doubling near the limit)
CONFIGS = {
    BASELINE: ("paddle_adam", 3 * 4),
    "DenseEmbedding + row-wise Adagrad": ("dense_rowwise_adagrad", 4),
    "int8 low_precision + row-wise Adagrad": ("int8_rowwise_adagrad", 1),
    "fp16 low_precision + 8-bit Adam": ("fp16_adam8", 2 + 2),
    "cached, mmap host store + Adam": ("cached_mmap_adam", 0),
    # in RAM: the rule's fp32 a row and the slot map's int32 a row
    "cached, mmap int8 host store + row-wise Adagrad": ("cached_mmap_int8_rowwise_adagrad", (4 + 4) / 64),
}
CACHED = ("cached_mmap_adam", "cached_mmap_int8_rowwise_adagrad")


def disk_bytes(kind: str, rows: int, dim: int) -> int:
    """The host file at its largest: fp32 rows, then a copy with Adam's two moments beside each row that
    binding the optimizer writes beside it (both at once); int8 records of dim codes and two fp16 row
    parameters (the rule's state stays in RAM)."""
    if kind == "cached_mmap_adam":
        return rows * dim * (1 + 3) * 4
    return rows * (dim + 4) if kind == "cached_mmap_int8_rowwise_adagrad" else 0
DISK_MARGIN = 8 * 2**30  # left free on the disk the table files go to
ENV = {**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": str(ROOT)}


def rss_anon(pid: int) -> int:
    """A process's anonymous and shared resident bytes (0 once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return sum(int(fields.get(key, "0 kB").split()[0]) * 1024 for key in ("RssAnon", "RssShmem"))


def run_trial(kind: str, rows: int, dim: int, ids: str, steps: int, batch: int, limit: int, scratch: Path,
              threads: int, timeout: float) -> dict:
    """One trial in its own process, stopped when its resident memory passes ``limit``; one whose table file
    would not fit the free disk (less a margin) fails without being run."""
    on_disk = disk_bytes(kind, rows, dim)
    free = shutil.disk_usage(scratch).free - DISK_MARGIN
    if on_disk > free:
        return {"rows": rows, "ok": False, "peak_rss_anon_bytes": 0, "wall_seconds": 0.0,
                "why": f"its table file ({on_disk / 2**30:.1f} GiB) would not fit the free disk ({free / 2**30:.1f} GiB "
                       f"above an {DISK_MARGIN / 2**30:.0f} GiB margin)"}
    command = [sys.executable, str(Path(__file__)), "trial", kind, str(rows), str(dim), ids, str(steps), str(batch),
               str(scratch), str(threads)]
    start, peak, stopped = time.perf_counter(), 0, None
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, env=ENV, cwd=ROOT)
        while process.poll() is None:
            peak = max(peak, rss_anon(process.pid))
            if peak > limit:
                stopped = f"resident memory passed the limit ({peak / 2**30:.2f} GiB)"
            elif time.perf_counter() - start > timeout:
                stopped = f"over {timeout:.0f} s"
            if stopped:
                process.kill()
                process.wait()
                break
            time.sleep(0.05)
        out.seek(0)
        err.seek(0)
        lines = [line for line in out.read().splitlines() if line.startswith("{")]
        errors = [line for line in err.read().splitlines() if "Error" in line or "error" in line]
    found = {"rows": rows, "ok": process.returncode == 0 and not stopped and bool(lines),
             "peak_rss_anon_bytes": peak, "wall_seconds": time.perf_counter() - start}
    if lines:
        found.update(json.loads(lines[-1]))
    if not found["ok"]:
        found["why"] = stopped or (errors[-1] if errors else f"exit {process.returncode}")
    return found


def logged_trial(trials: list[dict], log, kind: str, rows: int, *settings) -> bool:
    """run_trial(kind, rows, *settings), kept in ``trials`` and logged; whether it trained."""
    found = run_trial(kind, rows, *settings)
    trials.append(found)
    log(f"  {rows:,} rows: {'trains' if found['ok'] else 'fails: ' + found['why']} "
        f"(peak {found['peak_rss_anon_bytes'] / 2**30:.2f} GiB, {found['wall_seconds']:.0f} s)")
    return found["ok"]


def largest(kind: str, dim: int, ids: str, steps: int, batch: int, limit: int, scratch: Path, threads: int,
            start_rows: int, precision: float, timeout: float, log, bracket: tuple[int, int | None] | None = None
            ) -> dict:
    """Double from ``start_rows`` until a trial fails, then bisect until the largest size that trains is
    within ``precision`` of the smallest that does not. ``bracket``: (largest that trained, smallest that
    failed) of an earlier search (another id distribution), tried first: the search goes on from what they
    give (two trials when both hold)."""
    trials = []

    def trial(rows: int) -> bool:
        return logged_trial(trials, log, kind, rows, dim, ids, steps, batch, limit, scratch, threads, timeout)

    good, bad = 0, None
    rows = start_rows
    if bracket is not None:
        low, high = bracket
        if trial(low):
            good, rows = low, high or low * 2
        else:
            bad = low
    while bad is None:
        if trial(rows):
            good, rows = rows, rows * 2
        else:
            bad = rows
    if good == 0:  # the start was too large: halve until one trains
        rows = bad // 2
        while rows >= 1 and not trial(rows):
            bad, rows = rows, rows // 2
        good = max(rows, 0)
    while good and bad / good > 1 + precision:
        middle = (good + bad) // 2
        if trial(middle):
            good = middle
        else:
            bad = middle
    best = next((t for t in trials if t["rows"] == good and t["ok"]), None)
    return {"largest_rows": good, "smallest_failing_rows": bad, "trials": trials, "at_largest": best}


def start_for(kind: str, bytes_per_value: float, dim: int, limit: int, disk: int) -> int:
    """A power of two some 4x below what the formulas say fits in memory and on disk: the doubling then
    passes the limit in a few trials."""
    fits = min(limit / (bytes_per_value * dim) if bytes_per_value else math.inf,
               disk / disk_bytes(kind, 1, dim) if kind in CACHED else math.inf)
    return 2 ** max(16, int(math.log2(fits / 4)))


def at_sizes(kind: str, sizes: list[int], dim: int, ids: str, steps: int, batch: int, limit: int, scratch: Path,
             threads: int, timeout: float, log) -> dict:
    """Trials at the given sizes alone (no search): the largest that trains, the smallest that fails (None
    when none does)."""
    trials = []
    for rows in sorted(sizes):
        logged_trial(trials, log, kind, rows, dim, ids, steps, batch, limit, scratch, threads, timeout)
    good = max((t["rows"] for t in trials if t["ok"]), default=0)
    bad = min((t["rows"] for t in trials if not t["ok"]), default=None)
    return {"largest_rows": good, "smallest_failing_rows": bad, "trials": trials, "searched": False,
            "at_largest": next((t for t in trials if t["rows"] == good and t["ok"]), None)}


def capacity_benchmark(configs: list[str], dim: int, steps: int, batch: int, limit_gib: float, scratch: Path,
                       threads: int, precision: float, timeout: float, distributions: list[str],
                       at_rows: list[int] | None = None, speed_rows: int | None = None,
                       brackets: dict[str, tuple[int, int | None]] | None = None) -> dict:
    """Each configuration's largest size by search (or its trials at ``at_rows``), then every configuration
    at the baseline's largest size (or ``speed_rows``), one after the other, for examples/s. ``brackets``:
    per configuration, an earlier search's (largest that trained, smallest that failed), where the search
    starts."""
    limit = int(limit_gib * 2**30)
    scratch.mkdir(parents=True, exist_ok=True)
    result: dict = {"dim": dim, "steps": steps, "batch": batch, "limit_bytes": limit, "precision": precision,
                    "disk_free_bytes": shutil.disk_usage(scratch).free, "searches": {}, "speed": {}}
    for ids in distributions:
        result["searches"][ids] = {}
        for name in configs:
            kind, bytes_per_value = CONFIGS[name]
            print(f"{ids} ids: {name}", flush=True)
            if at_rows:
                result["searches"][ids][name] = at_sizes(kind, at_rows, dim, ids, steps, batch, limit, scratch, threads,
                                                         timeout, lambda line: print(line, flush=True))
                continue
            result["searches"][ids][name] = largest(kind, dim, ids, steps, batch, limit, scratch, threads,
                                                    start_for(kind, bytes_per_value, dim, limit,
                                                              result["disk_free_bytes"]), precision, timeout,
                                                    lambda line: print(line, flush=True), (brackets or {}).get(name))
        baseline_rows = speed_rows or result["searches"][ids].get(BASELINE, {}).get("largest_rows")
        if baseline_rows:  # every configuration at the baseline's largest size, one after the other
            print(f"{ids} ids: speed at {baseline_rows:,} rows", flush=True)
            result["speed"][ids] = {"rows": baseline_rows, "runs": {
                name: run_trial(CONFIGS[name][0], baseline_rows, dim, ids, steps, batch, limit, scratch, threads,
                                timeout) for name in configs}}
    return result


def brackets_of(path: Path, ids: str = "zipf") -> dict[str, tuple[int, int | None]]:
    """Each configuration's (largest that trained, smallest that failed) in a capacity report's search with
    ``ids``; searches stopped by hand (no failing size) and trials at given sizes are left out."""
    searches = json.loads(Path(path).read_text())["searches"].get(ids, {})
    return {name: (found["largest_rows"], found["smallest_failing_rows"]) for name, found in searches.items()
            if found.get("searched", True) and found["largest_rows"] and found["smallest_failing_rows"]}


def reason(why: str) -> str:
    """A failed trial's reason as a report says it."""
    if "error:12" in why:  # Paddle's CPU allocator on ENOMEM
        return "the table's allocation refused (ENOMEM: more than the kernel commits)"
    return why


def markdown(result: dict) -> str:
    from paddle_edo.memory import format_bytes

    lines = [f"Limit: {format_bytes(result['limit_bytes'])} resident (anonymous) memory; one table x "
             f"{result['dim']}; {result['steps']} training steps of {result['batch']:,} examples (4 ids each, "
             f"mean-pooled, a linear head); bisection to {result['precision']:.0%}; disk free at the start "
             f"{format_bytes(result['disk_free_bytes'])}. Each trial is a process of its own with glibc's default "
             f"allocator (the malloc line above is the parent's).", ""]
    for ids, searches in result["searches"].items():
        speed = result["speed"].get(ids, {})
        base = searches.get(BASELINE, {}).get("largest_rows") or speed.get("rows", 0)
        lines += [f"#### {ids} ids", "",
                  f"| configuration | largest rows that train | x baseline | smallest that fails (why) | peak "
                  f"resident at largest | bytes per row held (table, state; a cached table's host file too) | "
                  f"examples/s at {speed.get('rows', 0):,} rows | x baseline |",
                  "|---|---|---|---|---|---|---|---|"]
        runs = speed.get("runs", {})
        base_speed = runs.get(BASELINE, {}).get("examples_per_second")
        for name, search in searches.items():
            good, at = search["largest_rows"], search["at_largest"] or {}
            failing = next((t for t in search["trials"] if t["rows"] == search["smallest_failing_rows"]), {})
            run = runs.get(name, {})
            per_second = run.get("examples_per_second")
            fails = f"{search['smallest_failing_rows']:,} ({reason(failing.get('why', '?'))})" \
                if search["smallest_failing_rows"] else "none failed" if search.get("searched", True) is False else "-"
            lines.append(
                f"| {name} | {good:,}{'' if search.get('searched', True) else ' (tried alone)'} | {good / base:.1f}x | {fails} "
                f"| {format_bytes(at.get('peak_rss_anon_bytes', 0))} | "
                f"{at.get('bytes_per_row', run.get('bytes_per_row', float('nan'))):.1f} | "
                f"{f'{per_second:,.0f}' if per_second else run.get('why', '-')} | "
                f"{f'{per_second / base_speed:.2f}x' if per_second and base_speed else '-'} |" if base else
                f"| {name} | {good:,} | - | - | - | - | - | - |")
        lines.append("")
    return "\n".join(lines).rstrip()


# ------------------------------------------------------------------------------------------------ trial
def trial_ids(rows: int, shape: tuple[int, int], ids: str, rng) -> "np.ndarray":
    """Ids over all ``rows``: uniform, or Zipf(1.05) ranks (inverse CDF of the continuous power law, no
    table of the ranks' probabilities) spread over the table by a multiplicative permutation."""
    import numpy as np

    if ids == "uniform":
        return rng.integers(0, rows, shape, dtype=np.int64)
    alpha = 1.05
    u = rng.random(shape)
    top = (rows + 1.0) ** (1 - alpha)
    ranks = np.floor((1 + u * (top - 1)) ** (1 / (1 - alpha))).astype(np.int64) - 1
    ranks = np.clip(ranks, 0, rows - 1)
    step = 0x9E3779B1 % rows or 1
    while math.gcd(step, rows) != 1:
        step += 1
    return (ranks * step + rows // 3) % rows


def trial(kind: str, rows: int, dim: int, ids: str, steps: int, batch: int, scratch: str, threads: int) -> None:
    """Build the table, train ``steps`` steps, print one JSON line: seconds to build, examples/s (median
    step after 10), the held bytes the memory report counts and per row."""
    import numpy as np
    import paddle
    import paddle.nn.functional as F

    from paddle_edo.memory import memory_report
    from paddle_edo.nn import CachedEmbedding, DenseEmbedding, QuantizedEmbedding, RowTrainer, bind_optimizer
    from paddle_edo.optim import TableOptimizer
    from paddle_edo.runtime import set_num_threads

    set_num_threads(threads)
    paddle.seed(1)
    started = time.perf_counter()
    head = paddle.nn.Linear(dim, 1)
    trainer = None
    folder = None
    if kind == "paddle_adam":
        table = paddle.nn.Embedding(rows, dim, sparse=True)
        optimizer = paddle.optimizer.Adam(0.001, parameters=[*table.parameters(), *head.parameters()], lazy_mode=True)
    elif kind == "cached_mmap_adam":
        folder = Path(tempfile.mkdtemp(dir=scratch))
        table = CachedEmbedding(rows, dim, cache_rows=min(rows, 1 << 20), host="mmap", path=folder / "table.f32",
                                reopen=False)
        optimizer = paddle.optimizer.Adam(0.001, parameters=[*table.parameters(), *head.parameters()], lazy_mode=True)
    elif kind == "cached_mmap_int8_rowwise_adagrad":
        folder = Path(tempfile.mkdtemp(dir=scratch))
        table = CachedEmbedding(rows, dim, cache_rows=min(rows, 1 << 20), host="mmap", path=folder / "table.int8",
                                reopen=False, host_format="int8")
        trainer = RowTrainer(TableOptimizer("rowwise_adagrad", 0.01), {"table": table})
        optimizer = paddle.optimizer.Adam(0.001, parameters=head.parameters())
    else:
        table = DenseEmbedding(rows, dim) if kind == "dense_rowwise_adagrad" else \
            QuantizedEmbedding(rows, dim, "int8" if kind.startswith("int8") else "fp16", "low_precision")
        rule = TableOptimizer("adam", 0.001, state_dtype="int8") if kind == "fp16_adam8" else \
            TableOptimizer("rowwise_adagrad", 0.01)
        trainer = RowTrainer(rule, {"table": table})
        optimizer = paddle.optimizer.Adam(0.001, parameters=head.parameters())
    model = paddle.nn.LayerList([table, head])
    if kind == "cached_mmap_adam":
        bind_optimizer(model, optimizer)
    built = time.perf_counter() - started
    rng = np.random.default_rng(2)
    times = []
    try:
        for _ in range(steps):
            batch_ids = paddle.to_tensor(trial_ids(rows, (batch, 4), ids, rng))
            labels = paddle.to_tensor(rng.integers(0, 2, [batch, 1]).astype("float32"))
            begin = time.perf_counter()
            logits = head(table(batch_ids).mean(axis=1))
            loss = F.binary_cross_entropy_with_logits(logits, labels)
            loss.backward()
            optimizer.step()
            if trainer is not None:
                trainer.step()
                trainer.clear_grad()
            optimizer.clear_grad()
            times.append(time.perf_counter() - begin)
        report = memory_report(model, optimizer)
        table_report = report.tables[0]
        held = table_report.held_bytes + table_report.optimizer_held_bytes + table_report.host_bytes
        print(json.dumps({"build_seconds": built, "examples_per_second": batch / float(np.median(times[10:])),
                          "table_bytes": held, "bytes_per_row": held / rows,
                          "on_disk_bytes": table_report.host_bytes if kind in CACHED else 0}), flush=True)
    finally:
        if folder is not None:
            del table, model
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 10 and sys.argv[1] == "trial":
        trial(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6]), int(sys.argv[7]),
              sys.argv[8], int(sys.argv[9]))
    else:
        sys.exit("usage: python tools/bench.py capacity (this file runs its trials)")
