"""Quantize a trained model and compare: test AUC and table bytes of each storage format against fp32.

    python examples/quantize_trained_model.py [--epochs 3] [--formats fp16 bf16 int8 int4 int2]

Trains DeepFM on MovieLens-100K (configs/movielens_dense.yaml), then loads its checkpoint once per
format, packs every table with ``paddle_edo.quantize`` (post-training, no retraining) and evaluates.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from paddle_edo import load_config, quantize
from paddle_edo.engine import Engine

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "movielens_dense.yaml"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--formats", nargs="+", default=["fp16", "bf16", "int8", "int4", "int2"])
    parser.add_argument("--output-dir", default=None, help="default: a temporary folder")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        config = load_config(CONFIG, [f"train.epochs={args.epochs}",
                                      f"train.output_dir={args.output_dir or scratch}"])
        trained = Engine(config)
        fp32 = trained.fit()["test_auc"]
        fp32_bytes = trained.memory_report().held_bytes
        results = {"fp32": (fp32, fp32_bytes)}
        for storage_format in args.formats:
            engine = Engine(config)
            engine.load(trained.checkpoint_path)
            quantize(engine.model, storage_format)
            results[storage_format] = (engine.evaluate("test")["auc"], engine.memory_report().held_bytes)
    print("| tables | test AUC | AUC change | table bytes | smaller by |")
    for name, (test_auc, held) in results.items():
        print(f"| {name} | {test_auc:.4f} | {test_auc - fp32:+.4f} | {held:,} | {fp32_bytes / held:.1f}x |")
    return {name: {"auc": a, "bytes": b} for name, (a, b) in results.items()}


if __name__ == "__main__":
    main()
