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
