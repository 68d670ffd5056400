import numpy as np

from tools.bench_packing import noise_reference, overlap, top_neighbours, with_noise


def test_noise_is_the_asked_share_of_each_rows_norm():
    vectors = np.random.default_rng(0).standard_normal((50, 16))
    noisy = with_noise(vectors, 0.1)
    ratios = np.linalg.norm(noisy - vectors, axis=1) / np.linalg.norm(vectors, axis=1)
    np.testing.assert_allclose(ratios, 0.1)


def test_overlap_counts_the_shared_neighbours():
    assert overlap(np.array([[1, 2], [3, 4]]), np.array([[2, 1], [3, 5]])) == 0.75


def test_the_noise_reference_orders_the_widths_and_the_targets():
    vectors = np.random.default_rng(2).standard_normal((400, 16))   # not the noise's own seed (1)
    chosen = np.arange(40)
    reference = noise_reference(vectors, chosen, top_neighbours(vectors, chosen))
    kept = [reference["rate_distortion_bound"][bits]["top10_overlap"] for bits in (8, 4, 2)]
    assert kept[0] >= kept[1] >= kept[2] and kept[0] > kept[2]
    needed = [reference["error_for_overlap"][target] for target in ("0.995", "0.92", "0.6")]
    assert needed[0] <= needed[1] <= needed[2] and needed[0] < needed[2]
