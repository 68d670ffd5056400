import numpy as np
import pytest

from paddle_edo.errors import DataError, EdoValueError
from paddle_edo.serving import IndexSpec, NeighbourIndex


def clustered(rows, dim=32, seed=0):
    """Vectors around 200 centres, as trained embeddings cluster."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(200, dim))
    return (centres[rng.integers(0, 200, rows)] + 0.4 * rng.normal(size=(rows, dim))).astype(np.float32)


def exact(vectors, queries, k, metric):
    if metric == "cosine":
        vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    scores = -((queries[:, None, :] - vectors[None]) ** 2).sum(-1) if metric == "l2" else queries @ vectors.T
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


@pytest.mark.parametrize("metric", ["ip", "cosine", "l2"])
def test_the_flat_index_is_exact_search(metric):
    vectors = clustered(3000)
    index = NeighbourIndex.build(vectors, IndexSpec(metric, "auto"))
    assert index.spec.kind == "flat"
    scores, ids = index.search(vectors[:20], 5)
    np.testing.assert_array_equal(ids, exact(vectors, vectors[:20], 5, metric))
    assert (np.diff(scores, axis=1) <= 1e-5).all() if metric != "l2" else (np.diff(scores, axis=1) >= -1e-5).all()


@pytest.mark.parametrize("kind,codec", [("hnsw", "none"), ("hnsw", "sq8"), ("ivf", "sq8"), ("ivf", "pq")])
def test_approximate_indexes_find_most_true_neighbours(kind, codec):
    vectors = clustered(20_000)
    index = NeighbourIndex.build(vectors, IndexSpec("cosine", kind, codec))
    _, ids = index.search(vectors[:200], 10)
    truth = exact(vectors, vectors[:200], 10, "cosine")
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, truth)])
    assert recall > (0.5 if codec == "pq" else 0.9), recall  # pq: 8 codes of 4 dims, the most lossy


def test_defaults_follow_the_table_size():
    assert IndexSpec().resolved(10_000, 64).kind == "flat"
    assert IndexSpec().resolved(1_000_000, 64).kind == "hnsw"
    big = IndexSpec().resolved(10_000_000, 64)
    assert (big.kind, big.codec, big.nlist) == ("ivf", "sq8", 12649)


def test_saved_indexes_reload_and_refuse_another_table(tmp_path):
    vectors = clustered(2000)
    index = NeighbourIndex.build(vectors, IndexSpec("ip", "hnsw"), table="items")
    index.save(tmp_path / "items.faiss")
    loaded = NeighbourIndex.load(tmp_path / "items.faiss", 2000, 32)
    assert loaded.spec == index.spec and loaded.table == "items"
    np.testing.assert_array_equal(loaded.search(vectors[:5], 3)[1], index.search(vectors[:5], 3)[1])
    with pytest.raises(DataError, match="holds vectors of dim 32; the table has dim 16"):
        NeighbourIndex.load(tmp_path / "items.faiss", 2000, 16)
    with pytest.raises(DataError, match="holds 2000 rows; the table has 2001"):
        NeighbourIndex.load(tmp_path / "items.faiss", 2001, 32)
    with pytest.raises(EdoValueError, match=r"k = 2001 must lie in \[1, 2000\]"):
        loaded.search(vectors[:1], 2001)
    with pytest.raises(EdoValueError, match="queries of dim 8, the index holds dim 32"):
        loaded.search(np.zeros((1, 8)), 3)
    with pytest.raises(EdoValueError, match="index metric = 'dot'"):
        NeighbourIndex.build(vectors, IndexSpec("dot"))
