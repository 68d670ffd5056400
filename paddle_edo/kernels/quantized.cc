// Fused gather-decode of QuantizedEmbedding's packed rows on the CPU: one pass reads each looked-up row's
// codes and fp16 parameters and writes its fp32 values, where Paddle's composite ops write the gathered
// codes, their cast, and each broadcast multiply and add as whole tensors. The arithmetic is the
// composite decode's (quant/codecs.py), operation for operation, so both give the same bits.
#include <immintrin.h>

#include <array>
#include <atomic>
#include <cstring>
#include <vector>

#include "paddle/extension.h"

namespace {

// Formats, numbered as quant/formats.py lists them.
enum Format { kFp16 = 0, kBf16 = 1, kInt8 = 2, kInt4 = 3, kInt2 = 4, kTernary = 5, kBinary = 6 };

constexpr int64_t kPrefetchDistance = 8;
constexpr int64_t kParallelLookups = 4096;

struct Layout {
  int base;            // levels per code digit
  int values_per_byte;
  bool symmetric;      // scale only (ternary, binary), else scale and bias
};

Layout LayoutOf(int format) {
  switch (format) {
    case kInt8: return {256, 1, false};
    case kInt4: return {16, 2, false};
    case kInt2: return {4, 4, false};
    case kTernary: return {3, 5, true};
    case kBinary: return {2, 8, true};
    default: return {0, 0, false};
  }
}

// byte (stored as int8 b - 128) -> the level values of its digits, little digit first, as
// QuantFormat.byte_table builds it.
std::vector<float> ByteTable(int format) {
  const Layout layout = LayoutOf(format);
  std::vector<float> table(256 * layout.values_per_byte);
  for (int b = 0; b < 256; ++b) {
    int rest = b;
    for (int k = 0; k < layout.values_per_byte; ++k) {
      const int digit = rest % layout.base;
      rest /= layout.base;
      float level = static_cast<float>(digit);
      if (format == kTernary) level = static_cast<float>(digit - 1);
      if (format == kBinary) level = digit == 0 ? -1.0f : 1.0f;
      table[b * layout.values_per_byte + k] = level;
    }
  }
  return table;
}

const std::vector<float>& CachedByteTable(int format) {
  static const std::array<std::vector<float>, 7> tables = {
      std::vector<float>(), std::vector<float>(), ByteTable(kInt8), ByteTable(kInt4), ByteTable(kInt2),
      ByteTable(kTernary), ByteTable(kBinary)};
  return tables[format];
}

inline void Prefetch(const void* row, int64_t bytes) {
  const char* p = static_cast<const char*>(row);
  for (int64_t k = 0; k < bytes; k += 64) __builtin_prefetch(p + k);
}

// fp16 -> fp32: F16C's conversion (exact) where the processor has it, else Paddle's float16 conversion.
__attribute__((target("avx,f16c"))) void Fp16RowF16C(const uint16_t* src, float* dst, int64_t dim) {
  int64_t j = 0;
  for (; j + 8 <= dim; j += 8) {
    _mm256_storeu_ps(dst + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j))));
  }
  for (; j < dim; ++j) dst[j] = _cvtsh_ss(src[j]);
}

void Fp16RowPortable(const uint16_t* src, float* dst, int64_t dim) {
  const paddle::float16* half = reinterpret_cast<const paddle::float16*>(src);
  for (int64_t j = 0; j < dim; ++j) dst[j] = static_cast<float>(half[j]);
}

// bf16 -> fp32 is exact: the bf16 bits are the high half of the fp32 bits.
void Bf16Row(const uint16_t* src, float* dst, int64_t dim) {
  uint32_t* bits = reinterpret_cast<uint32_t*>(dst);
  for (int64_t j = 0; j < dim; ++j) bits[j] = static_cast<uint32_t>(src[j]) << 16;
}

void DecodeFloatRows(const int64_t* id, int64_t n, const uint16_t* table, int format, int64_t dim,
                     bool has_padding, int64_t padding_idx, float* out) {
  static const bool f16c = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  void (*convert)(const uint16_t*, float*, int64_t) =
      format == kBf16 ? Bf16Row : (f16c ? Fp16RowF16C : Fp16RowPortable);
#pragma omp parallel for if (n > kParallelLookups)
  for (int64_t i = 0; i < n; ++i) {
    if (i + kPrefetchDistance < n) Prefetch(table + id[i + kPrefetchDistance] * dim, dim * 2);
    float* row = out + i * dim;
    if (has_padding && id[i] == padding_idx) {
      std::memset(row, 0, sizeof(float) * dim);
      continue;
    }
    convert(table + id[i] * dim, row, dim);
  }
}

// One row of sub-byte codes: each byte's digits from the byte table, times the scale (plus the bias).
template <int kPerByte, bool kSymmetric>
inline void DecodeSubByteRow(const int8_t* src, const float* byte_table, float scale, float bias, int64_t dim,
                             float* row) {
  const int64_t full = dim / kPerByte;
  for (int64_t c = 0; c < full; ++c) {
    const float* levels = byte_table + (static_cast<int>(src[c]) + 128) * kPerByte;
    float* dst = row + c * kPerByte;
    for (int k = 0; k < kPerByte; ++k) dst[k] = kSymmetric ? levels[k] * scale : levels[k] * scale + bias;
  }
  if (full * kPerByte < dim) {
    const float* levels = byte_table + (static_cast<int>(src[full]) + 128) * kPerByte;
    for (int64_t j = full * kPerByte; j < dim; ++j) {
      const float level = levels[j - full * kPerByte];
      row[j] = kSymmetric ? level * scale : level * scale + bias;
    }
  }
}

template <int kPerByte, bool kSymmetric>
void DecodeCodeRows(const int64_t* id, int64_t n, const int8_t* codes, int64_t code_bytes,
                    const paddle::float16* params, int format, int64_t dim, bool has_padding, int64_t padding_idx,
                    float* out) {
  constexpr int params_per_row = kSymmetric ? 1 : 2;
  const float* byte_table = CachedByteTable(format).data();
#pragma omp parallel for if (n > kParallelLookups)
  for (int64_t i = 0; i < n; ++i) {
    if (i + kPrefetchDistance < n) Prefetch(codes + id[i + kPrefetchDistance] * code_bytes, code_bytes);
    float* row = out + i * dim;
    if (has_padding && id[i] == padding_idx) {
      std::memset(row, 0, sizeof(float) * dim);
      continue;
    }
    const int8_t* src = codes + id[i] * code_bytes;
    const float scale = static_cast<float>(params[id[i] * params_per_row]);
    const float bias = kSymmetric ? 0.0f : static_cast<float>(params[id[i] * 2 + 1]);
    if (kPerByte == 1) {  // int8: code * scale + (bias + 128 scale), as codecs.decode folds the offset
      const float offset = bias + 128.0f * scale;
      for (int64_t j = 0; j < dim; ++j) row[j] = static_cast<float>(src[j]) * scale + offset;
    } else {
      DecodeSubByteRow<kPerByte, kSymmetric>(src, byte_table, scale, bias, dim, row);
    }
  }
}

}  // namespace

// ids [...] int64 -> fp32 rows [..., dim] of a packed table: fp16 / bf16 tables (``codes`` is the table,
// ``params`` an empty tensor) or code formats (``codes`` int8 [rows, bytes], ``params`` fp16 [rows, 1 or 2]).
std::vector<paddle::Tensor> QuantizedLookup(const paddle::Tensor& ids, const paddle::Tensor& codes,
                                            const paddle::Tensor& params, int format, int64_t dim,
                                            bool has_padding, int64_t padding_idx) {
  PD_CHECK(ids.is_cpu() && ids.dtype() == paddle::DataType::INT64, "ids must be int64 on the CPU");
  PD_CHECK(codes.is_cpu() && codes.shape().size() == 2, "codes must be a 2-D tensor on the CPU");
  PD_CHECK(format >= kFp16 && format <= kBinary, "unknown format ", format);
  const int64_t n = ids.numel(), rows = codes.shape()[0];
  const int64_t* id = ids.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {  // before any read: an id outside the table never reaches memory
    PD_CHECK(id[i] >= 0 && id[i] < rows, "id ", id[i], " is outside [0, ", rows, ")");
  }
  std::vector<int64_t> shape = ids.shape();
  shape.push_back(dim);
  paddle::Tensor out = paddle::empty(shape, paddle::DataType::FLOAT32, paddle::CPUPlace());
  float* o = out.data<float>();
  if (format == kFp16 || format == kBf16) {
    PD_CHECK(codes.shape()[1] == dim, "a float table must be dim wide");
    const void* table;
    if (format == kFp16) {
      PD_CHECK(codes.dtype() == paddle::DataType::FLOAT16, "an fp16 table must be float16");
      table = codes.data<paddle::float16>();
    } else {
      PD_CHECK(codes.dtype() == paddle::DataType::BFLOAT16, "a bf16 table must be bfloat16");
      table = codes.data<paddle::bfloat16>();
    }
    DecodeFloatRows(id, n, static_cast<const uint16_t*>(table), format, dim, has_padding, padding_idx, o);
    return {out};
  }
  const Layout layout = LayoutOf(format);
  PD_CHECK(codes.dtype() == paddle::DataType::INT8, "codes must be int8");
  PD_CHECK(codes.shape()[1] == (dim + layout.values_per_byte - 1) / layout.values_per_byte,
           "codes must hold ceil(dim / values per byte) bytes a row");
  PD_CHECK(params.is_cpu() && params.dtype() == paddle::DataType::FLOAT16 && params.shape().size() == 2 &&
               params.shape()[0] == rows && params.shape()[1] == (layout.symmetric ? 1 : 2),
           "row parameters must be float16 [rows, ", layout.symmetric ? 1 : 2, "]");
  using Decoder = void (*)(const int64_t*, int64_t, const int8_t*, int64_t, const paddle::float16*, int, int64_t,
                           bool, int64_t, float*);
  static const Decoder decoders[] = {nullptr, nullptr, DecodeCodeRows<1, false>, DecodeCodeRows<2, false>,
                                     DecodeCodeRows<4, false>, DecodeCodeRows<5, true>, DecodeCodeRows<8, true>};
  decoders[format](id, n, codes.data<int8_t>(), codes.shape()[1], params.data<paddle::float16>(), format, dim,
                   has_padding, padding_idx, o);
  return {out};
}

std::vector<std::vector<int64_t>> QuantizedLookupShape(const std::vector<int64_t>& ids,
                                                       const std::vector<int64_t>& codes,
                                                       const std::vector<int64_t>& params, int format, int64_t dim,
                                                       bool has_padding, int64_t padding_idx) {
  std::vector<int64_t> shape = ids;
  shape.push_back(dim);
  return {shape};
}

std::vector<paddle::DataType> QuantizedLookupDtype(const paddle::DataType&, const paddle::DataType&,
                                                   const paddle::DataType&) {
  return {paddle::DataType::FLOAT32};
}

PD_BUILD_OP(edo_quantized_lookup)
    .Inputs({"Ids", "Codes", "Params"})
    .Outputs({"Out"})
    .Attrs({"format: int", "dim: int64_t", "has_padding: bool", "padding_idx: int64_t"})
    .SetKernelFn(PD_KERNEL(QuantizedLookup))
    .SetInferShapeFn(PD_INFER_SHAPE(QuantizedLookupShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(QuantizedLookupDtype));
