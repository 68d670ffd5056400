import numpy as np
import pytest

from paddle_edo.data import make_synthetic_ctr, zipf_ids


def test_zipf_ids_follow_the_power_law():
    ids = zipf_ids(1000, 400_000, 1.05, np.random.default_rng(0))
    counts = np.bincount(ids, minlength=1000)
    assert ids.min() >= 0 and ids.max() < 1000
    p = np.arange(1, 1001) ** -1.05
    p /= p.sum()
    np.testing.assert_allclose(counts[:5] / len(ids), p[:5], rtol=0.03)
    assert counts[0] / counts[9] == pytest.approx(10 ** 1.05, rel=0.1)


def test_synthetic_data_is_seeded_skewed_and_balanced():
    a = make_synthetic_ctr(20_000, 3, 2000, 1.05, seed=1)
    b = make_synthetic_ctr(20_000, 3, 2000, 1.05, seed=1)
    np.testing.assert_array_equal(a.ids["f0"], b.ids["f0"])
    np.testing.assert_array_equal(a.labels, b.labels)
    assert 0.4 < a.labels.mean() < 0.6
    counts = np.sort(np.bincount(a.ids["f1"], minlength=2000))[::-1]
    assert counts[:20].sum() > 0.3 * len(a)  # 1% of ids take a large share of lookups
    assert a.ids["f0"].min() >= 1 and a.ids["f0"].max() < 2000
