"""Data benchmark for tools/bench.py: parsing and id mapping of Criteo-format text (rows/s), training fed
from the stream against training from memory (examples/s, same model), and a scale run of
tools/train.py on a large file with its peak resident memory."""
from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from paddle_edo import load_config
from paddle_edo.data import TabularSource, write_criteo_synthetic
from paddle_edo.data.stream import prefetched
from paddle_edo.data.tabular import build_plan
from paddle_edo.engine import Engine

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "criteo.yaml"


def criteo_files(folder: Path, rows: int) -> Path:
    """Criteo-format data of ``rows`` rows in ``folder`` (made once, kept for later runs)."""
    marker = folder / f".rows-{rows}"
    if not marker.exists():
        for old in folder.glob("day_*"):
            old.unlink()
        write_criteo_synthetic(folder, rows, files=max(1, rows // 5_000_000))
        marker.touch()
    return folder


def parse_rates(folder: Path, repeats: int) -> dict:
    """Rows/s of the plan pass (parse, count values, statistics) and of parsing and mapping every row to
    model inputs (the work each streamed epoch does), medians of ``repeats``."""
    config = load_config(CONFIG, [f"data.files.path={folder}"])
    source = TabularSource.from_config(config["data"])
    plan_seconds, encode_seconds = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        plan = build_plan(source)
        plan_seconds.append(time.perf_counter() - start)
        bad = source.new_bad_rows()
        start = time.perf_counter()
        for file_index, first_row, batch in prefetched(source.batches(bad)):
            plan.encode(plan.parse(file_index, first_row, batch, bad))
        encode_seconds.append(time.perf_counter() - start)
    rows = sum(plan.rows.values())
    size = sum(f.stat().st_size for f in source.files)
    return {"rows": rows, "bytes": size, "plan_rows_per_second": rows / float(np.median(plan_seconds)),
            "parse_and_map_rows_per_second": rows / float(np.median(encode_seconds)),
            "parse_and_map_mb_per_second": size / 2**20 / float(np.median(encode_seconds))}


def training_rates(folder: Path, out: Path, repeats: int) -> dict:
    """Examples/s of one DeepFM epoch fed from memory and from the stream, alternated, medians."""
    rates: dict[str, list[float]] = {"in_memory": [], "streamed": []}
    aucs: dict[str, float] = {}
    for repeat in range(repeats):
        for mode, in_memory in (("in_memory", True), ("streamed", False)):
            config = load_config(CONFIG, [f"data.files.path={folder}", f"data.files.in_memory={in_memory}",
                                          f"train.output_dir={out / f'{mode}{repeat}'}", "train.log_every_steps=100000"])
            engine = Engine(config)
            aucs[mode] = engine.fit()["test_auc"]  # the same in every repeat (seeded)
            rates[mode].append(len(engine.splits.train) / engine.history[0]["seconds"])
    medians = {mode: float(np.median(values)) for mode, values in rates.items()}
    return {"examples_per_second": medians, "runs": rates, "test_auc": aucs,
            "streamed_vs_in_memory": medians["streamed"] / medians["in_memory"]}


def scale_run(folder: Path, out: Path) -> dict:
    """tools/train.py with configs/criteo.yaml on the files, streamed; its peak resident memory (wait4),
    wall time, test AUC and the memory report's bytes per table."""
    command = [sys.executable, str(ROOT / "tools" / "train.py"), "-c", str(CONFIG), "-o", f"data.files.path={folder}",
               "-o", f"train.output_dir={out}", "-o", "train.log_every_steps=1000000"]
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "GLOG_minloglevel": "2"})
    stdout, stderr = process.communicate()
    seconds = time.perf_counter() - start
    if process.returncode != 0:
        raise RuntimeError(f"scale run failed: {stderr[-2000:]}")
    tables = {m.group(1): m.group(2) for m in re.finditer(r"^memory (\S+)\s+.*?, (.+) held", stdout, re.M)}
    auc = float(re.search(r"^test auc (\S+)", stdout, re.M).group(1))
    return {"files_bytes": sum(f.stat().st_size for f in folder.glob("day_*")), "seconds": seconds,
            "peak_rss_bytes": peak_child_rss(), "test_auc": auc, "tables_held": tables}


def peak_child_rss() -> int:
    """Peak resident bytes of the largest child process waited for (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


def markdown(result: dict) -> str:
    parse, training = result["parse"], result["training"]
    lines = [f"Criteo-format text, {parse['rows']:,} rows ({parse['bytes'] / 2**20:.0f} MiB), "
             f"{result['settings']['threads']} threads", "",
             "| measure | value |", "|---|---|",
             f"| plan pass (parse, count values, statistics) | {parse['plan_rows_per_second']:,.0f} rows/s |",
             f"| parse and map every row to model inputs | {parse['parse_and_map_rows_per_second']:,.0f} rows/s "
             f"({parse['parse_and_map_mb_per_second']:.0f} MiB/s) |",
             f"| DeepFM epoch fed from memory | {training['examples_per_second']['in_memory']:,.0f} examples/s |",
             f"| DeepFM epoch fed from the stream | {training['examples_per_second']['streamed']:,.0f} examples/s |",
             f"| streamed / in memory | {training['streamed_vs_in_memory']:.2f} |",
             f"| test AUC fed from memory / from the stream (shuffle buffer 200,000 rows) | "
             f"{training['test_auc']['in_memory']:.4f} / {training['test_auc']['streamed']:.4f} |"]
    if "scale" in result:
        scale = result["scale"]
        lines += [f"| scale run: {result['settings']['scale_rows']:,} rows, {scale['files_bytes'] / 2**30:.2f} GiB of "
                  f"text, one streamed epoch | {scale['seconds'] / 60:.1f} min, peak RSS "
                  f"{scale['peak_rss_bytes'] / 2**30:.2f} GiB, test AUC {scale['test_auc']:.4f} |"]
        held = ", ".join(f"{name.split('.')[-1]} {size}" for name, size in scale["tables_held"].items()
                         if name.startswith("embeddings."))
        lines += ["", f"Tables held in the scale run (embeddings, dim 16; first-order tables beside them): {held}"]
    return "\n".join(lines)
