"""Estimates of trained compressed tables: each layer holding the least-squares fit of trained rows, which
is exact when the rows already have the layer's structure."""
import numpy as np
import paddle
import pytest

from paddle_edo.nn import HashEmbedding, MixedDimEmbedding, QREmbedding
from paddle_edo.nn.shared import hash_ids_numpy
from paddle_edo.planner import fitted_table
from paddle_edo.planner.divergence import bernoulli_kl

rng = np.random.default_rng(0)
N, D = 600, 8
COUNTS = rng.integers(1, 50, N).astype(np.float64)


def lookups(layer, ids=np.arange(1, N)):
    with paddle.no_grad():
        return layer(paddle.to_tensor(ids)).numpy()


def test_hashed_rows_that_are_a_sum_of_shared_rows_are_recovered():
    reference = HashEmbedding(N, D, 97)
    shared = rng.normal(0, 1, (97, D))
    buckets = hash_ids_numpy(np.arange(N), reference.coefficients.numpy(), 97)
    trained = shared[buckets].sum(axis=1)
    layer = fitted_table({"type": "hash", "num_buckets": 97}, trained.astype(np.float32), COUNTS)
    assert isinstance(layer, HashEmbedding) and layer.num_buckets == 97
    np.testing.assert_allclose(lookups(layer), trained[1:], atol=0.05)
    assert not lookups(layer, np.array([0])).any()    # the padding id stays zero


def test_quotient_remainder_products_are_recovered():
    m = 25
    quotient, remainder = rng.uniform(0.5, 2, (-(-N // m), D)), rng.uniform(0.5, 2, (m, D))
    trained = quotient[np.arange(N) // m] * remainder[np.arange(N) % m]
    layer = fitted_table({"type": "qr", "num_collisions": m}, trained.astype(np.float32), COUNTS)
    assert isinstance(layer, QREmbedding)
    np.testing.assert_allclose(lookups(layer), trained[1:], rtol=1e-3, atol=1e-3)


def test_mixed_dimension_blocks_keep_rows_of_their_width_exactly():
    frequencies = np.sort(COUNTS)[::-1]
    layer = MixedDimEmbedding(N, D, frequencies, num_blocks=3, alpha=1.0)
    trained = rng.normal(0, 1, (N, D))
    order = np.argsort(layer.rank.numpy())
    starts = [0, *layer.block_ends[:-1]]
    for start, end, width in zip(starts, layer.block_ends, layer.block_dims):  # each block's rows of rank <= width
        ids = order[start:end]
        trained[ids] = rng.normal(0, 1, (len(ids), width)) @ rng.normal(0, 1, (width, D))
    fitted = fitted_table({"type": "mixed_dim", "num_blocks": 3, "alpha": 1.0}, trained.astype(np.float32), frequencies)
    assert fitted.block_dims == layer.block_dims and min(fitted.block_dims) < D
    np.testing.assert_allclose(lookups(fitted), trained[1:], atol=1e-4)


@pytest.mark.parametrize("fmt", ["int8", "int4", "binary"])
def test_packed_formats_are_the_packed_tables_themselves(fmt):
    trained = rng.normal(0, 0.1, (N, D)).astype(np.float32)
    trained[0] = 0
    layer = fitted_table({"type": "quantized", "storage_format": fmt, "mode": "qat"}, trained, COUNTS)
    source = paddle.nn.Embedding(N, D, padding_idx=0)
    source.weight.set_value(trained)
    from paddle_edo.nn import QuantizedEmbedding
    expected = QuantizedEmbedding.from_embedding(source, fmt)
    assert layer.packed and layer.storage_dtype == fmt
    np.testing.assert_array_equal(lookups(layer), lookups(expected))


def test_bernoulli_kl_matches_its_formula_and_is_zero_for_equal_predictions():
    p, q = np.array([0.2, 0.9]), np.array([0.3, 0.5])
    expected = np.mean(p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q)))
    assert bernoulli_kl(p, q) == pytest.approx(expected)
    assert bernoulli_kl(p, p) == 0.0
