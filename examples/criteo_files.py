"""A user's own files at scale: Criteo-format day files (tab-separated raw hex values, counts, empty
cells) streamed from disk into DeepFM, then raw rows scored with the vocabularies the run saved.

    python examples/criteo_files.py [--rows 200000] [--folder /tmp/criteo] [--epochs 1]

The folder gets Criteo-format data made by ``write_criteo_synthetic`` unless it already holds day files
(point it at the real ones). Training reads the files in record batches on a reader thread, through a
shuffle buffer; the data plan (vocabularies, numeric statistics, rows per split) is saved in the run's
``data/`` folder and maps the raw rows scored at the end exactly as training mapped them.
"""
from __future__ import annotations

import argparse
import resource
import tempfile
from pathlib import Path

import numpy as np
import paddle
import pyarrow.csv as pcsv

from paddle_edo import load_config
from paddle_edo.data import load_rows, write_criteo_synthetic
from paddle_edo.data.tabular import CRITEO_COLUMNS
from paddle_edo.engine import Engine

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--folder", help="day files in the Criteo format (default: made in a temporary folder)")
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.folder or Path(scratch) / "criteo")
        if not list(folder.glob("day_*")):
            write_criteo_synthetic(folder, args.rows, files=2, compress=True)
        size = sum(p.stat().st_size for p in folder.glob("day_*"))
        run = Path(scratch) / "run"
        config = load_config(ROOT / "configs" / "criteo.yaml", [
            f"data.files.path={folder}", "data.files.in_memory=false", "data.files.min_count=2",
            f"train.epochs={args.epochs}", "train.batch_size=1024", "train.learning_rate=0.003",
            f"train.output_dir={run}", "train.log_every_steps=1000000"])
        engine = Engine(config)
        plan = engine.splits.plan
        print(f"files: {folder} ({size / 2**20:.1f} MiB), rows per split {plan.rows}")
        print("ids per field: " + ", ".join(f"{f.name} {f.vocab_size:,}" for f in engine.fields[:6]) + ", ...")
        print(f"dense features: {', '.join(plan.dense_features)}")
        results = engine.fit()
        print(f"streamed training: test AUC {results['test_auc']:.4f}, "
              f"{len(engine.splits.train) / engine.history[0]['seconds']:,.0f} examples/s, "
              f"peak resident memory {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10:.0f} MiB")
        print(f"saved plan: {', '.join(sorted(p.name for p in (run / 'data').iterdir())[:4])}, ...")

        # raw rows as a service receives them: no label, a value never seen in training
        raw = Path(scratch) / "requests.tsv"
        first = next(folder.glob("day_*"))
        table = pcsv.read_csv(first, read_options=pcsv.ReadOptions(column_names=list(CRITEO_COLUMNS)),
                              parse_options=pcsv.ParseOptions(delimiter="\t"),
                              convert_options=pcsv.ConvertOptions(
                                  column_types={c: "string" for c in CRITEO_COLUMNS})).slice(0, 3).drop(["label"])
        pcsv.write_csv(table, raw, write_options=pcsv.WriteOptions(include_header=False, delimiter="\t",
                                                                   quoting_style="none"))
        with open(raw, "a", encoding="utf-8") as f:
            f.write("\t".join(["1"] * 13 + ["deadbeef"] * 26) + "\n")
        rows, labelled = load_rows(config["data"], run / "data", raw)
        engine.model.eval()
        batch = {name: paddle.to_tensor(values) for name, values in
                 next(rows.iter_batches(len(rows), shuffle=False, seed=0, epoch=0)).items()}
        probabilities = paddle.nn.functional.sigmoid(engine.model(engine.model.inputs(batch))).numpy()
        unknown = int((rows.ids["C3"][-1] == 0))
        print(f"scored {len(rows)} raw rows (labelled: {labelled}): "
              + ", ".join(f"{p:.3f}" for p in np.asarray(probabilities)))
        print(f"the unseen value deadbeef maps to the unknown id: {bool(unknown)}")


if __name__ == "__main__":
    main()
