"""python -m paddle_edo.kernels: build the native kernels now (the Makefile does, at setup), and list which
path serves each class of lookup this processor has timed, at each thread count (``--recalibrate``: forget
them, to time again)."""
from __future__ import annotations

import argparse

from . import fused_ops, kernel_isa
from .calibration import forget, processor, records_file, timed_here


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paddle_edo.kernels", description=__doc__)
    parser.add_argument("--recalibrate", action="store_true",
                        help="forget this processor's timings: each class of lookup is timed again at its next call")
    args = parser.parse_args(argv)
    if fused_ops() is None:
        print("native kernels: unavailable (composite ops and numpy serve)")
        return 0
    print(f"native kernels: ready ({kernel_isa()} path); {processor()}")
    if args.recalibrate:
        print(f"forgot {forget()} timed classes of lookup ({records_file()})")
        return 0
    timed = timed_here()
    print(f"{sum(map(len, timed.values()))} timed classes of lookup ({records_file()}){':' if timed else ''}")
    for here, mine in sorted(timed.items()):
        print(f"  {here.rsplit('; ', 1)[1]}:")
        for key, record in sorted(mine.items()):
            print(f"    {key}: {record['path']} (kernel {record['fused_ms']:.3f} ms, composite ops "
                  f"{record['composite_ms']:.3f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
