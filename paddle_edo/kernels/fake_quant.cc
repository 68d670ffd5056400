// QAT's fake quantization on the CPU: each fp32 row encoded and decoded in one pass, with the arithmetic of
// quant/codecs.py's encode and decode operation for operation (the same bits), where the composite ops
// run some twenty whole-tensor ops over the batch's distinct rows. fp16 / bf16 rows and the row-wise
// int8 / int4 / int2 formats; ternary and binary scale by a mean, whose summation order is Paddle's own,
// and stay with the composite ops.
#include <algorithm>
#include <cmath>
#include <vector>

#include "paddle/extension.h"

namespace {

enum Format { kFp16 = 0, kBf16 = 1, kInt8 = 2, kInt4 = 3, kInt2 = 4 };

constexpr int64_t kParallelRows = 256;

struct FloatGrid {
  int precision;      // significand bits
  int min_exponent;   // of the smallest normal number
  float limit;        // largest finite value
};

constexpr FloatGrid kHalf{11, -14, 65504.0f};
constexpr FloatGrid kBrain{8, -126, 3.3895313892515355e38f};

// codecs.float_spacing: the distance between neighbouring grid values at |x|, an exact power of two.
inline float Spacing(float x, const FloatGrid& grid) {
  int exponent;
  std::frexp(x, &exponent);  // x = m * 2^e, 0.5 <= |m| < 1
  exponent = std::max(exponent, grid.min_exponent + 1);
  return std::ldexp(1.0f, exponent - grid.precision);
}

// A grid value through the 16-bit float it is stored as and back: a zero loses its sign, and a value
// past the largest finite one (an fp16 rounding up or down from it) becomes infinite, as Paddle's cast does.
inline float ThroughStorage(float x, const FloatGrid& grid) {
  if (x == 0.0f) return 0.0f;
  return std::fabs(x) > grid.limit ? std::copysign(INFINITY, x) : x;
}

// codecs.round_to_float (to nearest): x on the grid of a 16-bit float, as fp32.
inline float RoundToGrid(float x, const FloatGrid& grid) {
  x = std::min(std::max(x, -grid.limit), grid.limit);
  const float spacing = Spacing(x, grid);
  const float rounded = std::round(x / spacing) * spacing;
  return ThroughStorage(std::min(std::max(rounded, -grid.limit), grid.limit), grid);
}

// codecs._fp16_round: the fp16 value <= x (down) or >= x (up).
inline float Fp16Round(float x, bool up) {
  const float nearest = RoundToGrid(x, kHalf);
  const float spacing = Spacing(nearest, kHalf);
  if (up) return nearest < x ? nearest + spacing : nearest;
  return nearest > x ? nearest - spacing : nearest;
}

// One row through codecs.row_digits (round to nearest), then codecs.decode.
void FakeQuantizeIntRow(const float* row, int64_t dim, int levels, float* out) {
  const float low = *std::min_element(row, row + dim), high = *std::max_element(row, row + dim);
  const float bias_fp32 = Fp16Round(low, false);  // encode divides by the fp32 values, decode reads fp16 ones
  // Paddle divides a tensor by a number as a scale op: times the reciprocal, rounded to fp32
  const float scale_fp32 = Fp16Round((high - bias_fp32) * static_cast<float>(1.0 / levels), true);
  const float safe = scale_fp32 > 0.0f ? scale_fp32 : 1.0f;
  const float bias = ThroughStorage(bias_fp32, kHalf), scale = ThroughStorage(scale_fp32, kHalf);
  if (levels == 255) {  // int8 decodes (digit - 128) * scale + (bias + 128 scale)
    const float offset = bias + 128.0f * scale;
    for (int64_t j = 0; j < dim; ++j) {
      const float digit = std::min(std::max(std::round((row[j] - bias_fp32) / safe), 0.0f), 255.0f);
      out[j] = (digit - 128.0f) * scale + offset;
    }
    return;
  }
  for (int64_t j = 0; j < dim; ++j) {
    const float digit = std::min(std::max(std::round((row[j] - bias_fp32) / safe), 0.0f),
                                 static_cast<float>(levels));
    out[j] = digit * scale + bias;
  }
}

}  // namespace

// rows [R, D] fp32 -> the values serving will return for them once packed, [R, D] fp32.
std::vector<paddle::Tensor> FakeQuantize(const paddle::Tensor& rows, int format) {
  PD_CHECK(rows.is_cpu() && rows.dtype() == paddle::DataType::FLOAT32 && rows.shape().size() == 2,
           "rows must be float32 [rows, dim] on the CPU");
  PD_CHECK(format >= kFp16 && format <= kInt2, "fake quantization of format ", format, " is not fused");
  const int64_t n = rows.shape()[0], dim = rows.shape()[1];
  paddle::Tensor out = paddle::empty({n, dim}, paddle::DataType::FLOAT32, paddle::CPUPlace());
  const float* x = rows.data<float>();
  float* o = out.data<float>();
  const int levels = format == kInt8 ? 255 : format == kInt4 ? 15 : 3;
#pragma omp parallel for if (n > kParallelRows)
  for (int64_t r = 0; r < n; ++r) {
    if (format == kFp16 || format == kBf16) {
      const FloatGrid& grid = format == kFp16 ? kHalf : kBrain;
      for (int64_t j = 0; j < dim; ++j) o[r * dim + j] = RoundToGrid(x[r * dim + j], grid);
    } else {
      FakeQuantizeIntRow(x + r * dim, dim, levels, o + r * dim);
    }
  }
  return {out};
}

std::vector<std::vector<int64_t>> FakeQuantizeShape(const std::vector<int64_t>& rows, int format) { return {rows}; }

std::vector<paddle::DataType> FakeQuantizeDtype(const paddle::DataType&) { return {paddle::DataType::FLOAT32}; }

PD_BUILD_OP(edo_fake_quantize)
    .Inputs({"Rows"})
    .Outputs({"Out"})
    .Attrs({"format: int"})
    .SetKernelFn(PD_KERNEL(FakeQuantize))
    .SetInferShapeFn(PD_INFER_SHAPE(FakeQuantizeShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(FakeQuantizeDtype));
