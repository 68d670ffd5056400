"""What replacing one table of a trained model costs its predictions: the divergence of the click
probabilities on a validation sample (Bernoulli KL against the model's own), and the change in logloss
and AUC."""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np
import paddle

from ..data import CTRTable
from ..metrics import auc, logloss
from ..nn.swap import swap_named

EPSILON = 1e-7


def bernoulli_kl(reference: np.ndarray, other: np.ndarray) -> float:
    """Mean KL(Bernoulli(p) || Bernoulli(q)) over rows: how far ``other``'s click probabilities moved from
    ``reference``'s (0 when equal; labels not needed)."""
    p = np.clip(np.asarray(reference, np.float64), EPSILON, 1 - EPSILON)
    q = np.clip(np.asarray(other, np.float64), EPSILON, 1 - EPSILON)
    return float(np.mean(p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))))


@dataclass(frozen=True)
class Divergence:
    """A model's predictions after a change against before it, on the same rows: the mean Bernoulli KL
    of the click probabilities (0 when equal), and the changes of logloss and AUC (after - before)."""

    kl: float
    logloss_delta: float  # after - before (positive: worse)
    auc_delta: float      # after - before (negative: worse)

    def to_dict(self) -> dict:
        return asdict(self)


class Probe:
    """A trained model (an Engine's), a seeded validation sample of at most ``sample_rows`` rows, and the
    model's predictions on it: the reference that a table's replacement is measured against."""

    def __init__(self, engine, sample_rows: int = 1024, seed: int = 0) -> None:
        valid = engine.splits.valid
        if not isinstance(valid, CTRTable):
            valid = valid.head(sample_rows)  # a streamed split: its first rows, in memory
        elif len(valid) > sample_rows:
            valid = valid.take(np.sort(np.random.default_rng(seed).choice(len(valid), sample_rows, replace=False)))
        self.engine, self.sample = engine, valid
        self.compacted: dict[str, tuple[np.ndarray, CTRTable]] = {}
        self.labels = valid.labels
        self.reference = engine.predict(valid)
        self.reference_logloss = logloss(self.labels, self.reference)
        self.reference_auc = auc(self.labels, self.reference)

    def divergence(self, predictions: np.ndarray) -> Divergence:
        return Divergence(bernoulli_kl(self.reference, predictions),
                          logloss(self.labels, predictions) - self.reference_logloss,
                          auc(self.labels, predictions) - self.reference_auc)

    def compact(self, field: str) -> tuple[np.ndarray, CTRTable]:
        """The rows of ``field``'s tables that the sample reads (sorted, padding row 0 first), and the sample
        with that field's ids renumbered into them: tables of those rows alone predict the sample as the
        whole tables do, so a change made row by row is measured on them alone."""
        if field not in self.compacted:
            ids = self.sample.ids[field]
            rows = np.unique(np.concatenate([[0], ids.ravel()]))
            renumbered = {**self.sample.ids, field: np.searchsorted(rows, ids).astype(ids.dtype)}
            self.compacted[field] = rows, replace(self.sample, ids=renumbered)
        return self.compacted[field]

    def with_table(self, name: str, layer: paddle.nn.Layer) -> Divergence:
        """The divergence of the model with its table ``name`` (as the memory report names it) replaced by
        ``layer``; the model gets its own table back."""
        return self.with_tables({name: layer})

    def with_tables(self, layers: dict[str, paddle.nn.Layer], sample: CTRTable | None = None) -> Divergence:
        """The divergence of the model with the tables named in ``layers`` replaced, predicting the sample
        (or ``sample``: the sample with a field's ids renumbered, as ``compact`` gives it, where ``layers``
        holds every table of that field); the model gets its own tables back."""
        originals = swap_named(self.engine.model, layers)
        try:
            return self.divergence(self.engine.predict(self.sample if sample is None else sample))
        finally:
            swap_named(self.engine.model, originals)
