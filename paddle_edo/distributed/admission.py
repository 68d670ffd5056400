"""Feature admission on the trainers: the rules of Paddle's CountFilterEntry, ProbabilityEntry and
ShowClickEntry.

Paddle 2.6.2's parameter servers ignore the first two (measured: every row trained as without one), and
the third needs show/click inputs wired into every lookup, so a trainer applies the rules to its batches
before they are fed: until an id is admitted it is looked up as its
field's id 0 (unknown / padding), and its own row is never created or trained on the servers. Each
trainer admits from what it has seen itself; at the end the trainers' admitted sets are joined, and ids
no trainer admitted are served as id 0 too (evaluation and the exported tables).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import EdoValueError


RULES = ("count_filter", "probability", "show_click")


class FeatureAdmission:
    """Admitted ids per field. ``count_filter``: an id is admitted once this trainer has seen it that many
    times (the batch that reaches the count uses it). ``probability``: the first time this trainer sees
    an id it is admitted with that probability, once and for all (seeded). ``show_click``: an id is
    admitted once its score, ``nonclick_coeff`` x shows without a click + ``click_coeff`` x clicks, reaches
    ``show_click_threshold`` (how Paddle's CtrCommonAccessor scores a feature against its embedx_threshold;
    each row is one show, its label the click)."""

    def __init__(self, rule: str, vocab_sizes: dict[str, int], count_filter: int = 2, probability: float = 0.5,
                 seed: int = 0, show_click_threshold: float = 10.0, nonclick_coeff: float = 0.1,
                 click_coeff: float = 1.0) -> None:
        if rule not in RULES:
            raise EdoValueError(f"FeatureAdmission: rule = {rule!r}; expected one of {', '.join(map(repr, RULES))}")
        self.rule, self.count_filter, self.probability = rule, count_filter, probability
        self.show_click_threshold, self.nonclick_coeff, self.click_coeff = show_click_threshold, nonclick_coeff, click_coeff
        self.admitted = {field: np.zeros(size, dtype=bool) for field, size in vocab_sizes.items()}
        for flags in self.admitted.values():
            flags[0] = True                                    # the unknown / padding id is always there
        counted = rule != "probability"  # per id: uses or show/click score, else whether it was drawn
        self._tally = {field: np.zeros(size, dtype=np.float64 if counted else bool) for field, size in
                        vocab_sizes.items()}
        self._rng = np.random.default_rng(seed)

    @classmethod
    def from_config(cls, config: dict[str, Any], vocab_sizes: dict[str, int], rank: int) -> FeatureAdmission:
        """Trainer ``rank``'s admission under the config's ``distributed`` rule (seeded per trainer)."""
        distributed = config["distributed"]
        return cls(distributed["entry"], vocab_sizes, distributed["count_filter"], distributed["probability"],
                   config["train"]["seed"] + rank, distributed["show_click_threshold"], distributed["nonclick_coeff"],
                   distributed["click_coeff"])

    def __call__(self, field: str, ids: np.ndarray, clicks: np.ndarray | None = None) -> np.ndarray:
        """Count this batch's ids of ``field`` (``clicks``: the rows' labels, for ``show_click``), then
        return them with the ids not admitted set to 0."""
        seen, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
        admitted = self.admitted[field]
        if self.rule in ("count_filter", "show_click"):
            if self.rule == "show_click":
                if clicks is None:
                    raise EdoValueError("FeatureAdmission: the show_click rule needs the rows' clicks")
                clicked = np.bincount(inverse.ravel(), weights=np.broadcast_to(clicks, ids.shape).ravel(),
                                      minlength=seen.size)
                counts = self.nonclick_coeff * (counts - clicked) + self.click_coeff * clicked
            threshold = self.count_filter if self.rule == "count_filter" else self.show_click_threshold
            self._tally[field][seen] += counts
            admitted[seen[self._tally[field][seen] >= threshold]] = True
        else:
            new = seen[~self._tally[field][seen]]
            self._tally[field][new] = True
            admitted[new[self._rng.random(new.size) < self.probability]] = True
        return np.where(admitted[ids], ids, 0)

    def counts(self) -> dict[str, int]:
        """Admitted ids per field (id 0 left out)."""
        return {field: int(flags.sum()) - 1 for field, flags in self.admitted.items()}

    def save(self, path: Path) -> None:
        """The whole state, for joining the trainers' admitted ids and for resuming: admitted ids, what
        was counted of the others, and the random generator."""
        np.savez(path, rng=np.array(json.dumps(self._rng.bit_generator.state)),
                 **{f"admitted.{field}": flags for field, flags in self.admitted.items()},
                 **{f"tally.{field}": tally for field, tally in self._tally.items()})

    def load(self, path: Path) -> None:
        """Continue from a saved state (a resumed job): admission goes on exactly as it would have."""
        with np.load(path) as saved:
            for field in self.admitted:
                self.admitted[field][:] = saved[f"admitted.{field}"]
                self._tally[field][:] = saved[f"tally.{field}"]
            self._rng.bit_generator.state = json.loads(str(saved["rng"]))


def joined(paths: list[Path]) -> dict[str, np.ndarray]:
    """Ids admitted by any trainer, per field, from the trainers' saved states."""
    union: dict[str, np.ndarray] = {}
    for path in paths:
        with np.load(path) as saved:
            for key in saved.files:
                if key.startswith("admitted."):
                    field, flags = key.removeprefix("admitted."), saved[key]
                    union[field] = union[field] | flags if field in union else flags.copy()
    return union
