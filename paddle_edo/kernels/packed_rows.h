// Packed rows of QuantizedEmbedding, decoded on the CPU as the composite decode does (quant/codecs.py),
// operation for operation: the fused lookup (quantized.cc) and the packed bags (bags.cc) share it.
#pragma once

#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "paddle/extension.h"

namespace {

// Formats, numbered as quant/formats.py lists them.
enum Format { kFp16 = 0, kBf16 = 1, kInt8 = 2, kInt4 = 3, kInt2 = 4, kTernary = 5, kBinary = 6 };

struct Layout {
  int base;            // levels per code digit
  int values_per_byte;
  bool symmetric;      // scale only (ternary, binary), else scale and bias
};

inline Layout LayoutOf(int format) {
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

const float* CachedByteTable(int format) {
  static const std::array<std::vector<float>, 7> tables = {
      std::vector<float>(), std::vector<float>(), ByteTable(kInt8), ByteTable(kInt4), ByteTable(kInt2),
      ByteTable(kTernary), ByteTable(kBinary)};
  return tables[format].data();
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

// int8 codes: code * scale + offset, the multiply and the add rounded apart (as Paddle's two ops do).
__attribute__((target("avx2"))) void Int8RowAvx2(const int8_t* src, float scale, float offset, int64_t dim,
                                                  float* row) {
  const __m256 s = _mm256_set1_ps(scale), o = _mm256_set1_ps(offset);
  int64_t j = 0;
  for (; j + 8 <= dim; j += 8) {
    const __m256i codes = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + j)));
    _mm256_storeu_ps(row + j, _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(codes), s), o));
  }
  for (; j < dim; ++j) row[j] = static_cast<float>(src[j]) * scale + offset;
}

void Int8RowPortable(const int8_t* src, float scale, float offset, int64_t dim, float* row) {
  for (int64_t j = 0; j < dim; ++j) row[j] = static_cast<float>(src[j]) * scale + offset;
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

// A packed table, checked once: fp16 / bf16 rows (``codes`` is the table; ``params`` is not read) or code
// rows (``codes`` int8 [rows, bytes], ``params`` fp16 [rows, 1 or 2]).
class PackedTable {
 public:
  PackedTable(const paddle::Tensor& codes, const paddle::Tensor& params, int format, int64_t dim)
      : format_(format), dim_(dim) {
    PD_CHECK(codes.is_cpu() && codes.shape().size() == 2, "codes must be a 2-D tensor on the CPU");
    PD_CHECK(format >= kFp16 && format <= kBinary, "unknown format ", format);
    rows_ = codes.shape()[0];
    if (format == kFp16 || format == kBf16) {
      PD_CHECK(codes.shape()[1] == dim, "a float table must be dim wide");
      PD_CHECK(codes.dtype() == (format == kFp16 ? paddle::DataType::FLOAT16 : paddle::DataType::BFLOAT16),
               "a ", format == kFp16 ? "fp16" : "bf16", " table must be ", format == kFp16 ? "float16" : "bfloat16");
      half_ = format == kFp16 ? reinterpret_cast<const uint16_t*>(codes.data<paddle::float16>())
                              : reinterpret_cast<const uint16_t*>(codes.data<paddle::bfloat16>());
      static const bool f16c = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
      convert_ = format == kBf16 ? Bf16Row : (f16c ? Fp16RowF16C : Fp16RowPortable);
      row_bytes_ = 2 * dim;
      return;
    }
    const Layout layout = LayoutOf(format);
    params_per_row_ = layout.symmetric ? 1 : 2;
    PD_CHECK(codes.dtype() == paddle::DataType::INT8, "codes must be int8");
    PD_CHECK(codes.shape()[1] == (dim + layout.values_per_byte - 1) / layout.values_per_byte,
             "codes must hold ceil(dim / values per byte) bytes a row");
    PD_CHECK(params.is_cpu() && params.dtype() == paddle::DataType::FLOAT16 && params.shape().size() == 2 &&
                 params.shape()[0] == rows_ && params.shape()[1] == params_per_row_,
             "row parameters must be float16 [rows, ", params_per_row_, "]");
    codes_ = codes.data<int8_t>();
    static const bool avx2 = __builtin_cpu_supports("avx2");
    int8_row_ = avx2 ? Int8RowAvx2 : Int8RowPortable;
    row_bytes_ = codes.shape()[1];
    params_ = params.data<paddle::float16>();
    byte_table_ = CachedByteTable(format);
  }

  int64_t rows() const { return rows_; }

  void PrefetchRow(int64_t id) const {
    if (half_ != nullptr) {
      Prefetch(half_ + id * dim_, row_bytes_);
    } else {  // a row's codes and its parameters live in two arrays: two reads
      Prefetch(codes_ + id * row_bytes_, row_bytes_);
      __builtin_prefetch(params_ + id * params_per_row_);
    }
  }

  // Row ``id`` as fp32 into ``row`` [dim].
  void DecodeRow(int64_t id, float* row) const {
    if (half_ != nullptr) {
      convert_(half_ + id * dim_, row, dim_);
      return;
    }
    const int8_t* src = codes_ + id * row_bytes_;
    const float scale = static_cast<float>(params_[id * params_per_row_]);
    const float bias = params_per_row_ == 2 ? static_cast<float>(params_[id * 2 + 1]) : 0.0f;
    switch (format_) {
      case kInt8:  // code * scale + (bias + 128 scale), as codecs.decode folds the offset
        return int8_row_(src, scale, bias + 128.0f * scale, dim_, row);
      case kInt4: return DecodeSubByteRow<2, false>(src, byte_table_, scale, bias, dim_, row);
      case kInt2: return DecodeSubByteRow<4, false>(src, byte_table_, scale, bias, dim_, row);
      case kTernary: return DecodeSubByteRow<5, true>(src, byte_table_, scale, bias, dim_, row);
      default: return DecodeSubByteRow<8, true>(src, byte_table_, scale, bias, dim_, row);
    }
  }

 private:
  int format_;
  int64_t dim_, rows_ = 0, row_bytes_ = 0;
  int params_per_row_ = 0;
  const uint16_t* half_ = nullptr;
  void (*convert_)(const uint16_t*, float*, int64_t) = nullptr;
  void (*int8_row_)(const int8_t*, float, float, int64_t, float*) = nullptr;
  const int8_t* codes_ = nullptr;
  const paddle::float16* params_ = nullptr;
  const float* byte_table_ = nullptr;
};

}  // namespace
