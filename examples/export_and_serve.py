"""Export a trained model and serve it with Paddle Inference: fp32, and int8 packed tables (composite
Paddle ops, or paddle_edo's fused lookups), each checked against the dynamic-graph model.

    python examples/export_and_serve.py [--epochs 1] [--output-dir DIR]

Trains DeepFM on MovieLens-100K (configs/movielens_int8.yaml: int8 tables trained with PTQ), exports
it with ``paddle_edo.export.export_model`` (``paddle.jit.save`` under the hood) with packed tables, then
decoded to fp32 (the program is ``model.json`` on Paddle 3, ``model.pdmodel`` on 2.6), serves the test
split with ``Predictor`` and prints each export's bytes on disk, its largest difference from dygraph and
ms a batch.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from paddle_edo import dequantize_model, load_config
from paddle_edo.engine import Engine
from paddle_edo.export import Predictor, export_model, program_file

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "movielens_int8.yaml"


def serve(prefix: Path, inputs: list[np.ndarray], expected: np.ndarray) -> tuple[float, float]:
    """(largest difference from the dygraph probabilities, median ms to serve the batch)."""
    predictor = Predictor(prefix, device="cpu")
    seconds = []
    for _ in range(5):
        start = time.perf_counter()
        logits = predictor.run(inputs)
        seconds.append(time.perf_counter() - start)
    served = 1.0 / (1.0 + np.exp(-logits))
    return float(np.abs(served - expected).max()), 1000 * float(np.median(seconds))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--output-dir", default=None, help="default: a temporary folder")
    args = parser.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        output = Path(args.output_dir or scratch)
        config = load_config(CONFIG, [f"train.epochs={args.epochs}", f"train.output_dir={output}"])
        engine = Engine(config)
        engine.fit()  # ends with the int8 tables packed for serving
        test = engine.splits.test
        inputs = [test.ids[f.name] for f in engine.fields]
        expected = engine.predict(test)
        specs = engine.model.input_specs()
        for name, fused in (("int8, composite ops", False), ("int8, fused kernels", True), ("fp32", False)):
            if name == "fp32":
                dequantize_model(engine.model)  # the same values, decoded into fp32 tables
            folder = output / name.replace(", ", "_").replace(" ", "_")
            prefix = export_model(engine.model, specs, folder / "model", fused_kernels=fused)
            sizes = (prefix.with_suffix(".pdiparams").stat().st_size, program_file(prefix).stat().st_size)
            results[name] = (*sizes, *serve(prefix, inputs, expected))
    print(f"test split: {len(test)} rows in one batch")
    print("| export | parameters (B) | program (B) | largest difference from dygraph | ms a batch |")
    for name, (parameters, program, difference, ms) in results.items():
        print(f"| {name} | {parameters:,} | {program:,} | {difference:.2g} | {ms:.1f} |")
    return {name: {"parameter_bytes": p, "difference": d, "ms": m} for name, (p, _, d, m) in results.items()}


if __name__ == "__main__":
    main()
