"""Feature admission on the trainers: exact rules, decided once, joined across trainers."""
import numpy as np
import pytest

from paddle_edo.distributed.admission import FeatureAdmission, joined


def test_count_filter_admits_an_id_with_the_batch_that_reaches_the_count():
    admission = FeatureAdmission("count_filter", {"user": 10}, count_filter=3)
    np.testing.assert_array_equal(admission("user", np.array([4, 4, 7])), [0, 0, 0])
    np.testing.assert_array_equal(admission("user", np.array([4, 7, 0])), [4, 0, 0])  # 4: third use
    np.testing.assert_array_equal(admission("user", np.array([[7, 4], [7, 9]])), [[7, 4], [7, 0]])
    assert admission.counts() == {"user": 2}


def test_show_click_admits_an_id_once_its_score_reaches_the_threshold():
    # score = 0.1 x shows without a click + 1 x clicks, threshold 1.2
    admission = FeatureAdmission("show_click", {"ad": 5}, show_click_threshold=1.2)
    np.testing.assert_array_equal(admission("ad", np.array([1, 2, 2]), np.array([1, 0, 0])), [0, 0, 0])
    np.testing.assert_array_equal(admission("ad", np.array([1, 2]), np.array([0, 1])), [0, 2])  # 2: 0.2 + 1
    np.testing.assert_array_equal(admission("ad", np.array([1, 1]), np.array([0, 0])), [1, 1])  # 1: 1 + 0.3
    with pytest.raises(ValueError, match="needs the rows' clicks"):
        admission("ad", np.array([3]))


def test_probability_decides_each_id_once_and_is_seeded(tmp_path):
    ids = np.arange(1, 5001)
    first = FeatureAdmission("probability", {"item": 5001}, probability=0.3, seed=7)
    kept = first("item", ids) != 0
    assert 0.27 < kept.mean() < 0.33
    np.testing.assert_array_equal(first("item", ids) != 0, kept)  # decided once and for all
    again = FeatureAdmission("probability", {"item": 5001}, probability=0.3, seed=7)
    np.testing.assert_array_equal(again("item", ids) != 0, kept)
    other = FeatureAdmission("probability", {"item": 5001}, probability=0.3, seed=8)
    other("item", ids)
    first.save(tmp_path / "a.npz")
    other.save(tmp_path / "b.npz")
    union = joined([tmp_path / "a.npz", tmp_path / "b.npz"])["item"]
    np.testing.assert_array_equal(union, first.admitted["item"] | other.admitted["item"])
    with pytest.raises(ValueError, match="rule = 'often'"):
        FeatureAdmission("often", {"item": 3})


@pytest.mark.parametrize("rule", ["count_filter", "probability", "show_click"])
def test_a_saved_admission_goes_on_exactly_as_the_uninterrupted_one(tmp_path, rule):
    rng = np.random.default_rng(0)
    batches = [(rng.zipf(1.3, 64) % 500, rng.integers(0, 2, 64).astype(float)) for _ in range(20)]

    def admission(seed: int) -> FeatureAdmission:
        return FeatureAdmission(rule, {"user": 500, "item": 500}, count_filter=3, probability=0.3, seed=seed,
                                show_click_threshold=1.5)

    whole = admission(5)
    expected = [whole("user", ids, clicks) for ids, clicks in batches]
    first = admission(5)
    for ids, clicks in batches[:10]:
        first("user", ids, clicks)
    first.save(tmp_path / "state.npz")
    resumed, afresh = admission(99), admission(5)  # another seed: the generator's state comes from the file
    resumed.load(tmp_path / "state.npz")
    for (ids, clicks), want in zip(batches[10:], expected[10:]):
        np.testing.assert_array_equal(resumed("user", ids, clicks), want)
    assert resumed.counts() == whole.counts()
    assert [afresh("user", ids, clicks).tolist() for ids, clicks in batches[10:]] != [e.tolist() for e in expected[10:]]
