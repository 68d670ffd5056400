"""Lookup and pooled-lookup speed, side by side in one process (tools/bench.py lookups).

Every candidate reads the same ids from tables holding the same values; times are medians of rounds run
round-robin, each timed call right after an untimed one of the same candidate (the caches as its own last
call left them, as the peers' consecutive calls find them). GB/s counts the table bytes a lookup reads
and the fp32 bytes it writes.
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import paddle

from paddle_edo.benchmark import MALLOC_ENV, PRIMING_S, TimedElsewhere, side_by_side
from paddle_edo.data import zipf_ids
from paddle_edo.nn import DenseEmbedding, EmbeddingBag, QuantizedEmbedding
from paddle_edo.nn.quantized import OUTPUT_DTYPES
from paddle_edo.quant import FORMATS

BAG_LENGTHS = (1, 5, 20)
BAG_FORMATS = ("fp32", "int8", "int4")
STATIC_FORMATS = ("fp32", "int8", "int4")  # to_static of these beside nn.Embedding's
HALF_OUTPUTS = tuple(d for d in OUTPUT_DTYPES if d != "float32")  # QuantizedEmbedding's, for mixed precision


def copy_bandwidth(megabytes: int = 256, repeats: int = 5) -> float:
    """GB/s of a large numpy copy (read + write), this machine's memory bandwidth as a yardstick."""
    source = np.ones(megabytes * (1 << 20) // 4, dtype=np.float32)
    target = np.empty_like(source)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(target, source)
        seconds.append(time.perf_counter() - start)
    return 2 * source.nbytes / float(np.median(seconds)) / 1e9


def ids_for(rows: int, shape: tuple[int, ...], distribution: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if distribution == "zipf":
        return zipf_ids(rows, shape, 1.05, rng)
    return rng.integers(0, rows, shape).astype(np.int64)


def to_static_times(layers: dict[str, paddle.nn.Layer], ids: paddle.Tensor, repeats: int) -> dict[str, float]:
    """Milliseconds of each layer under ``paddle.jit.to_static`` as users call it (its default mode), no
    gradient."""
    compiled = {}
    for name, layer in layers.items():
        layer.eval()
        compiled[name] = paddle.jit.to_static(Lookups(layer))
    with paddle.no_grad():
        return side_by_side({name: (lambda m=model: m([ids])) for name, model in compiled.items()}, repeats,
                            primed=True)


def inference_lookup_times(layers: dict[str, paddle.nn.Layer], ids: np.ndarray, repeats: int, threads: int
                           ) -> dict[str, dict[str, float]]:
    """Milliseconds of a Paddle Inference predictor (CPU, input copied in, output copied out) over each
    layer saved by ``export_model``: with the composite ops (the default) and with the fused kernels."""
    from paddle_edo.export import Predictor, export_model

    spec = [paddle.static.InputSpec([None, ids.shape[1]], "int64", name="ids")]
    predictors = {}
    with tempfile.TemporaryDirectory() as tmp:
        for fused in (False, True):
            for index, (name, layer) in enumerate(layers.items()):
                layer.eval()
                prefix = export_model(Lookups(layer), spec, f"{tmp}/{int(fused)}-{index}/model", fused_kernels=fused)
                predictors[(fused, name)] = Predictor(prefix, device="cpu", num_threads=threads)
    times = side_by_side({key: (lambda p=p: p.run([ids])) for key, p in predictors.items()}, repeats, primed=True)
    return {mode: {name: times[(fused, name)] for name in layers}
            for mode, fused in (("inference, composite", False), ("inference, fused", True))}


class Peers:
    """torch's and FBGEMM's lookups and bags over the same table and ids, served by tools/bench_peers.py under
    ``python`` (an interpreter with torch and fbgemm-gpu-cpu) in a process that stays up for one table and
    distribution: its ``candidates`` are timed call by call in side_by_side's rounds, beside Paddle's."""

    SETTLE_S = 0.25  # Paddle's Intel OpenMP workers spin 200 ms after a parallel region (KMP_BLOCKTIME): 0.2 s
    # of CPU in the 0.5 s after a lookup, measured; a peer timed meanwhile would share the cores with them

    def __init__(self, python: str, weight: np.ndarray, ids: np.ndarray, bag_ids: dict[int, np.ndarray],
                 threads: int) -> None:
        self._folder = tempfile.TemporaryDirectory()
        np.save(f"{self._folder.name}/weight.npy", weight)
        np.save(f"{self._folder.name}/ids.npy", ids)
        for length, bags in bag_ids.items():
            np.save(f"{self._folder.name}/bags_L{length}.npy", bags)
        self._process = subprocess.Popen(
            [python, str(Path(__file__).with_name("bench_peers.py")), self._folder.name, "--threads", str(threads),
             "--priming-s", str(PRIMING_S)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, **MALLOC_ENV})  # malloc as here
        for line in self._process.stdout:  # past anything the libraries print as they load
            if line.startswith("{"):
                self.names = json.loads(line)["candidates"]
                return
        self.close()
        raise RuntimeError(f"tools/bench_peers.py under {python} ended before serving (exit code "
                           f"{self._process.returncode}); its errors are above")

    def candidates(self, length: int | None = None) -> dict[str, TimedElsewhere]:
        """The peers' lookups (``length`` None), or their bags of ``length`` ids."""
        names = [n for n in self.names if (n.endswith(f", L={length}") if length else "L=" not in n)]
        return {name: TimedElsewhere(lambda n=name: self._time(n), self.SETTLE_S) for name in names}

    def _time(self, name: str) -> float:
        self._process.stdin.write(name + "\n")
        self._process.stdin.flush()
        reply = self._process.stdout.readline()
        if not reply:
            raise RuntimeError(f"tools/bench_peers.py ended while timing {name!r}; its errors are above")
        return float(reply)

    def close(self) -> None:
        if self._process.stdin:
            self._process.stdin.close()
        self._process.wait()
        self._folder.cleanup()

    def __enter__(self) -> "Peers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Lookups(paddle.nn.Layer):
    """A lookup layer as a model that takes one ids input (for export)."""

    def __init__(self, layer: paddle.nn.Layer) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, inputs: list[paddle.Tensor]) -> paddle.Tensor:
        return self.layer(inputs[0])


def lookups_benchmark(rows: int, dim: int, batch: int, fields: int, distribution: str, repeats: int,
                      inference: bool, threads: int, peers: str | None = None) -> dict:
    """One table size and id distribution: per-id lookups of every format in dynamic graph, under
    to_static and (with ``inference``) in Paddle Inference (composite and fused exports); a bag of L ids
    for each of the batch x fields slots (sum and mean; FBGEMM's and TorchRec's layout) against a lookup
    then a sum, and against torch / FBGEMM run by the ``peers`` Python (timed in the same rounds); a training
    step with bags against a lookup-then-sum step."""
    paddle.seed(0)
    baseline = paddle.nn.Embedding(rows, dim, sparse=True)
    dense = DenseEmbedding(rows, dim, init_std=0.0)
    dense.weight = baseline.weight  # one fp32 table for both
    weight = baseline.weight.numpy()
    ids_np = ids_for(rows, (batch, fields), distribution)
    ids = paddle.to_tensor(ids_np)
    tables = {"fp32": dense, **{name: QuantizedEmbedding.from_embedding(baseline, name) for name in FORMATS}}
    for table in tables.values():
        table.eval()
    bag_ids = {length: ids_for(rows, (batch * fields, length), distribution, seed=length) for length in BAG_LENGTHS}
    with Peers(peers, weight, ids_np, bag_ids, threads) if peers else contextlib.nullcontext() as peer:
        candidates = {"paddle.nn.Embedding fp32": lambda: baseline(ids),
                      "numpy take fp32": lambda: np.take(weight, ids_np, 0)}
        candidates.update({f"paddle_edo {name}": (lambda t=table: t(ids)) for name, table in tables.items()})
        for output_dtype in HALF_OUTPUTS:  # rows written at half the bytes, for mixed precision
            half = QuantizedEmbedding.from_embedding(baseline, "int8", output_dtype=output_dtype)
            half.eval()
            candidates[f"paddle_edo int8 -> {output_dtype}"] = lambda t=half: t(ids)
        candidates.update(peer.candidates() if peer else {})
        with paddle.no_grad():
            ms = side_by_side(candidates, repeats=repeats, primed=True)
        bags = {f"{name} {mode}": EmbeddingBag(rows, dim, mode, table=tables[name])
                for name in BAG_FORMATS for mode in ("sum", "mean")}
        bag_ms = {}
        for length, lengths_ids in bag_ids.items():
            bag_input = paddle.to_tensor(lengths_ids)
            pooled = {f"lookup then sum, L={length}": lambda b=bag_input: baseline(b).sum(axis=1),
                      **{f"bag {name}, L={length}": (lambda bag=bag, b=bag_input: bag(b)) for name, bag in bags.items()},
                      **(peer.candidates(length) if peer else {})}
            with paddle.no_grad():
                bag_ms.update(side_by_side(pooled, repeats=repeats, primed=True))
    static = to_static_times({"paddle.nn.Embedding fp32": baseline, **{f"paddle_edo {n}": tables[n]
                                                                       for n in STATIC_FORMATS}}, ids, repeats)
    ms.update({f"to_static {name}": value for name, value in static.items()})
    served_bags = {f"bag {name}": bags[f"{name} sum"] for name in ("fp32", "int8")}
    long_bags = paddle.to_tensor(bag_ids[max(BAG_LENGTHS)])
    for name, value in to_static_times(served_bags, long_bags, repeats).items():
        bag_ms[f"to_static {name} sum, L={max(BAG_LENGTHS)}"] = value
    if inference:
        served = inference_lookup_times({"fp32": baseline, **{n: t for n, t in tables.items() if n != "fp32"}},
                                        ids_np, repeats, threads)
        for mode, times in served.items():
            for name, value in times.items():
                ms[f"{mode} {name}"] = value
        for mode, times in inference_lookup_times(served_bags, bag_ids[max(BAG_LENGTHS)], repeats, threads).items():
            for name, value in times.items():
                bag_ms[f"{mode} {name} sum, L={max(BAG_LENGTHS)}"] = value

    def row_bytes(name: str) -> int:  # the bytes of a row each candidate reads: its format's
        return next((tables[f].format.row_bytes(dim) for f in FORMATS if f" {f} " in f" {name} "), 4 * dim)
    def output_bytes(name: str) -> int:  # the bytes of a row each candidate writes
        return 2 * dim if name.split(" -> ")[-1] in HALF_OUTPUTS else 4 * dim
    gb_per_s = {name: batch * fields * (row_bytes(name) + output_bytes(name)) / (value / 1e3) / 1e9
                for name, value in ms.items() if not name.startswith("inference")}
    for name, value in bag_ms.items():
        length = int(name.split("L=")[1])
        outputs = batch * fields * (length if name.startswith("lookup then") else 1)
        gb_per_s[name] = (batch * fields * length * row_bytes(name) + outputs * 4 * dim) / (value / 1e3) / 1e9
    steps = training_steps(rows, dim, batch * fields, distribution, repeats)
    return {"settings": {"rows": rows, "dim": dim, "ids": [batch, fields], "bags": [batch * fields, list(BAG_LENGTHS)],
                         "distribution": distribution if distribution == "uniform" else "zipf(1.05)",
                         "repeats": repeats},
            "ms": ms, "bag_ms": bag_ms, "gb_per_s": gb_per_s,
            "speed_vs_fp32": {n: (ms["inference, composite fp32"] if n.startswith("inference") else
                                  ms["to_static paddle.nn.Embedding fp32"] if n.startswith("to_static") else
                                  ms["paddle.nn.Embedding fp32"]) / v for n, v in ms.items()},
            "bag_speed_vs_lookup_then_sum": {n: bag_ms[f"lookup then sum, L={n.split('L=')[1]}"] / v
                                             for n, v in bag_ms.items()},
            "training_step_ms": steps}


def training_steps(rows: int, dim: int, bags: int, distribution: str, repeats: int, length: int = 20) -> dict:
    """Forward + backward + lazy Adam with bags of ``length`` ids summed: EmbeddingBag against
    paddle.nn.Embedding then a sum; and the bag's forward pass alone, and with its backward pass."""
    paddle.seed(0)
    plain = paddle.nn.Embedding(rows, dim, sparse=True)
    bag = EmbeddingBag(rows, dim, "sum", init_std=0.0)
    bag.table.weight.set_value(plain.weight)
    batches = [paddle.to_tensor(ids_for(rows, (bags, length), distribution, seed=100 + i)) for i in range(4)]
    upstream = paddle.to_tensor(np.random.default_rng(0).normal(size=(bags, dim)).astype(np.float32))

    def stepper(layer, pool):
        optimizer = paddle.optimizer.Adam(1e-3, parameters=layer.parameters(), lazy_mode=True)
        position = [0]

        def step():
            ids = batches[position[0] % len(batches)]
            position[0] += 1
            (pool(layer, ids) * upstream).sum().backward()
            optimizer.step()
            optimizer.clear_grad()
        return step
    def forward():
        return bag(batches[0])

    def forward_backward():
        (bag(batches[0]) * upstream).sum().backward()
        bag.clear_gradients()
    ms = side_by_side({"EmbeddingBag step": stepper(bag, lambda layer, ids: layer(ids)),
                       "lookup then sum step": stepper(plain, lambda layer, ids: layer(ids).sum(axis=1)),
                       "EmbeddingBag forward": forward, "EmbeddingBag forward + backward": forward_backward},
                      repeats=repeats)
    ms["speed_vs_lookup_then_sum"] = ms["lookup then sum step"] / ms["EmbeddingBag step"]
    ms["backward_vs_forward"] = (ms["EmbeddingBag forward + backward"] - ms["EmbeddingBag forward"]) / ms[
        "EmbeddingBag forward"]
    return ms


def quantized_training_steps(rows: int, dim: int, batch: int, fields: int, repeats: int) -> dict:
    """Forward + backward + update of a [batch, fields] Zipf(1.05) lookup: QAT tables (lazy Adam on the
    fp32 master) against paddle.nn.Embedding with lazy Adam, and low_precision int8 (the layer's row-wise
    Adagrad) against paddle.nn.Embedding with Adagrad."""
    batches = [paddle.to_tensor(ids_for(rows, (batch, fields), "zipf", seed=200 + i)) for i in range(4)]
    upstream = paddle.to_tensor(np.random.default_rng(0).normal(size=(batch, fields, dim)).astype(np.float32))

    def stepper(layer, optimizer_name):
        paddle.seed(0)
        optimizer = (paddle.optimizer.Adam(1e-3, parameters=layer.parameters(), lazy_mode=True)
                     if optimizer_name == "adam" else paddle.optimizer.Adagrad(0.01, parameters=layer.parameters()))
        row_updated = isinstance(layer, QuantizedEmbedding) and layer.mode == "low_precision"
        if row_updated:
            layer.configure_row_optimizer("adagrad")
        position = [0]

        def step():
            (layer(batches[position[0] % len(batches)]) * upstream).sum().backward()
            position[0] += 1
            if row_updated:
                layer.apply_row_updates(0.01)
            else:
                optimizer.step()
                optimizer.clear_grad()
        return step
    steps = {"paddle.nn.Embedding, Adam": stepper(paddle.nn.Embedding(rows, dim, sparse=True), "adam"),
             "DenseEmbedding, Adam": stepper(DenseEmbedding(rows, dim), "adam"),
             "int8 qat, Adam": stepper(QuantizedEmbedding(rows, dim, "int8", mode="qat"), "adam"),
             "int4 qat, Adam": stepper(QuantizedEmbedding(rows, dim, "int4", mode="qat"), "adam"),
             "paddle.nn.Embedding, Adagrad": stepper(paddle.nn.Embedding(rows, dim, sparse=True), "adagrad"),
             "int8 low_precision, Adagrad": stepper(QuantizedEmbedding(rows, dim, "int8", mode="low_precision"),
                                                    "adagrad")}
    ms = side_by_side(steps, repeats=repeats)
    return {"ms": ms, "speed": {name: ms[f"paddle.nn.Embedding, {name.split(', ')[1]}"] / value
                                for name, value in ms.items()}}


def markdown(results: list[dict], training: dict, bandwidth: float, paths: dict[str, dict]) -> str:
    lines = [f"Copy bandwidth of this machine (numpy, 256 MiB, read + write): {bandwidth:.1f} GB/s", "",
             f"Training steps of quantized tables ({results[0]['settings']['rows']:,} x 64, 4096 x 26 Zipf(1.05) "
             f"ids; speed = paddle.nn.Embedding's time with the same optimizer / the table's):", "",
             "| table | ms | speed |", "|---|---|---|",
             *(f"| {name} | {value:.2f} | {training['speed'][name]:.2f}x |" for name, value in training["ms"].items()),
             ""]
    for result in results:
        s = result["settings"]
        lines += [f"### {s['rows']:,} x {s['dim']}, {s['distribution']} ids", "",
                  "| lookup | ms | vs nn.Embedding | GB/s |", "|---|---|---|---|"]
        for name, value in result["ms"].items():
            speed = result["speed_vs_fp32"][name]
            lines.append(f"| {name} | {value:.2f} | {speed:.2f}x | {result['gb_per_s'].get(name, float('nan')):.1f} |")
        bags = result["settings"]["bags"][0]
        lines += ["", f"Bags: {bags:,} bags of L ids ({s['ids'][0]} x {s['ids'][1]}, one a slot); ratios to a lookup "
                      f"then a sum and to torch's F.embedding_bag where it ran:", "",
                  "| bags | ms | vs lookup then sum | vs torch | GB/s |", "|---|---|---|---|---|"]
        for name, value in result["bag_ms"].items():
            torch_ms = result["bag_ms"].get(f"torch F.embedding_bag fp32 {'mean' if ' mean' in name else 'sum'}, "
                                            f"L={name.split('L=')[1]}")
            versus_torch = f"{torch_ms / value:.2f}x" if torch_ms else ""
            lines.append(f"| {name} | {value:.2f} | {result['bag_speed_vs_lookup_then_sum'][name]:.2f}x | "
                         f"{versus_torch} | {result['gb_per_s'][name]:.1f} |")
        t = result["training_step_ms"]
        lines += ["", f"Training step, bags of 20 summed (forward + backward + lazy Adam): EmbeddingBag "
                      f"{t['EmbeddingBag step']:.2f} ms, lookup then sum {t['lookup then sum step']:.2f} ms "
                      f"({t['speed_vs_lookup_then_sum']:.2f}x); forward {t['EmbeddingBag forward']:.2f} ms, "
                      f"backward {t['backward_vs_forward']:.2f}x the forward pass, the rest lazy Adam", ""]
    lines += ["### Which path served each class of lookup", "",
              "Each class was timed once on this machine, the native kernel against Paddle's composite ops "
              "(kernels/calibration.py); the faster served every call after.", "",
              "| class | served by | kernel ms | composite ms |", "|---|---|---|---|"]
    for key, entry in paths.items():
        by = ", ".join(f"{'kernel' if path == 'fused' else 'composite ops'} ({calls} calls)"
                       for path, calls in entry["calls"].items())
        lines.append(f"| {key} | {by} | {entry.get('fused_ms', float('nan')):.3f} | "
                     f"{entry.get('composite_ms', float('nan')):.3f} |")
    return "\n".join(lines)


def main_lookups(rows_list: list[int], repeats: int, threads: int, peers: str | None = None
                 ) -> tuple[list[dict], dict, float]:
    results = [lookups_benchmark(rows, 64, 4096, 26, distribution, repeats,
                                 inference=rows == rows_list[0] and distribution == "zipf", threads=threads,
                                 peers=peers)
               for rows in rows_list for distribution in ("zipf", "uniform")]
    return results, quantized_training_steps(rows_list[0], 64, 4096, 26, repeats), copy_bandwidth()

