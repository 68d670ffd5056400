"""Random values keyed by (seed, row, column): the same for a row wherever it is drawn, and distributed as
they should be."""
import numpy as np
import paddle

from paddle_edo.keyed_random import keyed_normal, keyed_uniform, rounding_noise, rounding_seed, step_randomness


def test_a_row_draws_the_same_values_alone_or_among_others():
    rows = np.arange(1000)
    np.testing.assert_array_equal(keyed_uniform(7, rows[[5, 999, 3]], 16), keyed_uniform(7, rows, 16)[[5, 999, 3]])
    np.testing.assert_array_equal(keyed_normal(7, rows[1::3], 8, 0.1), keyed_normal(7, rows, 8, 0.1)[1::3])
    assert not np.array_equal(keyed_uniform(7, rows, 16), keyed_uniform(8, rows, 16))


def test_the_draws_are_uniform_and_normal():
    uniform = keyed_uniform(3, np.arange(50_000), 16)
    assert uniform.dtype == np.float32 and uniform.min() >= 0 and uniform.max() < 1
    counts = np.histogram(uniform, bins=16, range=(0, 1))[0]
    assert np.abs(counts / uniform.size - 1 / 16).max() < 0.002
    normal = keyed_normal(3, np.arange(50_000), 16, 0.5)
    assert abs(np.corrcoef(normal[:, 0], normal[:, 1])[0, 1]) < 0.02  # a pair's cosine and sine are independent
    assert abs(normal.mean()) < 0.005 and abs(normal.std() - 0.5) < 0.005
    assert abs(np.mean(np.abs(normal) < 0.5) - 0.6827) < 0.005  # one standard deviation


def test_rounding_noise_follows_paddle_seed_and_the_global_rows():
    paddle.seed(1)
    seed = rounding_seed("t")
    paddle.seed(1)
    assert rounding_seed("t") == seed
    first = rounding_noise(paddle.to_tensor([4, 9]), 3, seed).numpy()
    again = rounding_noise(paddle.to_tensor([9]), 3, seed).numpy()
    np.testing.assert_array_equal(again[0], first[1])
    # local rows 2 and 4 of rank 1 of 2 are global rows 5 and 9
    shared = rounding_noise(paddle.to_tensor([2, 4]), 3, seed, lambda rows: rows * 2 + 1).numpy()
    np.testing.assert_array_equal(shared[1], first[1])


def test_in_a_step_a_tables_keys_follow_its_name_and_count_not_the_other_tables():
    """A rank holding tables a and c rounds them as one process holding a, b and c: the keys are a function
    of the step, the table and its own count, and Paddle's generator is not drawn on."""
    with step_randomness(5):
        alone = [rounding_seed("a"), rounding_seed("c"), rounding_seed("a")]
    paddle.seed(3)
    expected_draw = paddle.randint(0, 100, [1]).item()
    paddle.seed(3)
    with step_randomness(5):
        among = [rounding_seed("a"), rounding_seed("b"), rounding_seed("c"), rounding_seed("b"), rounding_seed("a")]
    assert paddle.randint(0, 100, [1]).item() == expected_draw
    assert alone == [among[0], among[2], among[4]] and len(set(among)) == 5
    with step_randomness(6):
        assert rounding_seed("a") != alone[0]  # another step, other keys


def test_the_native_draws_are_numpys():
    from paddle_edo import keyed_random
    from paddle_edo.kernels import c_function
    if c_function("edo_keyed_normal") is None:
        import pytest
        pytest.skip("the native kernels cannot be built here")
    rows = np.random.default_rng(0).integers(0, 2**40, 20_000)
    np.testing.assert_array_equal(keyed_uniform(11, rows, 24), keyed_random._numpy_keyed_uniform(11, rows, 24))
    for dim in (24, 7):  # an odd last column takes a cosine alone
        native, reference = keyed_normal(11, rows, dim, 0.3), keyed_random._numpy_keyed_normal(11, rows, dim, 0.3)
        assert native.dtype == np.float32 and native.shape == (20_000, dim)
        # a double's last bit may round apart in log1p, cos or sin: at most one float32 step, and rarely
        steps = np.abs(native.view(np.int32).astype(np.int64) - reference.view(np.int32).astype(np.int64))
        assert steps.max() <= 1 and np.mean(steps > 0) < 1e-3
