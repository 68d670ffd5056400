"""MovieLens-100K: click prediction and rating regression sharing one table per field.

    python examples/movielens_multitask.py [--epochs 3] [--storage-format int8]

Prints test AUC (click), RMSE (rating) and the memory report: each table is counted once although
both heads read it; two single-task models would hold every table twice.
"""
from __future__ import annotations

import argparse

import numpy as np
import paddle
import paddle.nn.functional as F

from paddle_edo import memory_report, quantize
from paddle_edo.data import CTRBatches, load_movielens, make_loader, split_table
from paddle_edo.metrics import auc
from paddle_edo.models import ClickAndRating
from paddle_edo.runtime import seed_everything, set_num_threads


def evaluate(model, table) -> tuple[float, float]:
    model.eval()
    clicks, ratings = [], []
    with paddle.no_grad():
        for batch in make_loader(CTRBatches(table, 8192, shuffle=False)):
            click, rating = model([batch[f.name] for f in model.fields])
            clicks.append(F.sigmoid(click).numpy())
            ratings.append(rating.numpy())
    model.train()
    rmse = float(np.sqrt(np.mean((np.concatenate(ratings) - table.targets["rating"]) ** 2)))
    return auc(table.labels, np.concatenate(clicks)), rmse


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--storage-format", default=None, help="quantize the shared tables after training (e.g. int8)")
    parser.add_argument("--seed", type=int, default=2024)
    args = parser.parse_args(argv)
    set_num_threads(2)
    seed_everything(args.seed)
    splits = split_table(load_movielens(), [0.8, 0.1, 0.1], seed=args.seed)
    model = ClickAndRating(splits.fields, {"type": "dense", "dim": 16})
    optimizer = paddle.optimizer.Adam(0.002, parameters=model.parameters(), lazy_mode=True)
    batches = CTRBatches(splits.train, 512, shuffle=True, seed=args.seed)
    for epoch in range(args.epochs):
        batches.epoch = epoch
        for batch in make_loader(batches):
            loss = model.create_loss(model([batch[f.name] for f in splits.fields]), batch)  # click BCE + 0.5 rating MSE
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
        click_auc, rmse = evaluate(model, splits.valid)
        print(f"epoch {epoch + 1}: valid click AUC {click_auc:.4f}, rating RMSE {rmse:.4f}")
    if args.storage_format:
        quantize(model, args.storage_format)
    report = memory_report(model)
    print(report)
    click_auc, rmse = evaluate(model, splits.test)
    shared = report.held_bytes
    adapters = sum(int(p.size) * 4 for p in model.adapters.parameters())
    print(f"tables held once: {shared} B (and adapters {adapters} B); two single-task models: {2 * shared} B")
    print(f"test click auc {click_auc:.4f}")
    print(f"test rating rmse {rmse:.4f}")
    return {"auc": click_auc, "rmse": rmse, "held_bytes": shared}


if __name__ == "__main__":
    main()
