// Packed rows of QuantizedEmbedding, decoded on the CPU as the composite decode does (quant/codecs.py),
// operation for operation: the fused lookup (quantized.cc) and the packed bags (bags.cc) share it.
#pragma once

#include <immintrin.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu_isa.h"
#include "huge_pages.h"
#include "prefetch.h"
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

// A code row's fp16 parameters (scale, then the bias where the format has one): F16C's conversion
// where the processor has it, else Paddle's (both exact).
__attribute__((target("f16c"))) inline float HalfF16C(const uint16_t* p) { return _cvtsh_ss(*p); }

inline float HalfPortable(const uint16_t* p) { return static_cast<float>(*reinterpret_cast<const paddle::float16*>(p)); }

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

// A code row (``src``, its fp16 ``params``) -> fp32 ``row`` [dim].
using CodeRowFn = void (*)(const int8_t* src, const uint16_t* params, const float* byte_table, int64_t dim,
                           float* row);

#define EDO_AVX2 __attribute__((target("avx2,f16c"), always_inline)) inline

// One code row's values eight at a time (``At(j)``: columns j .. j + 7), as fp32 lanes: what the row
// decoders below store and the bags (bags.cc) add into their running sums, so both give the same bits.
// int8: code * scale + (bias + 128 scale), as codecs.decode folds the offset; the multiply and the add
// rounded apart (as Paddle's two ops do).
struct Int8Lanes {
  const int8_t* codes;
  float scale, offset;
  __m256 scales, offsets;
  EDO_AVX2 static Int8Lanes Of(const int8_t* codes, const uint16_t* params) {
    const float scale = HalfF16C(params), offset = HalfF16C(params + 1) + 128.0f * scale;
    return {codes, scale, offset, _mm256_set1_ps(scale), _mm256_set1_ps(offset)};
  }
  EDO_AVX2 __m256 At(int64_t j) const {
    const __m256i digits = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + j)));
    return _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(digits), scales), offsets);
  }
};

// Codes whose digits are whole bits (int4, int2, binary): the eight digits of kBits bytes taken from one
// little-endian word by per-lane shifts (digit k of a byte sits at bits k * kBits of it, as the byte
// table reads it). The level is the digit (binary: -1 or 1), then times the scale and plus the bias,
// rounded apart: the byte table's arithmetic, so the same bits.
template <int kBits, bool kSymmetric>
struct BitLanes {
  const int8_t* codes;
  float scale, bias;
  __m256 scales, biases;
  EDO_AVX2 static BitLanes Of(const int8_t* codes, const uint16_t* params) {
    const float scale = HalfF16C(params), bias = kSymmetric ? 0.0f : HalfF16C(params + 1);
    return {codes, scale, bias, _mm256_set1_ps(scale), _mm256_set1_ps(bias)};
  }
  EDO_AVX2 __m256 At(int64_t j) const {
    constexpr uint32_t kToUnsigned = kBits == 4 ? 0x80808080u : kBits == 2 ? 0x8080u : 0x80u;  // b - 128 -> b
    uint32_t word = 0;
    std::memcpy(&word, codes + j * kBits / 8, kBits);
    const __m256i shifts = _mm256_setr_epi32(0, kBits, 2 * kBits, 3 * kBits, 4 * kBits, 5 * kBits, 6 * kBits,
                                             7 * kBits);
    const __m256i digits = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(word ^ kToUnsigned), shifts),
                                            _mm256_set1_epi32((1 << kBits) - 1));
    const __m256i levels = kBits == 1 ? _mm256_sub_epi32(_mm256_slli_epi32(digits, 1), _mm256_set1_epi32(1)) : digits;
    const __m256 scaled = _mm256_mul_ps(_mm256_cvtepi32_ps(levels), scales);
    return kSymmetric ? scaled : _mm256_add_ps(scaled, biases);
  }
};

__attribute__((target("avx2,f16c"))) void Int8RowAvx2(const int8_t* src, const uint16_t* params, const float*,
                                                       int64_t dim, float* row) {
  const Int8Lanes lanes = Int8Lanes::Of(src, params);
  int64_t j = 0;
  for (; j + 8 <= dim; j += 8) _mm256_storeu_ps(row + j, lanes.At(j));
  for (; j < dim; ++j) row[j] = static_cast<float>(src[j]) * lanes.scale + lanes.offset;
}

// The same, sixteen lanes at a time.
__attribute__((target("avx512f,f16c"))) void Int8RowAvx512(const int8_t* src, const uint16_t* params, const float*,
                                                           int64_t dim, float* row) {
  const float scale = HalfF16C(params), offset = HalfF16C(params + 1) + 128.0f * scale;
  const __m512 s = _mm512_set1_ps(scale), o = _mm512_set1_ps(offset);
  int64_t j = 0;
  for (; j + 16 <= dim; j += 16) {
    const __m512i codes = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j)));
    _mm512_storeu_ps(row + j, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(codes), s), o));
  }
  for (; j < dim; ++j) row[j] = static_cast<float>(src[j]) * scale + offset;
}

void Int8RowPortable(const int8_t* src, const uint16_t* params, const float*, int64_t dim, float* row) {
  const float scale = HalfPortable(params), offset = HalfPortable(params + 1) + 128.0f * scale;
  for (int64_t j = 0; j < dim; ++j) row[j] = static_cast<float>(src[j]) * scale + offset;
}

template <int kPerByte, bool kSymmetric>
void SubByteRowPortable(const int8_t* src, const uint16_t* params, const float* byte_table, int64_t dim,
                        float* row) {
  DecodeSubByteRow<kPerByte, kSymmetric>(src, byte_table, HalfPortable(params),
                                         kSymmetric ? 0.0f : HalfPortable(params + 1), dim, row);
}

template <int kBits, bool kSymmetric>
__attribute__((target("avx2,f16c"))) void BitCodesRowAvx2(const int8_t* src, const uint16_t* params,
                                                          const float* byte_table, int64_t dim, float* row) {
  const BitLanes<kBits, kSymmetric> lanes = BitLanes<kBits, kSymmetric>::Of(src, params);
  int64_t j = 0;
  for (; j + 8 <= dim; j += 8) _mm256_storeu_ps(row + j, lanes.At(j));
  if (j < dim) {
    DecodeSubByteRow<8 / kBits, kSymmetric>(src + j * kBits / 8, byte_table, lanes.scale, lanes.bias, dim - j, row + j);
  }
}

// Sixteen int4 or int2 digits (8 or 4 bytes) as int32 lane indices whose low four bits pick each digit's
// lane of a row's values (RowValues), digit k of a byte at bits k * kBits of it, as the byte
// table reads it. The bits above them are left as they come: the permutation reads only those four.
template <int kBits>
__attribute__((target("avx512f,avx512bw"), always_inline)) inline __m512i SixteenIndices(const int8_t* codes) {
  if constexpr (kBits == 4) {  // each byte's low nibble, then its high one (a 16-bit shift brings it down)
    const __m128i bytes = _mm_xor_si128(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)), _mm_set1_epi8(-128));
    return _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(bytes, _mm_srli_epi16(bytes, 4)));
  } else {  // one 32-bit word holds the sixteen digits: per-lane shifts; lane value mod 4 is the digit
    uint32_t word = 0;
    std::memcpy(&word, codes, 4);
    const __m512i shifts = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_srlv_epi32(_mm512_set1_epi32(word ^ 0x80808080u), shifts);
  }
}

// A row's values by lane index, as BitLanes computes them: level * scale + bias, rounded apart. int2's
// level is the index mod 4.
template <int kBits>
__attribute__((target("avx512f"), always_inline)) inline __m512 RowValues(float scale, float bias) {
  const __m512 levels = kBits == 4 ? _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
                                   : _mm512_setr_ps(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3);
  return _mm512_add_ps(_mm512_mul_ps(levels, _mm512_set1_ps(scale)), _mm512_set1_ps(bias));
}

// BitCodesRowAvx2's values sixteen at a time, with the same bits: each digit's lane of the row's values
// (RowValues), by a lane permutation; binary digits pick the scale or its negation (level -1 or 1 times
// the scale) by a lane mask. int4 rows take 64 values from 32 bytes at once where they can. The last
// fewer than sixteen as BitCodesRowAvx2 decodes them.
template <int kBits, bool kSymmetric>
__attribute__((target("avx2,f16c,avx512f,avx512bw"))) void BitCodesRowAvx512(const int8_t* src, const uint16_t* params,
                                                                              const float* byte_table, int64_t dim,
                                                                              float* row) {
  const float scale = HalfF16C(params);
  int64_t j = 0;
  if constexpr (kBits == 1) {
    const __m512 plus = _mm512_set1_ps(scale), minus = _mm512_set1_ps(-1.0f * scale);
    for (; j + 16 <= dim; j += 16) {
      uint16_t digits = 0;
      std::memcpy(&digits, src + j / 8, 2);
      _mm512_storeu_ps(row + j, _mm512_mask_blend_ps(static_cast<__mmask16>(digits ^ 0x8080u), minus, plus));
    }
  } else {
    const __m512 values = RowValues<kBits>(scale, HalfF16C(params + 1));
    if constexpr (kBits == 4) {
      for (; j + 64 <= dim; j += 64) {  // bytes 0-7 and 16-23 interleave into one register, 8-15 and 24-31 the other
        const __m256i bytes = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + j / 2)),
                                               _mm256_set1_epi8(-128));
        const __m256i high = _mm256_srli_epi16(bytes, 4);
        const __m256i first = _mm256_unpacklo_epi8(bytes, high), second = _mm256_unpackhi_epi8(bytes, high);
        const __m128i quarters[4] = {_mm256_castsi256_si128(first), _mm256_castsi256_si128(second),
                                     _mm256_extracti128_si256(first, 1), _mm256_extracti128_si256(second, 1)};
        for (int q = 0; q < 4; ++q) {
          _mm512_storeu_ps(row + j + 16 * q, _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(quarters[q]), values));
        }
      }
    }
    for (; j + 16 <= dim; j += 16) {
      _mm512_storeu_ps(row + j, _mm512_permutexvar_ps(SixteenIndices<kBits>(src + j * kBits / 8), values));
    }
  }
  if (j < dim) BitCodesRowAvx2<kBits, kSymmetric>(src + j * kBits / 8, params, byte_table, dim - j, row + j);
}

// Ternary levels as int8, eight a byte (its five digits, then three zeros): one 8-lane load a byte.
std::vector<int8_t> TernaryLevels() {
  const std::vector<float> levels = ByteTable(kTernary);
  std::vector<int8_t> table(256 * 8, 0);
  for (int b = 0; b < 256; ++b) {
    for (int k = 0; k < 5; ++k) table[b * 8 + k] = static_cast<int8_t>(levels[b * 5 + k]);
  }
  return table;
}

// Ternary codes (five base-3 digits a byte): each byte's eight int8 lanes from TernaryLevels, times the
// scale, stored eight wide at the byte's five values (the next byte's store overwrites the three extra).
__attribute__((target("avx2,f16c"))) void TernaryRowAvx2(const int8_t* src, const uint16_t* params,
                                                         const float* byte_table, int64_t dim, float* row) {
  static const std::vector<int8_t> lanes = TernaryLevels();
  const float scale = HalfF16C(params);
  const __m256 s = _mm256_set1_ps(scale);
  int64_t c = 0;
  for (; 5 * c + 8 <= dim; ++c) {
    const __m128i levels = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(lanes.data() + (src[c] + 128) * 8));
    _mm256_storeu_ps(row + 5 * c, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(levels)), s));
  }
  if (5 * c < dim) DecodeSubByteRow<5, true>(src + c, byte_table, scale, 0.0f, dim - 5 * c, row + 5 * c);
}

CodeRowFn CodeRowDecoder(int format) {
  const bool avx2 = edo::HasAvx2(), avx512 = edo::HasAvx512();
  switch (format) {
    case kInt8: return avx512 ? Int8RowAvx512 : avx2 ? Int8RowAvx2 : Int8RowPortable;
    case kInt4: return avx512 ? BitCodesRowAvx512<4, false> : avx2 ? BitCodesRowAvx2<4, false> : SubByteRowPortable<2, false>;
    case kInt2: return avx512 ? BitCodesRowAvx512<2, false> : avx2 ? BitCodesRowAvx2<2, false> : SubByteRowPortable<4, false>;
    case kTernary: return avx2 ? TernaryRowAvx2 : SubByteRowPortable<5, true>;
    default: return avx512 ? BitCodesRowAvx512<1, true> : avx2 ? BitCodesRowAvx2<1, true> : SubByteRowPortable<8, true>;
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
      convert_ = format == kBf16 ? Bf16Row : (edo::HasAvx2() ? Fp16RowF16C : Fp16RowPortable);
      row_bytes_ = 2 * dim;
      edo::PlaceTableOnHugePages(half_, sizeof(uint16_t) * rows_ * dim);
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
    code_row_ = CodeRowDecoder(format);
    row_bytes_ = codes.shape()[1];
    params_ = reinterpret_cast<const uint16_t*>(params.data<paddle::float16>());
    byte_table_ = CachedByteTable(format);
    edo::PlaceTableOnHugePages(codes_, rows_ * row_bytes_);
    edo::PlaceTableOnHugePages(params_, sizeof(uint16_t) * rows_ * params_per_row_);
  }

  int64_t rows() const { return rows_; }
  int format() const { return format_; }
  int64_t row_bytes() const { return row_bytes_; }
  const uint16_t* half() const { return half_; }    // fp16 / bf16 tables
  const int8_t* codes() const { return codes_; }    // code formats
  const uint16_t* params() const { return params_; }
  int params_per_row() const { return params_per_row_; }

  EDO_PREFETCH void PrefetchRow(int64_t id) const {
    if (half_ != nullptr) {
      Prefetch(half_ + id * dim_, row_bytes_);
    } else {  // a row's codes and its parameters live in two arrays: two reads
      Prefetch(codes_ + id * row_bytes_, row_bytes_);
      PrefetchLine(params_ + id * params_per_row_);
    }
  }

  // Row ``id`` as fp32 into ``row`` [dim].
  void DecodeRow(int64_t id, float* row) const {
    if (half_ != nullptr) {
      convert_(half_ + id * dim_, row, dim_);
      return;
    }
    code_row_(codes_ + id * row_bytes_, params_ + id * params_per_row_, byte_table_, dim_, row);
  }

 private:
  int format_;
  int64_t dim_, rows_ = 0, row_bytes_ = 0;
  int params_per_row_ = 0;
  const uint16_t* half_ = nullptr;
  void (*convert_)(const uint16_t*, float*, int64_t) = nullptr;
  CodeRowFn code_row_ = nullptr;
  const int8_t* codes_ = nullptr;
  const uint16_t* params_ = nullptr;
  const float* byte_table_ = nullptr;
};

}  // namespace
