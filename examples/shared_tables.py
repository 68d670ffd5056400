"""Fewer rows than ids: hash, quotient-remainder and mixed-dimension tables against a dense one.

    python examples/shared_tables.py [--rows 100000] [--samples 200000] [--epochs 2]

Trains the same DeepFM on synthetic Zipf(1.05) click data (a planted label rule) with each table type,
through the model contract every trainer uses (``create_loss``, ``create_optimizer``), and prints test
AUC and the bytes of the tables.
"""
from __future__ import annotations

import argparse

import numpy as np
import paddle

from paddle_edo import memory_report
from paddle_edo.data import CTRBatches, count_frequencies, make_loader, make_synthetic_ctr, split_table
from paddle_edo.models import DeepFM
from paddle_edo.models.optimizers import create_optimizer
from paddle_edo.runtime import seed_everything, set_num_threads

TABLES = {
    "dense": {"type": "dense"},
    "hash (10% of the rows)": {"type": "hash", "bucket_fraction": 0.1, "num_hashes": 2},
    "qr (m = sqrt(N))": {"type": "qr"},
    "mixed_dim (4 blocks)": {"type": "mixed_dim", "num_blocks": 4},
}


def train_and_test(splits, embedding: dict, epochs: int, seed: int) -> tuple[float, int]:
    seed_everything(seed)
    model = DeepFM(splits.fields, {**embedding, "dim": 16}, hidden_units=[64, 32],
                   frequencies=count_frequencies(splits.train))
    optimizer = create_optimizer({"optimizer": "adam", "learning_rate": 0.002, "embedding_learning_rate": None},
                                 model)
    batches = CTRBatches(splits.train, 1024, shuffle=True, seed=seed)
    for epoch in range(epochs):
        batches.epoch = epoch
        for batch in make_loader(batches):
            loss = model.create_loss(model([batch[f.name] for f in splits.fields]), batch)
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
    model.eval()
    with paddle.no_grad():
        scores = np.concatenate([paddle.nn.functional.sigmoid(model([b[f.name] for f in splits.fields])).numpy()
                                 for b in make_loader(CTRBatches(splits.test, 8192, shuffle=False))])
    return model.create_metrics(splits.test.labels, scores)["auc"], memory_report(model).held_bytes


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000, help="ids per field")
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args(argv)
    set_num_threads(2)
    table = make_synthetic_ctr(args.samples, num_fields=4, rows_per_field=args.rows, seed=7)
    splits = split_table(table, [0.8, 0.1, 0.1], seed=2024)
    results = {name: train_and_test(splits, embedding, args.epochs, seed=2024) for name, embedding in TABLES.items()}
    dense_bytes = results["dense"][1]
    print("| table | test AUC | table bytes | smaller by |")
    for name, (test_auc, held) in results.items():
        print(f"| {name} | {test_auc:.4f} | {held:,} | {dense_bytes / held:.1f}x |")
    return {name: {"auc": a, "bytes": b} for name, (a, b) in results.items()}


if __name__ == "__main__":
    main()
