"""Numeric columns: statistics of the training split gathered in one streamed pass (count, mean,
spread, a bounded sample for quantile buckets) and the transform that turns raw numbers into features."""
from __future__ import annotations

from dataclasses import dataclass, field as dataclass_field
from typing import Any

import numpy as np

from .columns import NumericColumn

SAMPLE_SIZE = 100_000  # values kept (reservoir) to place quantile bucket boundaries


@dataclass
class NumericStats:
    """Running statistics of one numeric column's present values on the training split."""

    count: int = 0
    missing: int = 0
    total: float = 0.0
    total_squares: float = 0.0
    sample: np.ndarray = dataclass_field(default_factory=lambda: np.zeros(0))
    seen: int = 0  # present values offered to the sample

    def update(self, values: np.ndarray, rng: np.random.Generator) -> None:
        """Add a batch of float64 values (NaN: missing)."""
        present = values[~np.isnan(values)]
        self.missing += len(values) - len(present)
        self.count += len(present)
        self.total += float(present.sum())
        self.total_squares += float(np.square(present).sum())
        room = max(SAMPLE_SIZE - len(self.sample), 0)
        self.sample = np.concatenate([self.sample, present[:room]])
        rest = present[room:]
        if rest.size:  # reservoir sampling: the i-th value seen stays with probability SAMPLE_SIZE / i
            seen = self.seen + room + np.arange(1, rest.size + 1)
            slots = (rng.random(rest.size) * seen).astype(np.int64)
            keep = slots < SAMPLE_SIZE
            self.sample[slots[keep]] = rest[keep]
        self.seen += len(present)

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    @property
    def std(self) -> float:
        if self.count < 2:
            return 1.0
        variance = max(self.total_squares / self.count - self.mean ** 2, 0.0)
        return float(np.sqrt(variance)) or 1.0

    def boundaries(self, num_buckets: int) -> np.ndarray:
        """Distinct inner quantiles of the sample: at most num_buckets - 1 boundaries."""
        if not self.sample.size:
            return np.zeros(0)
        quantiles = np.quantile(self.sample, np.arange(1, num_buckets) / num_buckets)
        return np.unique(quantiles)

    def summary(self) -> dict[str, Any]:
        return {"count": self.count, "missing": self.missing, "mean": self.mean, "std": self.std}


@dataclass(frozen=True)
class NumericFeature:
    """A numeric column's fitted transform: what the model sees for raw values."""

    column: NumericColumn
    mean: float = 0.0
    std: float = 1.0
    boundaries: tuple[float, ...] = ()

    @classmethod
    def fit(cls, column: NumericColumn, stats: NumericStats) -> "NumericFeature":
        boundaries = tuple(stats.boundaries(column.num_buckets).tolist()) if column.bucketized else ()
        return cls(column, stats.mean, stats.std, boundaries)

    @property
    def num_ids(self) -> int:
        """A bucketized column's ids: 0 for missing, then one per bucket."""
        return len(self.boundaries) + 2

    def transform(self, values: np.ndarray) -> np.ndarray:
        """float64 values (NaN missing) -> float32 features, or int64 bucket ids (bucketize)."""
        missing = np.isnan(values)
        kind = self.column.transform
        if kind == "bucketize":
            ids = np.searchsorted(np.asarray(self.boundaries), values, side="right") + 1
            return np.where(missing, 0, ids).astype(np.int64)
        if kind == "log1p":  # signed, so negative counts (Criteo's I2) stay finite
            values = np.sign(values) * np.log1p(np.abs(values))
        elif kind == "standardize":
            values = (values - self.mean) / self.std
        return np.where(missing, self.column.fill, values).astype(np.float32)

    def state(self) -> dict[str, Any]:
        return {"mean": self.mean, "std": self.std, "boundaries": list(self.boundaries)}
