"""Row-wise quantization as pure functions on Paddle tensors (so they run on any device and in training).

encode: fp32 rows -> (packed int8 codes, fp16 row parameters); decode: the inverse, up to the
quantization step. Float formats round to nearest, or stochastically (unbiased) for training updates.
"""
from __future__ import annotations

import paddle
import paddle.nn.functional as F

from ..compat import round_half_away
from .formats import QuantFormat

# precision bits p and smallest normal exponent of the formats rows are rounded to
_FLOAT_BITS = {"float16": (11, -14), "bfloat16": (8, -126)}
FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38}
RANGE_ITERATIONS = 6  # search_range's rounds: its error stops falling after about 5 (int2, int4, int8)


def float_spacing(x: paddle.Tensor, dtype: str) -> paddle.Tensor:
    """Distance between neighbouring values of ``dtype`` at |x| (fp32 tensor, exact powers of two)."""
    precision, min_exponent = _FLOAT_BITS[dtype]
    _, exponent = paddle.frexp(x)                       # x = m * 2**e, 0.5 <= |m| < 1
    exponent = paddle.maximum(exponent, paddle.full_like(exponent, min_exponent + 1))
    return paddle.ldexp(paddle.ones_like(x), (exponent - precision).astype("int32"))


def uniform_noise(x: paddle.Tensor, noise: paddle.Tensor | None) -> paddle.Tensor:
    """Stochastic rounding's uniform [0, 1) draws for x: the given ones, or paddle.rand's."""
    return paddle.rand(x.shape, dtype="float32") if noise is None else noise


def round_to_float(x: paddle.Tensor, dtype: str, stochastic: bool = False, noise: paddle.Tensor | None = None
                   ) -> paddle.Tensor:
    """fp32 values rounded to ``dtype`` and returned in it: to nearest, or stochastically (unbiased,
    E[result] = x; ``noise``: the uniform [0, 1) draws, shaped like x, default paddle.rand's). Paddle
    2.6's own fp32 -> fp16/bf16 cast on CPU truncates toward zero, so the rounding is done here on the
    grid of ``dtype`` and the cast only ever sees representable values."""
    limit = FLOAT_MAX[dtype]
    x = paddle.clip(x, -limit, limit)
    spacing = float_spacing(x, dtype)
    scaled = x / spacing
    if stochastic:
        low = paddle.floor(scaled)
        grid = low + (uniform_noise(x, noise) < scaled - low).astype("float32")
    else:
        grid = round_half_away(scaled)
    return paddle.clip(grid * spacing, -limit, limit).astype(dtype)


def _to_fp16_grid(x: paddle.Tensor) -> paddle.Tensor:
    """Nearest fp16 value, as fp32."""
    return round_to_float(x, "float16").astype("float32")


def _fp16_round(x: paddle.Tensor, direction: str) -> paddle.Tensor:
    """x rounded to an fp16 value <= x ('down') or >= x ('up'), returned as fp32."""
    nearest = _to_fp16_grid(x)
    spacing = float_spacing(nearest, "float16")
    if direction == "down":
        return paddle.where(nearest > x, nearest - spacing, nearest)
    return paddle.where(nearest < x, nearest + spacing, nearest)


def min_max_range(rows: paddle.Tensor, fmt: QuantFormat) -> paddle.Tensor:
    """Row parameters [R, 2] (scale, bias; fp16 values as fp32) that span each row's min to max: bias =
    row min rounded down to fp16, scale = (max - bias) / (levels - 1) rounded up, so every value lies in
    the representable range."""
    levels = float(fmt.base - 1)
    bias = _fp16_round(rows.min(axis=1, keepdim=True), "down")
    # times the fp32 reciprocal, as Paddle 2.6 divides by a number (3.x divides): the same bits on both
    scale = _fp16_round((rows.max(axis=1, keepdim=True) - bias) * (1.0 / levels), "up")
    return paddle.concat([scale, bias], axis=1)


def _grid_digits(x: paddle.Tensor, scale: paddle.Tensor, bias: paddle.Tensor, levels: float) -> paddle.Tensor:
    """Nearest grid digits of float64 rows for float64 (scale, bias) [R, 1], clipped to [0, levels]: the
    search's own rounding, floor(position + 1/2), which the native kernel computes alike (three ops where
    rounding half away takes eight: static programs hold every round)."""
    safe = paddle.where(scale > 0, scale, paddle.ones_like(scale))
    return paddle.clip(paddle.floor((x - bias) / safe + 0.5), 0.0, levels)


def _squared_error(x: paddle.Tensor, scale: paddle.Tensor, bias: paddle.Tensor, digits: paddle.Tensor) -> paddle.Tensor:
    """Each float64 row's squared reconstruction error [R, 1] at its grid digits for (scale, bias)."""
    return (x - (bias + scale * digits)).square().sum(axis=1, keepdim=True)


@paddle.jit.not_to_static  # plain Python under to_static's AST mode: the same ops, without converting each call
def search_range(rows: paddle.Tensor, fmt: QuantFormat, iterations: int) -> paddle.Tensor:
    """Row parameters [R, 2] (scale, bias; fp16 values as fp32) that minimise each row's squared
    reconstruction error, where min-max lets one outlier spend the codes: from the min-max range,
    ``iterations`` rounds of Lloyd's alternation for a uniform grid (digits to the nearest level, then
    scale and bias refit by least squares to those digits, rounded to fp16), keeping the best of all
    rounds by the error at the rounded parameters (a round that gives back its own parameters has
    converged, and the row stops there). Values beyond the chosen range clip to the end levels.
    Statistics are float64 and parameters snap to fp16 every round, so the native kernel
    (kernels/fake_quant.cc), summing in another order, chooses the same parameters. Deterministic; the
    stored format is unchanged."""
    levels = float(fmt.base - 1)
    start = min_max_range(rows, fmt)
    x = rows.astype("float64")
    scale, bias = start[:, 0:1].astype("float64"), start[:, 1:2].astype("float64")
    best_scale, best_bias = scale, bias
    digits = _grid_digits(x, scale, bias, levels)
    best_error = _squared_error(x, scale, bias, digits)
    active = paddle.ones_like(scale, dtype="bool")
    mean_x = x.mean(axis=1, keepdim=True)
    for _ in range(iterations):
        mean_digit = digits.mean(axis=1, keepdim=True)
        centred = digits - mean_digit
        variance = centred.square().mean(axis=1, keepdim=True)
        covariance = (centred * (x - mean_x)).mean(axis=1, keepdim=True)
        fitted = covariance / paddle.where(variance > 0, variance, paddle.ones_like(variance))
        new_scale = _to_fp16_grid(fitted.astype("float32")).astype("float64")
        new_bias = _to_fp16_grid((mean_x - fitted * mean_digit).astype("float32")).astype("float64")
        unchanged = (new_scale == scale) & (new_bias == bias)
        active = active & (variance > 0) & (new_scale > 0) & ~unchanged
        scale, bias = paddle.where(active, new_scale, scale), paddle.where(active, new_bias, bias)
        digits = _grid_digits(x, scale, bias, levels)
        error = _squared_error(x, scale, bias, digits)
        better = active & (error < best_error)
        best_scale, best_bias = paddle.where(better, scale, best_scale), paddle.where(better, bias, best_bias)
        best_error = paddle.where(better, error, best_error)
    return paddle.concat([best_scale, best_bias], axis=1).astype("float32")


def row_digits(rows: paddle.Tensor, fmt: QuantFormat, stochastic: bool = False, ranges: paddle.Tensor | None = None,
               noise: paddle.Tensor | None = None) -> tuple[paddle.Tensor, paddle.Tensor]:
    """Quantize fp32 rows [R, D] to digits in [0, base) (int32) and fp16-exact row parameters [R, P] (fp32).

    intN: each row's (scale, bias) is ``ranges`` [R, 2] when given (search_range's), else its min-max
    range; values decode within half a step inside the range (round to nearest) or within one step,
    unbiased (stochastic, for which only the min-max range keeps every value inside). ternary: TWN
    threshold 0.7 * mean |w|, scale = mean |w| over kept values (the least-squares scale for those
    signs). binary: signs, scale = mean |w|.
    """
    if fmt.name == "binary":
        scale = _to_fp16_grid(rows.abs().mean(axis=1, keepdim=True))
        return (rows >= 0).astype("int32"), scale
    if fmt.name == "ternary":
        magnitude = rows.abs()
        keep = (magnitude > 0.7 * magnitude.mean(axis=1, keepdim=True)).astype("float32")
        count = paddle.clip(keep.sum(axis=1, keepdim=True), min=1.0)
        scale = _to_fp16_grid((magnitude * keep).sum(axis=1, keepdim=True) / count)
        return (paddle.sign(rows) * keep + 1.0).astype("int32"), scale
    levels = float(fmt.base - 1)
    params = min_max_range(rows, fmt) if ranges is None else ranges
    scale, bias = params[:, 0:1], params[:, 1:2]
    safe = paddle.where(scale > 0, scale, paddle.ones_like(scale))
    position = (rows - bias) / safe
    if stochastic:
        position = paddle.floor(position + uniform_noise(position, noise))
    else:
        position = round_half_away(position)
    digits = paddle.clip(position, 0.0, levels).astype("int32")
    return digits, params


def pack(digits: paddle.Tensor, fmt: QuantFormat) -> paddle.Tensor:
    """[R, D] digits -> [R, ceil(D / values_per_byte)] int8 bytes (byte value - 128), little digit first."""
    rows, dim = digits.shape
    per_byte = fmt.values_per_byte
    padded = -(-dim // per_byte) * per_byte
    if padded != dim:
        digits = paddle.concat([digits, paddle.zeros([rows, padded - dim], dtype=digits.dtype)], axis=1)
    weights = paddle.to_tensor([fmt.base ** k for k in range(per_byte)], dtype="int32")
    packed = (digits.reshape([rows, padded // per_byte, per_byte]) * weights).sum(axis=-1)
    return (packed - 128).astype("int8")


def encode(rows: paddle.Tensor, fmt: QuantFormat, stochastic: bool = False, ranges: paddle.Tensor | None = None,
           noise: paddle.Tensor | None = None) -> tuple[paddle.Tensor, paddle.Tensor | None]:
    """fp32 rows -> (codes, row parameters as fp16); float formats return (table in that dtype, None).
    ``ranges``: intN rows' (scale, bias) [R, 2] (search_range's); default: each row's min-max range.
    ``noise``: stochastic rounding's uniform [0, 1) draws, shaped like rows (default: paddle.rand's)."""
    if fmt.is_float:
        return round_to_float(rows, fmt.float_dtype, stochastic, noise), None
    digits, params = row_digits(rows, fmt, stochastic, ranges, noise)
    return pack(digits, fmt), params.astype("float16")


def decode(codes: paddle.Tensor, params: paddle.Tensor | None, fmt: QuantFormat, dim: int) -> paddle.Tensor:
    """Gathered codes [..., bytes] and fp16 parameters [..., P] -> fp32 rows [..., dim]."""
    if fmt.is_float:
        return codes.astype("float32")
    params = params.astype("float32")
    scale = params[..., 0:1]
    if fmt.values_per_byte == 1:  # int8: value = (code + 128) * scale + bias, the +128 folded into the bias
        return codes.astype("float32") * scale + (params[..., 1:2] + 128.0 * scale)
    byte_values = paddle.to_tensor(fmt.byte_table())
    values = F.embedding(codes.astype("int32") + 128, byte_values).flatten(start_axis=-2)
    if values.shape[-1] != dim:
        values = values[..., :dim]
    if fmt.symmetric:
        return values * scale
    return values * scale + params[..., 1:2]


def fake_quantize(rows: paddle.Tensor, fmt: QuantFormat, range_iterations: int = 0) -> paddle.Tensor:
    """decode(encode(rows)), the very values serving will return, with a straight-through gradient (QAT);
    ``range_iterations`` > 0: intN rows on search_range's grid."""
    with paddle.no_grad():
        flat = rows.reshape([-1, rows.shape[-1]])
        ranges = search_range(flat, fmt, range_iterations) if range_iterations and fmt.row_params == 2 else None
        codes, params = encode(flat, fmt, ranges=ranges)
        quantized = decode(codes, params, fmt, rows.shape[-1]).reshape(rows.shape)
    return straight_through(rows, quantized)


def straight_through(rows: paddle.Tensor, quantized: paddle.Tensor) -> paddle.Tensor:
    """Forward: exactly ``quantized``; gradient: the identity to ``rows``."""
    return quantized + (rows - rows.detach())
