import numpy as np

from paddle_edo.data.columns import NumericColumn
from paddle_edo.data.numeric import SAMPLE_SIZE, NumericFeature, NumericStats


def test_statistics_are_exact_and_the_sample_is_bounded_and_unbiased():
    rng = np.random.default_rng(0)
    values = rng.normal(5.0, 2.0, 300_000)
    values[::10] = np.nan
    stats = NumericStats()
    for part in np.array_split(values, 7):
        stats.update(part, rng)
    present = values[~np.isnan(values)]
    assert stats.count == len(present) and stats.missing == 30_000
    np.testing.assert_allclose([stats.mean, stats.std], [present.mean(), present.std()], rtol=1e-9)
    assert len(stats.sample) == SAMPLE_SIZE
    np.testing.assert_allclose(np.quantile(stats.sample, [0.25, 0.5, 0.75]),
                               np.quantile(present, [0.25, 0.5, 0.75]), atol=0.05)


def test_transforms():
    values = np.array([0.0, 3.0, -3.0, np.nan])
    log = NumericFeature(NumericColumn("x", "log1p", fill=-1.0)).transform(values)
    np.testing.assert_allclose(log, [0.0, np.log(4.0), -np.log(4.0), -1.0], rtol=1e-6)
    assert log.dtype == np.float32
    standard = NumericFeature(NumericColumn("x", "standardize"), mean=1.0, std=2.0).transform(values)
    np.testing.assert_allclose(standard, [-0.5, 1.0, -2.0, 0.0])
    none = NumericFeature(NumericColumn("x", "none")).transform(values)
    np.testing.assert_allclose(none, [0.0, 3.0, -3.0, 0.0])


def test_buckets_come_from_training_quantiles_and_missing_is_id_zero():
    stats = NumericStats()
    stats.update(np.arange(100, dtype=np.float64), np.random.default_rng(0))
    feature = NumericFeature.fit(NumericColumn("hour", "bucketize", num_buckets=4), stats)
    np.testing.assert_allclose(feature.boundaries, [24.75, 49.5, 74.25])
    assert feature.num_ids == 5
    np.testing.assert_array_equal(feature.transform(np.array([0.0, 30.0, 99.0, np.nan, 1e9])), [1, 2, 4, 0, 4])
