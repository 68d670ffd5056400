"""The compressions the planner may give a table, as the embedding sections that build them, from the
least risky to the most: packed formats (exact once trained), the device cache (exact, slower), then
layers that share rows (trained from scratch, their quality estimated)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from ..quant.formats import FORMATS
from ..schema import ConfigError

#: The methods a plan may choose for a table (``embedding.methods``), in order of risk: what a tie in
#: estimated cost is broken by.
METHODS = ("fp32", "fp16", "bf16", "int8", "cached", "clustered", "int4", "int2", "ternary", "binary", "mixed_dim",
           "hash", "qr")
QAT_FORMATS = ("int4", "int2", "ternary", "binary")   # trained quantization-aware: PTQ loses more at these widths
PACKED_FORMATS = ("fp16", "bf16", "int8", *QAT_FORMATS)  # a table held in fewer bits a value, rows kept apart
SHARING = ("mixed_dim", "hash", "qr")                 # trained from scratch: their cost is an estimate
HASH_FRACTIONS = (0.25, 0.1, 1 / 30, 0.01, 0.001)
CLUSTER_FRACTIONS = (0.25, 0.05)
MIXED_ALPHAS = (0.5, 1.0)
CACHE_RATIOS = (0.5, 0.2, 0.05)
MIN_SHARED_ROWS = 100          # smaller tables only change format: sharing rows of a tiny field saves nothing
KMEANS_WORK = 5e9              # rows x clusters x dim multiply-adds a clustering candidate may cost


@dataclass(frozen=True)
class Candidate:
    """One way to hold one table: the method, a label for people, and the section that builds it."""

    method: str
    label: str
    section: dict[str, Any]

    @property
    def risk(self) -> int:
        return METHODS.index(self.method)

    @property
    def estimated(self) -> bool:
        """Whether its cost is an estimate (a layer trained from scratch) rather than measured."""
        return self.method in SHARING


def check_methods(methods: Sequence[str] | None, path: str = "embedding.methods") -> tuple[str, ...]:
    """The methods a plan may use (all by default); fp32 is always allowed."""
    if methods is None:
        return METHODS
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ConfigError(f"{path}: {unknown[0]!r} is not a method the planner knows; allowed: {', '.join(METHODS)}")
    return tuple(m for m in METHODS if m in methods or m == "fp32")


def table_candidates(rows: int, dim: int, methods: Sequence[str], device: bool, within_fp16: bool = True
                     ) -> list[Candidate]:
    """Every candidate for a table of ``rows`` ids at width ``dim`` (``device``: the budget is the device's,
    so the host may keep a cached table's rows; ``within_fp16``: the table's values fit fp16's range, so
    bf16, as large and less precise, is left out)."""
    found = [Candidate("fp32", "fp32", {"type": "dense"})]
    for name in PACKED_FORMATS:
        if name == "bf16" and within_fp16 and "fp16" in methods:
            continue
        if name in methods and FORMATS[name].row_bytes(dim) < 4 * dim:  # narrow rows: parameters outweigh codes
            mode = "qat" if name in QAT_FORMATS else "ptq"
            found.append(Candidate(name, f"{name} {mode}", {"type": "quantized", "storage_format": name, "mode": mode}))
    if rows < MIN_SHARED_ROWS:
        return found
    inner = ("fp32", "int8") if dim > 1 else ("fp32", "fp16")
    if "hash" in methods:
        for buckets in sorted({math.ceil(rows * fraction) for fraction in HASH_FRACTIONS}, reverse=True):
            found += [Candidate("hash", f"hash {buckets} rows" + ("" if f == "fp32" else f" {f}"),
                                {"type": "hash", "num_buckets": buckets, "storage_format": f}) for f in inner]
    if "qr" in methods:
        found += [Candidate("qr", "qr" + ("" if f == "fp32" else f" {f}"), {"type": "qr", "storage_format": f})
                  for f in inner]
    if "mixed_dim" in methods and dim >= 4:
        found += [Candidate("mixed_dim", f"mixed_dim alpha {alpha:g}", {"type": "mixed_dim", "alpha": alpha})
                  for alpha in MIXED_ALPHAS]
    if "clustered" in methods:
        for fraction in CLUSTER_FRACTIONS:
            if rows * rows * fraction * dim <= KMEANS_WORK:
                found.append(Candidate("clustered", f"clustered {fraction:g}",
                                       {"type": "clustered", "cluster_fraction": fraction}))
    if "cached" in methods and device:
        found += [Candidate("cached", f"cached {ratio:g}", {"type": "cached", "cache_ratio": ratio})
                  for ratio in CACHE_RATIOS]
    return found
