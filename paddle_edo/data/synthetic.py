"""Synthetic CTR data: Zipf-distributed ids per field and a planted label rule a model can learn."""
from __future__ import annotations

import numpy as np

from .ctr import CTRTable, FieldSpec


def zipf_ids(num_rows: int, size: int | tuple[int, ...], alpha: float, rng: np.random.Generator) -> np.ndarray:
    """Ranks in [0, num_rows) drawn with P(rank r) proportional to (r + 1) ** -alpha (finite support)."""
    cdf = np.cumsum(np.arange(1, num_rows + 1, dtype=np.float64) ** -alpha)
    return np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right").astype(np.int64)


def make_synthetic_ctr(num_samples: int = 200_000, num_fields: int = 8, rows_per_field: int = 100_000,
                       zipf_alpha: float = 1.05, seed: int = 7, return_logit: bool = False
                       ) -> CTRTable | tuple[CTRTable, np.ndarray]:
    """Ids of each field follow Zipf(alpha) over a random permutation of 1..rows_per_field-1.

    The label is Bernoulli(sigmoid(logit)) where the logit sums a hidden weight per id and a hidden
    interaction between fields 0 and 1 (dot product of 4-dim hidden vectors): first- and
    second-order structure that a factorisation model can recover. ``return_logit`` also returns
    the planted logit, whose AUC is the best any model can reach.
    """
    rng = np.random.default_rng(seed)
    vocab = rows_per_field
    fields = [FieldSpec(f"f{i}", vocab) for i in range(num_fields)]
    ids, logit = {}, np.zeros(num_samples)
    hidden_vectors = []
    for field in fields:
        permutation = rng.permutation(vocab - 1) + 1  # the hottest ids are not simply the smallest
        column = permutation[zipf_ids(vocab - 1, num_samples, zipf_alpha, rng)]
        weights = rng.normal(0.0, 0.8, vocab)
        ids[field.name] = column
        logit += weights[column]
        hidden_vectors.append(rng.normal(0.0, 0.7, (vocab, 4)))
    if num_fields >= 2:
        logit += np.einsum("nd,nd->n", hidden_vectors[0][ids["f0"]], hidden_vectors[1][ids["f1"]])
    logit -= np.median(logit)  # about half the samples positive
    labels = (rng.random(num_samples) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
    table = CTRTable(fields, ids, labels)
    return (table, logit) if return_logit else table
