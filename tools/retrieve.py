"""Nearest rows of an exported table with FAISS:
python tools/retrieve.py --tables DIR --table NAME (--ids 1,2,3 | --values a,b | --words 人工智能,电脑) [-k 10]
                         [--metric cosine|ip|l2] [--kind auto|flat|hnsw|ivf] [--codec none|sq8|pq] [--rebuild]

The index is built on first use (defaults from the table's size: exact up to 50,000 rows, HNSW up to
5 million, IVF with 8-bit scalar quantization above) and saved beside the table as <table>.<metric>.faiss
(with a .json saying what it holds), then loaded. Needs no Paddle."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools._cli import add_debug_flag, fail_cleanly  # noqa: E402


def index_path(folder: Path, table: str, metric: str) -> Path:
    return folder / f"{table}.{metric}.faiss"


def load_or_build(store, folder: Path, spec, rebuild: bool = False):
    """The table's saved index of this metric, or a new one built and saved."""
    from paddle_edo.serving import NeighbourIndex

    path = index_path(folder, store.name, spec.metric)
    if path.is_file() and not rebuild:
        return NeighbourIndex.load(path, store.num_rows, store.dim)
    start = time.perf_counter()
    index = NeighbourIndex.build(store.all_rows(), spec, table=store.name)
    index.save(path)
    print(f"built a {index.spec.kind} index ({index.spec.codec}) over {store.num_rows:,} rows in "
          f"{time.perf_counter() - start:.1f} s: {path}")
    return index


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", required=True, help="a folder written by tools/export_tables.py")
    parser.add_argument("--table", help="the table's name (optional when the folder holds one)")
    query = parser.add_mutually_exclusive_group(required=True)
    query.add_argument("--ids", help="comma-separated ids")
    query.add_argument("--values", help="comma-separated raw values (through the saved vocabulary)")
    query.add_argument("--words", help="comma-separated words of a text run (as --values)")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--metric", default="cosine", choices=("cosine", "ip", "l2"))
    parser.add_argument("--kind", default="auto", choices=("auto", "flat", "hnsw", "ivf"))
    parser.add_argument("--codec", default="none", choices=("none", "sq8", "pq"))
    parser.add_argument("--rebuild", action="store_true", help="build the index again even if one is saved")
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    with fail_cleanly(args.debug):
        import numpy as np

        from paddle_edo.errors import EdoValueError
        from paddle_edo.serving import IndexSpec, TableStore

        folder = Path(args.tables)
        store = TableStore.open(folder, args.table)
        if not 1 <= args.k < store.num_rows:
            raise EdoValueError(f"-k {args.k} must lie in [1, {store.num_rows - 1}] (the table's other rows)")
        if args.ids:
            try:
                ids = np.array([int(i) for i in args.ids.split(",")], dtype=np.int64)
            except ValueError:
                raise EdoValueError(f"--ids {args.ids!r} must be comma-separated integers") from None
            store.check_ids(ids)
            labels, known = [str(i) for i in ids], [True] * len(ids)
        else:
            labels = (args.values or args.words).split(",")
            ids, known = store.ids_of_values(labels)
        index = load_or_build(store, folder, IndexSpec(args.metric, args.kind, args.codec), args.rebuild)
        scores, found = index.search(store.rows(ids), args.k + 1)
        for label, row_id, is_known, row_scores, row_found in zip(labels, ids, known, scores, found):
            note = "" if is_known else " (not in the vocabulary: its unknown row)"
            print(f"{label} (id {int(row_id)}){note}:")
            shown = [(s, i) for s, i in zip(row_scores, row_found) if i >= 0 and i != row_id][:args.k]
            for score, neighbour in shown:
                value = store.value_of(int(neighbour))
                print(f"  {int(neighbour):>10}  {score:8.4f}" + (f"  {value}" if value is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
