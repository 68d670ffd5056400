"""Plan each table's compression for a memory budget, and write the config that trains it:

  python tools/plan.py -c configs/X.yaml --budget 2GiB [--out plan.yaml] [--methods int8 int4 hash ...]
  python tools/plan.py -c configs/X.yaml --device-memory 16GiB --reserve 0.3
  python tools/plan.py -c configs/X.yaml --budget 2GiB --for training

Prints the plan as a table (table, rows, choice, bytes before and after, estimated cost) and writes it as
a config (default: <train.output_dir>/plan.yaml) that tools/train.py runs unchanged. ``--for training``
fits what training holds (each table as it trains, the table rule's optimizer state, a step's row
gradients) and picks the state format too (``train.table_optimizer``). A config with
``embedding.type: auto`` and ``embedding.budget`` plans inside tools/train.py instead.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools._cli import experiment_parser, fail_cleanly  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = experiment_parser(__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--budget", help="bytes the trained tables may hold: 2000000, 2GiB, 512MB")
    size.add_argument("--device-memory", help="the device's memory, of which the tables take what --reserve leaves")
    parser.add_argument("--reserve", default="0.3", help="share (or size) of --device-memory kept for the rest")
    parser.add_argument("--methods", nargs="+", help="methods the plan may use (default: all)")
    parser.add_argument("--no-checks", action="store_true", help="skip the short check runs")
    parser.add_argument("--for", dest="purpose", choices=("serving", "training"), default=None,
                        help="what the budget holds: the trained tables (default), or training's tables, optimizer "
                             "state and row gradients")
    parser.add_argument("--out", help="where the planned config goes (default: <train.output_dir>/plan.yaml)")
    args = parser.parse_args(argv)
    with fail_cleanly(args.debug):
        from paddle_edo import load_config
        from paddle_edo.planner import plan_tables

        config = load_config(args.config, args.override)
        reserve = float(args.reserve) if _is_number(args.reserve) else args.reserve
        plan = plan_tables(config, args.budget, device_memory=args.device_memory, reserve=reserve,
                           methods=args.methods, checks=not args.no_checks, purpose=args.purpose)
        path = plan.write(args.out or Path(config["train"]["output_dir"]) / "plan.yaml")
        print(plan.table())
        print(f"wrote {path}: python tools/train.py -c {path}")
    return 0


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


if __name__ == "__main__":
    os.environ.setdefault("GLOG_minloglevel", "2")
    sys.exit(main())
