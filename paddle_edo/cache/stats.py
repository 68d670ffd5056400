"""Cache counters, per step and in total, that the trainer prints and the monitor logs."""
from __future__ import annotations

from dataclasses import dataclass, field, fields


@dataclass
class StepCounts:
    lookups: int = 0          # distinct ids asked for
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    rows_written_back: int = 0  # dirty evicted or flushed rows
    bytes_to_device: int = 0    # host -> cache copies (rows and their optimizer state)
    bytes_to_host: int = 0      # cache -> host write-backs
    bypass_rows: int = 0        # rows served from the host for a lookup, and updated there (no free slot)

    def add(self, other: "StepCounts") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass
class CacheStatistics:
    """A cached table's counters (``StepCounts``: hits, misses, evictions, rows and bytes moved between
    host and device): ``total`` since the layer was built, ``last_step`` for the latest finished training
    step; ``CachedEmbedding.statistics()`` reports them with hit rates."""

    total: StepCounts = field(default_factory=StepCounts)
    last_step: StepCounts = field(default_factory=StepCounts)
    _current: StepCounts = field(default_factory=StepCounts)

    def count(self, **values: int) -> None:
        change = StepCounts(**values)
        self.total.add(change)
        self._current.add(change)

    def end_step(self) -> None:
        self.last_step, self._current = self._current, StepCounts()

    @staticmethod
    def _hit_rate(counts: StepCounts) -> float:
        return counts.hits / counts.lookups if counts.lookups else 0.0

    def as_dict(self) -> dict[str, float]:
        """Totals, the hit rate overall and of the last step, and the last step's counters (``step_*``)."""
        out: dict[str, float] = {f.name: getattr(self.total, f.name) for f in fields(self.total)}
        out["hit_rate"] = self._hit_rate(self.total)
        out.update({f"step_{f.name}": getattr(self.last_step, f.name) for f in fields(self.last_step)})
        out["step_hit_rate"] = self._hit_rate(self.last_step)
        return out
