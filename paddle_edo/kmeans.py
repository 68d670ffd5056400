"""K-Means for embedding rows: seeded k-means++ starts, then Lloyd's iterations by faiss (numpy without it)."""
from __future__ import annotations

import numpy as np

from .errors import EdoValueError


CHUNK_ROWS = 65536


def _nearest(points: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index of and squared distance to the nearest centroid, in chunks to bound memory."""
    labels = np.empty(len(points), dtype=np.int64)
    distances = np.empty(len(points), dtype=np.float64)
    norms = (centroids ** 2).sum(1)
    for start in range(0, len(points), CHUNK_ROWS):
        chunk = points[start:start + CHUNK_ROWS]
        d = (chunk ** 2).sum(1, keepdims=True) - 2.0 * chunk @ centroids.T + norms
        labels[start:start + len(chunk)] = d.argmin(1)
        distances[start:start + len(chunk)] = np.maximum(d.min(1), 0.0)
    return labels, distances


def kmeans_plus_plus(points: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k starting centroids [k, D] float64, each drawn in proportion to its squared distance from those
    already chosen (Arthur and Vassilvitskii): well-separated clusters each get a start."""
    centroids = [points[rng.integers(len(points))]]
    distances = ((points - centroids[0]) ** 2).sum(1).astype(np.float64)
    for _ in range(1, k):
        total = distances.sum()
        index = rng.integers(len(points)) if total <= 0 else rng.choice(len(points), p=distances / total)
        centroids.append(points[index])
        distances = np.minimum(distances, ((points - points[index]) ** 2).sum(1))
    return np.stack(centroids).astype(np.float64)


def kmeans(points: np.ndarray, k: int, iterations: int = 20, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(centroids [k, D] float32, label of each point): Lloyd's iterations from k-means++ starts, run by
    faiss.Kmeans when faiss is importable (faiss's own random starts merged two of four planted clusters
    and split another), else by numpy."""
    points = np.ascontiguousarray(points, dtype=np.float32)
    if not 1 <= k <= len(points):
        raise EdoValueError(f"kmeans: k = {k} must be in [1, {len(points)}] (the number of points)")
    centroids = kmeans_plus_plus(points, k, np.random.default_rng(seed))
    try:
        import faiss  # pip install faiss-cpu (a requirement; numpy serves where it is missing)
    except ImportError:
        faiss = None
    if faiss is not None:
        # a few points per cluster is the point here: no warning about it
        model = faiss.Kmeans(points.shape[1], k, niter=iterations, seed=seed, verbose=False, min_points_per_centroid=1)
        model.train(points, init_centroids=centroids.astype(np.float32))
        labels = model.index.search(points, 1)[1].ravel().astype(np.int64)
        return model.centroids.astype(np.float32), labels
    for _ in range(iterations):
        labels, _ = _nearest(points, centroids.astype(np.float32))
        sums = np.zeros_like(centroids)
        np.add.at(sums, labels, points)
        counts = np.bincount(labels, minlength=k)
        filled = counts > 0
        centroids[filled] = sums[filled] / counts[filled, None]
    labels, _ = _nearest(points, centroids.astype(np.float32))
    return centroids.astype(np.float32), labels
