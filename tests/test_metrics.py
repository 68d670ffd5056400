import itertools

import numpy as np
import pytest

from paddle_edo.metrics import auc, chance_auc, logloss


def brute_force_auc(labels, scores):
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


def test_auc_equals_the_pairwise_definition_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(20):
        labels = rng.integers(0, 2, 60)
        labels[:2] = [0, 1]
        scores = rng.integers(0, 6, 60) / 5.0  # many ties
        assert auc(labels, scores) == pytest.approx(brute_force_auc(labels, scores), abs=1e-12)


def test_auc_extremes():
    assert auc([0, 0, 1, 1], [0.1, 0.2, 0.3, 0.4]) == 1.0
    assert auc([1, 1, 0, 0], [0.1, 0.2, 0.3, 0.4]) == 0.0
    assert auc([0, 1, 0, 1], [0.5, 0.5, 0.5, 0.5]) == 0.5


def test_auc_needs_both_classes():
    with pytest.raises(ValueError, match="both classes"):
        auc([1, 1], [0.2, 0.3])


def test_logloss_matches_the_formula_and_clips():
    y = np.array([1, 0, 1])
    p = np.array([0.9, 0.2, 0.6])
    expected = -np.mean([np.log(0.9), np.log(0.8), np.log(0.6)])
    assert logloss(y, p) == pytest.approx(expected)
    assert np.isfinite(logloss([1, 0], [0.0, 1.0]))


def test_chance_auc_bounds_the_auc_of_scores_that_know_nothing():
    labels = np.r_[np.ones(25_000), np.zeros(75_000)]
    bound = chance_auc(labels)
    assert bound == pytest.approx(0.5 + 2 * np.sqrt(100_001 / (12 * 25_000 * 75_000)))  # 0.5042
    rng = np.random.default_rng(0)
    random_aucs = [auc(labels, rng.random(labels.size)) for _ in range(200)]
    assert 0.93 < np.mean(np.array(random_aucs) < bound) <= 1.0  # 97.7% expected
    assert auc(labels, labels + rng.random(labels.size)) > bound
