"""Exact binary-classification metrics on numpy arrays."""
from __future__ import annotations

import numpy as np

from .errors import EdoValueError


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve by the rank-sum (Mann-Whitney U) formula; tied scores count one half."""
    labels = np.asarray(labels).ravel().astype(bool)
    scores = np.asarray(scores, dtype=np.float64).ravel()
    n_pos = int(labels.sum())
    n_neg = labels.size - n_pos
    if n_pos == 0 or n_neg == 0:
        raise EdoValueError(f"AUC needs both classes; got {n_pos} positives and {n_neg} negatives")
    order = np.argsort(scores, kind="mergesort")
    sorted_scores = scores[order]
    ranks = np.empty(scores.size, dtype=np.float64)
    # average ranks (1-based) over runs of tied scores
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    ends = np.r_[starts[1:], scores.size]
    average = (starts + ends + 1) / 2.0
    ranks[order] = np.repeat(average, ends - starts)
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def chance_auc(labels: np.ndarray) -> float:
    """The AUC scores that know nothing of the labels stay under with 97.7% probability: 0.5 plus two
    standard deviations of the Mann-Whitney AUC of random scores, sqrt((P + N + 1) / (12 P N)) for P
    positives and N negatives (0.0042 for 100,000 rows a quarter positive)."""
    labels = np.asarray(labels).ravel().astype(bool)
    positives = int(labels.sum())
    negatives = labels.size - positives
    return 0.5 + 2.0 * float(np.sqrt((positives + negatives + 1) / (12.0 * positives * negatives)))


def logloss(labels: np.ndarray, probabilities: np.ndarray, eps: float = 1e-7) -> float:
    """Mean binary cross-entropy, probabilities clipped to [eps, 1 - eps]."""
    y = np.asarray(labels, dtype=np.float64).ravel()
    p = np.clip(np.asarray(probabilities, dtype=np.float64).ravel(), eps, 1.0 - eps)
    return float(-np.mean(y * np.log(p) + (1.0 - y) * np.log(1.0 - p)))


def accuracy(labels: np.ndarray, probabilities: np.ndarray, threshold: float = 0.5) -> float:
    """Share of rows whose probability falls on the side of ``threshold`` their 0/1 label is on."""
    y = np.asarray(labels).ravel() > 0.5
    return float(np.mean((np.asarray(probabilities).ravel() > threshold) == y))
