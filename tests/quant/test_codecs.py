import numpy as np
import paddle
import pytest

from paddle_edo.quant import FORMATS, get_format
from paddle_edo.quant import codecs

CODE_FORMATS = ["int8", "int4", "int2", "ternary", "binary"]


def rows(n=300, dim=37, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, dim)) * rng.uniform(0.001, 5.0, (n, 1)) + rng.uniform(-3, 3, (n, 1))
    return w.astype(np.float32)


@pytest.mark.parametrize("name", ["int8", "int4", "int2"])
def test_intn_rows_decode_within_half_a_step(name):
    fmt = FORMATS[name]
    w = rows()
    codes, params = codecs.encode(paddle.to_tensor(w), fmt)
    decoded = codecs.decode(codes, params, fmt, w.shape[1]).numpy()
    scale = params.astype("float32").numpy()[:, :1]
    assert (scale > 0).all()
    # half a step, plus fp32 rounding of the decode arithmetic
    assert (np.abs(decoded - w) <= 0.5 * scale * (1 + 1e-5) + 1e-6 * np.abs(w)).all()
    # the codes use the whole range of levels somewhere in each row (min and max are representable)
    assert np.allclose(decoded.min(1), w.min(1), atol=float(scale.max()))


@pytest.mark.parametrize("name", CODE_FORMATS)
def test_bytes_are_packed(name):
    fmt = FORMATS[name]
    codes, params = codecs.encode(paddle.to_tensor(rows(dim=64)), fmt)
    bits = {"int8": 8, "int4": 4, "int2": 2, "ternary": 8 / 5, "binary": 1}[name]
    assert codes.dtype == paddle.int8 and codes.shape == [300, int(np.ceil(64 * bits / 8))]
    assert params.dtype == paddle.float16 and params.shape == [300, fmt.row_params]
    assert fmt.row_bytes(64) == codes.shape[1] + 2 * fmt.row_params


def test_packing_round_trips_every_digit_pattern():
    for name in CODE_FORMATS:
        fmt = FORMATS[name]
        digits = paddle.to_tensor(np.random.default_rng(1).integers(0, fmt.base, (50, 13)).astype("int32"))
        packed = codecs.pack(digits, fmt)
        unpacked = fmt.byte_table()[packed.numpy().astype(np.int32) + 128].reshape(50, -1)[:, :13]
        np.testing.assert_array_equal(unpacked, fmt.level_values()[digits.numpy()])


def test_ternary_and_binary_use_the_least_squares_scale():
    w = rows(dim=40)
    for name in ("ternary", "binary"):
        fmt = FORMATS[name]
        codes, params = codecs.encode(paddle.to_tensor(w), fmt)
        decoded = codecs.decode(codes, params, fmt, 40).numpy()
        scale = params.astype("float32").numpy()
        signs = np.sign(decoded)
        kept = np.abs(w) > 0.7 * np.abs(w).mean(1, keepdims=True) if name == "ternary" else np.ones_like(w, bool)
        np.testing.assert_array_equal(signs != 0, kept)
        np.testing.assert_array_equal(signs[kept], np.where(w[kept] >= 0, 1, -1))
        best = (np.abs(w) * kept).sum(1, keepdims=True) / kept.sum(1, keepdims=True)
        np.testing.assert_allclose(scale, best, rtol=1e-3)  # fp16 rounding of the scale


@pytest.mark.parametrize("dtype,bits", [("float16", 11), ("bfloat16", 8)])
def test_float_rounding_is_nearest_or_unbiased_stochastic(dtype, bits):
    w = paddle.to_tensor(rows())
    nearest = codecs.round_to_float(w, dtype).astype("float32").numpy()
    assert (np.abs(nearest - w.numpy()) <= np.abs(w.numpy()) * 2.0 ** -bits + 2.0 ** -30).all()
    # a value between two representable neighbours: stochastic rounding lands on one of them, with mean x
    x = 1.0 + 2.0 ** -(bits + 1)  # a quarter of the way from 1 to the next value
    paddle.seed(0)
    samples = codecs.round_to_float(paddle.full([200_000], x), dtype, stochastic=True).astype("float32").numpy()
    assert set(np.unique(samples)) == {1.0, 1.0 + 2.0 ** -(bits - 1)}
    assert samples.mean() == pytest.approx(x, abs=4 * 2.0 ** -(bits - 1) * 0.5 / np.sqrt(200_000))


def test_stochastic_int8_rounding_is_unbiased():
    w = np.tile(np.linspace(-1, 1, 64, dtype=np.float32), (4000, 1))
    w[:, 5] = 0.123456
    paddle.seed(1)
    codes, params = codecs.encode(paddle.to_tensor(w), FORMATS["int8"], stochastic=True)
    decoded = codecs.decode(codes, params, FORMATS["int8"], 64).numpy()
    step = float(params.astype("float32").numpy()[0, 0])
    assert np.abs(decoded - w).max() <= step * (1 + 1e-5)
    assert decoded[:, 5].mean() == pytest.approx(0.123456, abs=step / 20)


def test_fake_quantize_returns_the_served_values_with_a_straight_through_gradient():
    w = paddle.to_tensor(rows(20, 10), stop_gradient=False)
    for name, fmt in FORMATS.items():
        out = codecs.fake_quantize(w, fmt)
        codes, params = codecs.encode(w.detach(), fmt)
        np.testing.assert_array_equal(out.numpy(), codecs.decode(codes, params, fmt, 10).numpy())
        (out * 3.0).sum().backward()
        np.testing.assert_array_equal(w.grad.numpy(), np.full((20, 10), 3.0, np.float32))
        w.clear_gradient()


def test_unknown_format_lists_the_supported_ones():
    with pytest.raises(ValueError, match="'int3' is not supported; supported: fp16, bf16, int8, int4, int2, ternary, binary"):
        get_format("int3")


def squared_errors(w: np.ndarray, fmt, ranges=None) -> np.ndarray:
    codes, params = codecs.encode(paddle.to_tensor(w), fmt, ranges=ranges)
    return ((codecs.decode(codes, params, fmt, w.shape[1]).numpy().astype(np.float64) - w) ** 2).sum(1)


@pytest.mark.parametrize("name", ["int8", "int4", "int2"])
def test_searched_ranges_never_lose_to_min_max_and_win_on_outliers(name):
    fmt = FORMATS[name]
    rng = np.random.default_rng(3)
    w = rng.normal(0, 0.1, (2000, 64)).astype(np.float32)
    w[:, 0] = rng.choice([-1.0, 1.0], 2000) * 2.0          # one outlier per row spends min-max's codes
    ranges = codecs.search_range(paddle.to_tensor(w), fmt, codecs.RANGE_ITERATIONS)
    searched, min_max = squared_errors(w, fmt, ranges), squared_errors(w, fmt)
    assert (searched <= min_max * (1 + 1e-6) + 1e-12).all()
    assert searched.mean() < {"int8": 0.97, "int4": 0.92, "int2": 0.3}[name] * min_max.mean()
    params = ranges.numpy()
    np.testing.assert_array_equal(params, params.astype(np.float16).astype(np.float32))  # stored as fp16 exactly


def test_a_range_search_keeps_constant_and_zero_rows_exact():
    fmt = FORMATS["int4"]
    w = np.zeros((3, 16), np.float32)
    w[1] = 0.75
    w[2, :8] = 1.0                  # two values: 15 x the min-max scale misses 1.0 by fp16 rounding
    ranges = codecs.search_range(paddle.to_tensor(w), fmt, codecs.RANGE_ITERATIONS)
    searched = squared_errors(w, fmt, ranges)
    np.testing.assert_array_equal(searched[:2], 0.0)
    assert searched[2] <= squared_errors(w, fmt)[2]


def test_search_matches_a_numpy_reference_of_lloyds_rounds():
    """codecs.search_range against an independent float64 implementation of the same rounds."""
    fmt, levels = FORMATS["int2"], 3.0
    w = np.random.default_rng(5).standard_t(3, (200, 32)).astype(np.float32)
    expected = []
    for row in w.astype(np.float64):
        start = codecs.min_max_range(paddle.to_tensor(row[None].astype(np.float32)), fmt).numpy()[0]
        scale, bias = float(start[0]), float(start[1])

        def digits(s, b):
            return np.clip(np.floor((row - b) / s + 0.5), 0, levels)

        def error(s, b):
            return ((row - (b + s * digits(s, b))) ** 2).sum()
        best, best_error = (scale, bias), error(scale, bias)
        for _ in range(codecs.RANGE_ITERATIONS):
            q = digits(scale, bias)
            variance = ((q - q.mean()) ** 2).mean()
            if variance <= 0:
                break
            fitted = ((q - q.mean()) * (row - row.mean())).mean() / variance
            new = (float(np.float16(np.float32(fitted))), float(np.float16(np.float32(row.mean() - fitted * q.mean()))))
            if new[0] <= 0 or new == (scale, bias):
                break
            scale, bias = new
            if error(scale, bias) < best_error:
                best, best_error = (scale, bias), error(scale, bias)
        expected.append(best)
    found = codecs.search_range(paddle.to_tensor(w), fmt, codecs.RANGE_ITERATIONS).numpy()
    np.testing.assert_array_equal(found, np.float32(expected))
