// QAT's fake quantization on the CPU: each fp32 row encoded and decoded in one pass, with the arithmetic of
// quant/codecs.py's encode and decode operation for operation (the same bits), where the composite ops
// run some twenty whole-tensor ops over the batch's distinct rows. fp16 / bf16 rows and the row-wise
// int8 / int4 / int2 formats; ternary and binary scale by a mean, whose summation order is Paddle's own,
// and stay with the composite ops there; the table-batched collection takes them from FakeQuantizeRow. The intN rows take their min-max range, or codecs.search_range's
// (float64 statistics, so the kernel chooses codecs' fp16 parameters); edo_encode_rows packs them, and
// edo_write_rows writes low_precision training's stochastically rounded rows back into a packed table.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu_isa.h"
#include "fake_quant.h"
#include "keyed_random.h"
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

// codecs.min_max_range: bias = the row's min rounded down to fp16, scale = (max - bias) / levels rounded up.
void MinMaxRange(const float* row, int64_t dim, int levels, float* scale, float* bias) {
  const float low = *std::min_element(row, row + dim), high = *std::max_element(row, row + dim);
  *bias = Fp16Round(low, false);
  // Paddle divides a tensor by a number as a scale op: times the reciprocal, rounded to fp32
  *scale = Fp16Round((high - *bias) * static_cast<float>(1.0 / levels), true);
}

// codecs._grid_digits on float64 values: clip(floor((x - bias) / scale + 1/2), 0, levels).
inline double GridDigit(double x, double scale, double bias, int levels) {
  const double safe = scale > 0.0 ? scale : 1.0;
  return std::min(std::max(std::floor((x - bias) / safe + 0.5), 0.0), static_cast<double>(levels));
}

__attribute__((target("avx2"))) inline double HorizontalSum(__m256d lanes) {
  double values[4];
  _mm256_storeu_pd(values, lanes);
  return (values[0] + values[1]) + (values[2] + values[3]);
}

// codecs._squared_error from column ``start`` on, keeping the digits it computed for the next round.
double SquaredErrorFrom(const float* row, int64_t start, int64_t dim, double scale, double bias, int levels,
                        double* digits) {
  double total = 0.0;
  for (int64_t j = start; j < dim; ++j) {
    digits[j] = GridDigit(row[j], scale, bias, levels);
    const double error = row[j] - (bias + scale * digits[j]);
    total += error * error;
  }
  return total;
}

// The same four columns at a time with AVX2: the same digits (each lane's division, floor and clip are
// GridDigit's), the total summed in another order (which codecs.search_range's choice allows for).
__attribute__((target("avx2"))) double SquaredErrorAvx2(const float* row, int64_t dim, double scale, double bias,
                                                        int levels, double* digits) {
  const __m256d safe = _mm256_set1_pd(scale > 0.0 ? scale : 1.0), scales = _mm256_set1_pd(scale),
                biases = _mm256_set1_pd(bias), half = _mm256_set1_pd(0.5), top = _mm256_set1_pd(levels),
                zero = _mm256_setzero_pd();
  __m256d total = zero;
  int64_t j = 0;
  for (; j + 4 <= dim; j += 4) {
    const __m256d x = _mm256_cvtps_pd(_mm_loadu_ps(row + j));
    const __m256d level = _mm256_floor_pd(_mm256_add_pd(_mm256_div_pd(_mm256_sub_pd(x, biases), safe), half));
    const __m256d digit = _mm256_min_pd(_mm256_max_pd(level, zero), top);
    _mm256_storeu_pd(digits + j, digit);
    const __m256d error = _mm256_sub_pd(x, _mm256_add_pd(biases, _mm256_mul_pd(scales, digit)));
    total = _mm256_add_pd(total, _mm256_mul_pd(error, error));
  }
  return HorizontalSum(total) + SquaredErrorFrom(row, j, dim, scale, bias, levels, digits);
}

double SquaredError(const float* row, int64_t dim, double scale, double bias, int levels, double* digits) {
  const bool avx2 = edo::HasAvx2();
  return avx2 ? SquaredErrorAvx2(row, dim, scale, bias, levels, digits)
              : SquaredErrorFrom(row, 0, dim, scale, bias, levels, digits);
}

// Lloyd's refit statistics of a row's digits: their mean, and their variance and covariance with the row
// (whose mean is mean_x).
struct Moments {
  double mean_digit, variance, covariance;
};

Moments MomentsPortable(const float* row, const double* digits, int64_t dim, double mean_x) {
  double mean_digit = 0.0, variance = 0.0, covariance = 0.0;
  for (int64_t j = 0; j < dim; ++j) mean_digit += digits[j];
  mean_digit /= static_cast<double>(dim);
  for (int64_t j = 0; j < dim; ++j) {
    const double centred = digits[j] - mean_digit;
    variance += centred * centred;
    covariance += centred * (row[j] - mean_x);
  }
  return {mean_digit, variance / static_cast<double>(dim), covariance / static_cast<double>(dim)};
}

// The same four columns at a time with AVX2, the sums in another order (as SquaredErrorAvx2's).
__attribute__((target("avx2"))) Moments MomentsAvx2(const float* row, const double* digits, int64_t dim,
                                                    double mean_x) {
  const int64_t whole = dim / 4 * 4;
  __m256d sum = _mm256_setzero_pd();
  for (int64_t j = 0; j < whole; j += 4) sum = _mm256_add_pd(sum, _mm256_loadu_pd(digits + j));
  double mean_digit = HorizontalSum(sum);
  for (int64_t j = whole; j < dim; ++j) mean_digit += digits[j];
  mean_digit /= static_cast<double>(dim);
  const __m256d mean_digits = _mm256_set1_pd(mean_digit), mean_xs = _mm256_set1_pd(mean_x);
  __m256d variances = _mm256_setzero_pd(), covariances = _mm256_setzero_pd();
  for (int64_t j = 0; j < whole; j += 4) {
    const __m256d centred = _mm256_sub_pd(_mm256_loadu_pd(digits + j), mean_digits);
    variances = _mm256_add_pd(variances, _mm256_mul_pd(centred, centred));
    covariances = _mm256_add_pd(covariances,
                                _mm256_mul_pd(centred, _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(row + j)), mean_xs)));
  }
  double variance = HorizontalSum(variances), covariance = HorizontalSum(covariances);
  for (int64_t j = whole; j < dim; ++j) {
    const double centred = digits[j] - mean_digit;
    variance += centred * centred;
    covariance += centred * (row[j] - mean_x);
  }
  return {mean_digit, variance / static_cast<double>(dim), covariance / static_cast<double>(dim)};
}

Moments RowMoments(const float* row, const double* digits, int64_t dim, double mean_x) {
  const bool avx2 = edo::HasAvx2();
  return avx2 ? MomentsAvx2(row, digits, dim, mean_x) : MomentsPortable(row, digits, dim, mean_x);
}

// codecs.search_range for one row: Lloyd's alternation for a uniform grid from the min-max range, float64
// statistics, parameters rounded to fp16 each round, the best round kept; a round that gives back the
// parameters it started from has converged (the rounds after it would repeat it).
void SearchRange(const float* row, int64_t dim, int levels, int iterations, float* scale_out, float* bias_out) {
  float scale0, bias0;
  MinMaxRange(row, dim, levels, &scale0, &bias0);
  double scale = scale0, bias = bias0, best_scale = scale0, best_bias = bias0;
  thread_local std::vector<double> digits;
  digits.resize(dim);
  double best_error = SquaredError(row, dim, scale, bias, levels, digits.data());
  double mean_x = 0.0;
  for (int64_t j = 0; j < dim; ++j) mean_x += row[j];
  mean_x /= static_cast<double>(dim);
  for (int round = 0; round < iterations; ++round) {
    const Moments m = RowMoments(row, digits.data(), dim, mean_x);
    if (!(m.variance > 0.0)) break;
    const double fitted = m.covariance / m.variance;
    const double new_scale = RoundToGrid(static_cast<float>(fitted), kHalf);
    const double new_bias = RoundToGrid(static_cast<float>(mean_x - fitted * m.mean_digit), kHalf);
    if (!(new_scale > 0.0) || (new_scale == scale && new_bias == bias)) break;
    scale = new_scale;
    bias = new_bias;
    const double error = SquaredError(row, dim, scale, bias, levels, digits.data());
    if (error < best_error) {
      best_error = error;
      best_scale = scale;
      best_bias = bias;
    }
  }
  *scale_out = static_cast<float>(best_scale);
  *bias_out = static_cast<float>(best_bias);
}

// One row through codecs.row_digits (round to nearest) on the grid (scale_fp32, bias_fp32), then
// codecs.decode, from column ``start`` on.
void FakeQuantizeIntRowFrom(const float* row, int64_t start, int64_t dim, int levels, float scale_fp32,
                            float bias_fp32, float* out) {
  const float safe = scale_fp32 > 0.0f ? scale_fp32 : 1.0f;  // encode divides by the fp32 values
  const float bias = ThroughStorage(bias_fp32, kHalf), scale = ThroughStorage(scale_fp32, kHalf);  // decode: fp16
  if (levels == 255) {  // int8 decodes (digit - 128) * scale + (bias + 128 scale)
    const float offset = bias + 128.0f * scale;
    for (int64_t j = start; j < dim; ++j) {
      const float digit = std::min(std::max(std::round((row[j] - bias_fp32) / safe), 0.0f), 255.0f);
      out[j] = (digit - 128.0f) * scale + offset;
    }
    return;
  }
  for (int64_t j = start; j < dim; ++j) {
    const float digit = std::min(std::max(std::round((row[j] - bias_fp32) / safe), 0.0f),
                                 static_cast<float>(levels));
    out[j] = digit * scale + bias;
  }
}

// The same eight columns at a time with AVX2, each lane's arithmetic the scalar one's: std::round (half
// away from zero) as the truncation plus the sign where the dropped fraction is at least one half (exact).
__attribute__((target("avx2"))) void FakeQuantizeIntRowAvx2(const float* row, int64_t dim, int levels,
                                                            float scale_fp32, float bias_fp32, float* out) {
  const float bias = ThroughStorage(bias_fp32, kHalf), scale = ThroughStorage(scale_fp32, kHalf);
  const bool int8 = levels == 255;
  const __m256 safe = _mm256_set1_ps(scale_fp32 > 0.0f ? scale_fp32 : 1.0f), encode_bias = _mm256_set1_ps(bias_fp32),
               top = _mm256_set1_ps(static_cast<float>(levels)), zero = _mm256_setzero_ps(),
               half = _mm256_set1_ps(0.5f), sign_bit = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f),
               shift = _mm256_set1_ps(int8 ? 128.0f : 0.0f), scales = _mm256_set1_ps(scale),
               offset = _mm256_set1_ps(int8 ? bias + 128.0f * scale : bias);
  int64_t j = 0;
  for (; j + 8 <= dim; j += 8) {
    const __m256 ratio = _mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(row + j), encode_bias), safe);
    const __m256 whole = _mm256_round_ps(ratio, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 dropped = _mm256_andnot_ps(sign_bit, _mm256_sub_ps(ratio, whole));
    const __m256 away = _mm256_or_ps(_mm256_and_ps(ratio, sign_bit), one);
    const __m256 rounded = _mm256_add_ps(whole, _mm256_and_ps(_mm256_cmp_ps(dropped, half, _CMP_GE_OQ), away));
    const __m256 digit = _mm256_min_ps(_mm256_max_ps(rounded, zero), top);
    const __m256 level = int8 ? _mm256_sub_ps(digit, shift) : digit;
    _mm256_storeu_ps(out + j, _mm256_add_ps(_mm256_mul_ps(level, scales), offset));
  }
  FakeQuantizeIntRowFrom(row, j, dim, levels, scale_fp32, bias_fp32, out);
}

void FakeQuantizeIntRow(const float* row, int64_t dim, int levels, float scale_fp32, float bias_fp32, float* out) {
  const bool avx2 = edo::HasAvx2();
  if (avx2) {
    FakeQuantizeIntRowAvx2(row, dim, levels, scale_fp32, bias_fp32, out);
  } else {
    FakeQuantizeIntRowFrom(row, 0, dim, levels, scale_fp32, bias_fp32, out);
  }
}

// The (scale, bias) encode uses for a row: its min-max range, or search_range's with iterations > 0.
void RowRange(const float* row, int64_t dim, int levels, int iterations, float* scale, float* bias) {
  if (iterations > 0) {
    SearchRange(row, dim, levels, iterations, scale, bias);
  } else {
    MinMaxRange(row, dim, levels, scale, bias);
  }
}

int Levels(int format) { return format == kInt8 ? 255 : format == kInt4 ? 15 : 3; }

void CheckRows(const paddle::Tensor& rows) {
  PD_CHECK(rows.is_cpu() && rows.dtype() == paddle::DataType::FLOAT32 && rows.shape().size() == 2,
           "rows must be float32 [rows, dim] on the CPU");
}

// codecs.row_digits and decode of the symmetric formats: binary keeps signs at scale mean |w|; ternary
// keeps the values above 0.7 mean |w|, at the mean of their magnitudes (both scales on the fp16 grid).
void FakeQuantizeSymmetricRow(const float* row, int64_t dim, bool ternary, float* out) {
  float sum = 0.0f;
  for (int64_t j = 0; j < dim; ++j) sum += std::fabs(row[j]);
  const float mean = sum / static_cast<float>(dim);
  if (!ternary) {
    const float scale = RoundToGrid(mean, kHalf);
    for (int64_t j = 0; j < dim; ++j) out[j] = row[j] >= 0.0f ? scale : -scale;
    return;
  }
  const float threshold = 0.7f * mean;
  float kept = 0.0f, count = 0.0f;
  for (int64_t j = 0; j < dim; ++j) {
    if (std::fabs(row[j]) > threshold) {
      kept += std::fabs(row[j]);
      count += 1.0f;
    }
  }
  const float scale = RoundToGrid(kept / std::max(count, 1.0f), kHalf);
  for (int64_t j = 0; j < dim; ++j) {
    out[j] = std::fabs(row[j]) > threshold ? (row[j] > 0.0f ? scale : row[j] < 0.0f ? -scale : 0.0f) : 0.0f;
  }
}

}  // namespace

void edo::FakeQuantizeRow(const float* row, int64_t dim, int format, int iterations, float* out) {
  if (format == kFp16 || format == kBf16) {
    const FloatGrid& grid = format == kFp16 ? kHalf : kBrain;
    for (int64_t j = 0; j < dim; ++j) out[j] = RoundToGrid(row[j], grid);
  } else if (format == edo::kFakeTernary || format == edo::kFakeBinary) {
    FakeQuantizeSymmetricRow(row, dim, format == edo::kFakeTernary, out);
  } else {
    const int levels = Levels(format);
    float scale, bias;
    RowRange(row, dim, levels, iterations, &scale, &bias);
    FakeQuantizeIntRow(row, dim, levels, scale, bias, out);
  }
}

// rows [R, D] fp32 -> the values serving will return for them once packed, [R, D] fp32.
// iterations > 0: intN rows on codecs.search_range's grid.
std::vector<paddle::Tensor> FakeQuantize(const paddle::Tensor& rows, int format, int iterations) {
  CheckRows(rows);
  PD_CHECK(format >= kFp16 && format <= kInt2, "fake quantization of format ", format, " is not fused");
  const int64_t n = rows.shape()[0], dim = rows.shape()[1];
  paddle::Tensor out = paddle::empty({n, dim}, paddle::DataType::FLOAT32, paddle::CPUPlace());
  const float* x = rows.data<float>();
  float* o = out.data<float>();
#pragma omp parallel for if (n > kParallelRows)
  for (int64_t r = 0; r < n; ++r) edo::FakeQuantizeRow(x + r * dim, dim, format, iterations, o + r * dim);
  return {out};
}

std::vector<std::vector<int64_t>> FakeQuantizeShape(const std::vector<int64_t>& rows, int format, int iterations) {
  return {rows};
}

std::vector<paddle::DataType> FakeQuantizeDtype(const paddle::DataType&) { return {paddle::DataType::FLOAT32}; }

PD_BUILD_OP(edo_fake_quantize)
    .Inputs({"Rows"})
    .Outputs({"Out"})
    .Attrs({"format: int", "iterations: int"})
    .SetKernelFn(PD_KERNEL(FakeQuantize))
    .SetInferShapeFn(PD_INFER_SHAPE(FakeQuantizeShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(FakeQuantizeDtype));

// codecs.encode of the intN formats on the CPU (round to nearest), for packing: rows [R, D] fp32 -> the
// packed codes [R, ceil(D / values per byte)] int8 (byte value - 128, little digit first) and the row
// parameters [R, 2] fp16 (scale, bias), each row on its min-max range or codecs.search_range's.
std::vector<paddle::Tensor> EncodeRows(const paddle::Tensor& rows, int format, int iterations) {
  CheckRows(rows);
  PD_CHECK(format >= kInt8 && format <= kInt2, "rows of format ", format, " are not encoded natively");
  const int64_t n = rows.shape()[0], dim = rows.shape()[1];
  const int levels = Levels(format), per_byte = format == kInt8 ? 1 : format == kInt4 ? 2 : 4;
  const int64_t code_bytes = (dim + per_byte - 1) / per_byte;
  paddle::Tensor codes = paddle::empty({n, code_bytes}, paddle::DataType::INT8, paddle::CPUPlace());
  paddle::Tensor params = paddle::empty({n, 2}, paddle::DataType::FLOAT16, paddle::CPUPlace());
  const float* x = rows.data<float>();
  int8_t* c = codes.data<int8_t>();
  paddle::float16* p = params.data<paddle::float16>();
#pragma omp parallel for if (n > kParallelRows)
  for (int64_t r = 0; r < n; ++r) {
    const float* row = x + r * dim;
    float scale, bias;
    RowRange(row, dim, levels, iterations, &scale, &bias);
    const float safe = scale > 0.0f ? scale : 1.0f;
    for (int64_t b = 0; b < code_bytes; ++b) {
      int value = 0, weight = 1;
      for (int k = 0; k < per_byte; ++k, weight *= levels + 1) {
        const int64_t j = b * per_byte + k;
        if (j >= dim) break;
        const float digit = std::min(std::max(std::round((row[j] - bias) / safe), 0.0f), static_cast<float>(levels));
        value += static_cast<int>(digit) * weight;
      }
      c[r * code_bytes + b] = static_cast<int8_t>(value - 128);
    }
    p[2 * r] = paddle::float16(ThroughStorage(scale, kHalf));
    p[2 * r + 1] = paddle::float16(ThroughStorage(bias, kHalf));
  }
  return {codes, params};
}

std::vector<std::vector<int64_t>> EncodeRowsShape(const std::vector<int64_t>& rows, int format, int iterations) {
  const int per_byte = format == kInt8 ? 1 : format == kInt4 ? 2 : 4;
  return {{rows[0], (rows[1] + per_byte - 1) / per_byte}, {rows[0], 2}};
}

std::vector<paddle::DataType> EncodeRowsDtype(const paddle::DataType&) {
  return {paddle::DataType::INT8, paddle::DataType::FLOAT16};
}

PD_BUILD_OP(edo_encode_rows)
    .Inputs({"Rows"})
    .Outputs({"Codes", "Params"})
    .Attrs({"format: int", "iterations: int"})
    .SetKernelFn(PD_KERNEL(EncodeRows))
    .SetInferShapeFn(PD_INFER_SHAPE(EncodeRowsShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(EncodeRowsDtype));

namespace {

// codecs.round_to_float, stochastic: x on the grid of a 16-bit float, rounded up where the uniform draw is
// below x's fraction of a spacing (unbiased), as fp32.
inline float StochasticToGrid(float x, float uniform, const FloatGrid& grid) {
  x = std::min(std::max(x, -grid.limit), grid.limit);
  const float spacing = Spacing(x, grid);
  const float scaled = x / spacing, low = std::floor(scaled);
  const float rounded = (low + (uniform < scaled - low ? 1.0f : 0.0f)) * spacing;
  return ThroughStorage(std::min(std::max(rounded, -grid.limit), grid.limit), grid);
}

// codecs.encode of one int8 row, stochastic (codecs.row_digits): min-max range, digit =
// clip(floor((x - bias) / scale + uniform), 0, 255), stored as digit - 128.
void StochasticInt8Row(const float* row, const float* uniform, int64_t dim, int8_t* codes, paddle::float16* params) {
  float scale, bias;
  MinMaxRange(row, dim, 255, &scale, &bias);
  const float safe = scale > 0.0f ? scale : 1.0f;
  for (int64_t j = 0; j < dim; ++j) {
    const float digit = std::min(std::max(std::floor((row[j] - bias) / safe + uniform[j]), 0.0f), 255.0f);
    codes[j] = static_cast<int8_t>(static_cast<int>(digit) - 128);
  }
  params[0] = paddle::float16(ThroughStorage(scale, kHalf));
  params[1] = paddle::float16(ThroughStorage(bias, kHalf));
}

}  // namespace

// low_precision's write-back: rows [U, D] fp32 encoded as codecs.encode(stochastic=True) encodes them, and
// written in place at ``ids`` [U] (strictly increasing) of a packed table: ``codes`` fp16 / bf16 [R, D]
// (``params`` unused), or int8 [R, D] with fp16 ``params`` [R, 2]. The uniform draws are
// keyed_random.rounding_noise's, made here row by row: value j of row ids[u] draws the keyed uniform of
// (seed, (first + step x ids[u]) x D + j), its row's place in the whole table (a rank's share: first = its
// rank, step = the ranks), so the composite path's draws are the same bits.
void WriteRows(paddle::Tensor& codes, paddle::Tensor& params, const paddle::Tensor& ids, const paddle::Tensor& rows,
               int format, int64_t seed, int64_t first, int64_t step) {
  CheckRows(rows);
  PD_CHECK(format >= kFp16 && format <= kInt8, "rows of format ", format, " are not written natively");
  PD_CHECK(codes.is_cpu() && codes.shape().size() == 2, "codes must be a 2-D tensor on the CPU");
  PD_CHECK(ids.is_cpu() && ids.dtype() == paddle::DataType::INT64 && ids.shape().size() == 1,
           "ids must be 1-D int64 on the CPU");
  const int64_t n = rows.shape()[0], dim = rows.shape()[1], table_rows = codes.shape()[0];
  PD_CHECK(ids.numel() == n, "one id a row: ", ids.numel(), " ids, ", n, " rows");
  PD_CHECK(codes.shape()[1] == dim, "the table must be dim wide");
  const int64_t* id = ids.data<int64_t>();
  for (int64_t u = 0; u < n; ++u) {  // before any write
    PD_CHECK(id[u] >= 0 && id[u] < table_rows, "id ", id[u], " is outside [0, ", table_rows, ")");
    PD_CHECK(u == 0 || id[u] > id[u - 1], "ids must be distinct and increasing (", id[u - 1], " then ", id[u], ")");
  }
  const float* x = rows.data<float>();
  const bool int8 = format == kInt8, half = format == kFp16;
  if (int8) {
    PD_CHECK(codes.dtype() == paddle::DataType::INT8, "int8 codes must be int8");
    PD_CHECK(params.is_cpu() && params.dtype() == paddle::DataType::FLOAT16 && params.shape().size() == 2 &&
                 params.shape()[0] == table_rows && params.shape()[1] == 2,
             "row parameters must be float16 [rows, 2]");
  } else {
    PD_CHECK(codes.dtype() == (half ? paddle::DataType::FLOAT16 : paddle::DataType::BFLOAT16),
             "a ", half ? "fp16" : "bf16", " table must be ", half ? "float16" : "bfloat16");
  }
  const FloatGrid& grid = half ? kHalf : kBrain;
  int8_t* c = int8 ? codes.data<int8_t>() : nullptr;
  paddle::float16* p = int8 ? params.data<paddle::float16>() : nullptr;
  paddle::float16* h = half ? codes.data<paddle::float16>() : nullptr;
  paddle::bfloat16* b = int8 || half ? nullptr : codes.data<paddle::bfloat16>();
#pragma omp parallel if (n > kParallelRows)
  {
    std::vector<float> uniform(dim);
#pragma omp for schedule(static)
    for (int64_t u = 0; u < n; ++u) {
      const uint64_t key = static_cast<uint64_t>(first + step * id[u]) * static_cast<uint64_t>(dim);
      for (int64_t j = 0; j < dim; ++j) uniform[j] = edo::KeyedUniform(static_cast<uint64_t>(seed), key + j);
      const float* row = x + u * dim;
      if (int8) {
        StochasticInt8Row(row, uniform.data(), dim, c + id[u] * dim, p + 2 * id[u]);
        continue;
      }
      for (int64_t j = 0; j < dim; ++j) {
        const float value = StochasticToGrid(row[j], uniform[j], grid);  // on the grid: exact
        if (half) {
          h[id[u] * dim + j] = paddle::float16(value);
        } else {
          b[id[u] * dim + j] = paddle::bfloat16(value);
        }
      }
    }
  }
}

PD_BUILD_OP(edo_write_rows)
    .Inputs({"Codes", "Params", "Ids", "Rows"})
    .Outputs({"CodesOut", "ParamsOut"})
    .Attrs({"format: int", "seed: int64_t", "first: int64_t", "step: int64_t"})
    .SetInplaceMap({{"Codes", "CodesOut"}, {"Params", "ParamsOut"}})
    .SetKernelFn(PD_KERNEL(WriteRows));
