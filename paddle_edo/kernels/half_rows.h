// fp32 rows -> fp16 / bf16 bits for lookups that serve mixed precision: each value clipped to the format's
// largest finite one and rounded to its nearest value, ties away from zero, as codecs.round_to_float
// rounds (Paddle's own casts truncate on 2.6 and round ties to even on 3.x). Integer arithmetic on the
// fp32 bits, exact: the fp16 subnormals by scaling to whole units of 2^-24.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu_isa.h"

namespace {

enum HalfFormat { kHalfFp16 = 0, kHalfBf16 = 1 };

constexpr float kFp16Max = 65504.0f;
constexpr float kBf16Max = 3.3895313892515355e38f;
constexpr uint32_t kSmallestNormalFp16Bits = 0x38800000u;  // 2^-14 as fp32 bits
constexpr uint32_t kFp16ExponentShift = (127 - 15) << 10;  // fp32 exponent bias -> fp16's, in fp16 bit position

inline uint16_t Fp16Bits(float x) {
  x = std::min(std::max(x, -kFp16Max), kFp16Max);
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  const uint32_t magnitude = bits & 0x7FFFFFFFu, sign = (bits >> 16) & 0x8000u;
  if (magnitude >= kSmallestNormalFp16Bits) {  // the top ten mantissa bits, plus one where the rest is >= half
    return static_cast<uint16_t>(sign | (((magnitude >> 13) - kFp16ExponentShift) + ((magnitude >> 12) & 1u)));
  }
  float value;
  std::memcpy(&value, &magnitude, sizeof(value));
  const float units = value * 16777216.0f, whole = std::trunc(units);  // units of 2^-24, exact
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(whole) + (units - whole >= 0.5f ? 1u : 0u)));
}

inline uint16_t Bf16Bits(float x) {
  x = std::min(std::max(x, -kBf16Max), kBf16Max);
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return static_cast<uint16_t>(((bits >> 16) & 0x8000u) | (((bits & 0x7FFFFFFFu) + 0x8000u) >> 16));
}

// Eight values at a time with AVX2, the same bits, without a branch on the values (a branch to a slower
// path for zeros and fp16 subnormals mispredicts on tables of small values, as initial ones are). fp16: F16C's
// conversion toward zero of a value moved half a unit away from zero first, so that truncation rounds ties
// away. A normal's half unit is bit 12 of its fp32 bits, (bits + 2^12) then (the sign rides along: no carry
// reaches it). Below fp16's smallest normal a unit is 2^-24 at every exponent: |x| + 2^-25 is added as
// floats, exact enough that the truncation lands as the integer steps' round(|x| 2^24, ties away) except
// for |x| < 2^-25 (the fp32 just below 2^-25 would add up to 2^-24), which round to a signed zero; checked
// against Fp16Bits for every finite fp32. bf16: after the clip, (bits + 2^15) >> 16 of the whole value.
template <int kHalf>
__attribute__((target("avx2,f16c"))) inline __m128i HalfLanes(__m256 x) {
  const float limit = kHalf == kHalfFp16 ? kFp16Max : kBf16Max;
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-limit)), _mm256_set1_ps(limit));
  const __m256i bits = _mm256_castps_si256(x);
  if (kHalf == kHalfBf16) {
    const __m256i half = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x8000)), 16);
    const __m256i packed = _mm256_packus_epi32(half, _mm256_setzero_si256());
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));  // the low halves of both lanes
  }
  constexpr int32_t kHalfSubnormalUnitBits = 0x33000000;  // 2^-25 as fp32 bits
  const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i sign = _mm256_andnot_si256(_mm256_set1_epi32(0x7FFFFFFF), bits);
  const __m256 half_unit = _mm256_castsi256_ps(_mm256_or_si256(sign, _mm256_set1_epi32(kHalfSubnormalUnitBits)));
  const __m256i below_half_unit = _mm256_cmpgt_epi32(_mm256_set1_epi32(kHalfSubnormalUnitBits), magnitude);
  const __m256i small = _mm256_blendv_epi8(_mm256_castps_si256(_mm256_add_ps(x, half_unit)), sign, below_half_unit);
  const __m256i is_normal = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(kSmallestNormalFp16Bits - 1));
  const __m256i moved = _mm256_blendv_epi8(small, _mm256_add_epi32(bits, _mm256_set1_epi32(0x1000)), is_normal);
  return _mm256_cvtps_ph(_mm256_castsi256_ps(moved), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
}

template <int kHalf>
__attribute__((target("avx2,f16c"))) void HalfRowAvx2(const float* row, int64_t dim, uint16_t* out) {
  int64_t j = 0;
  for (; j + 8 <= dim; j += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j), HalfLanes<kHalf>(_mm256_loadu_ps(row + j)));
  }
  for (; j < dim; ++j) out[j] = kHalf == kHalfFp16 ? Fp16Bits(row[j]) : Bf16Bits(row[j]);
}

// Sixteen values at a time with AVX-512, the same bits. bf16: after the clip, (bits + 2^15) >> 16 of the
// whole value (no carry reaches the sign below the largest finite magnitude). fp16: HalfLanes' integer
// steps in sixteen lanes, normals and subnormals alike.
template <int kHalf>
__attribute__((target("avx2,f16c,avx512f,avx512bw"), always_inline)) inline __m256i HalfLanes16(__m512 x) {
  const float limit = kHalf == kHalfFp16 ? kFp16Max : kBf16Max;
  const __m512i bits = _mm512_castps_si512(_mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-limit)), _mm512_set1_ps(limit)));
  if (kHalf == kHalfBf16) return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x8000)), 16));
  const __m512i magnitude = _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF));
  // both kinds of integer steps in all lanes, each lane taking its own: no branch on the values (a branch to
  // F16C where all sixteen are normals mispredicts on tables with many small values)
  const __mmask16 normal = _mm512_cmpgt_epi32_mask(magnitude, _mm512_set1_epi32(kSmallestNormalFp16Bits - 1));
  const __m512i rounded = _mm512_sub_epi32(_mm512_srli_epi32(_mm512_add_epi32(magnitude, _mm512_set1_epi32(0x1000)), 13),
                                           _mm512_set1_epi32(kFp16ExponentShift));
  const __m512 units = _mm512_mul_ps(_mm512_castsi512_ps(magnitude), _mm512_set1_ps(16777216.0f));
  const __m512 whole = _mm512_roundscale_ps(units, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __mmask16 up = _mm512_cmp_ps_mask(_mm512_sub_ps(units, whole), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512i small = _mm512_cvttps_epi32(whole);
  const __m512i half = _mm512_mask_blend_epi32(normal, _mm512_mask_add_epi32(small, up, small, _mm512_set1_epi32(1)),
                                               rounded);
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x8000));
  return _mm512_cvtepi32_epi16(_mm512_or_si512(half, sign));
}

template <int kHalf>
__attribute__((target("avx2,f16c,avx512f,avx512bw"))) void HalfRowAvx512(const float* row, int64_t dim, uint16_t* out) {
  int64_t j = 0;
  for (; j + 16 <= dim; j += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), HalfLanes16<kHalf>(_mm512_loadu_ps(row + j)));
  }
  if (j < dim) HalfRowAvx2<kHalf>(row + j, dim - j, out + j);
}

template <int kHalf>
void HalfRowPortable(const float* row, int64_t dim, uint16_t* out) {
  for (int64_t j = 0; j < dim; ++j) out[j] = kHalf == kHalfFp16 ? Fp16Bits(row[j]) : Bf16Bits(row[j]);
}

using HalfRowFn = void (*)(const float* row, int64_t dim, uint16_t* out);

inline HalfRowFn HalfRowWriter(int half_format) {
  const bool avx2 = edo::HasAvx2(), avx512 = edo::HasAvx512();
  if (half_format == kHalfFp16) {
    return avx512 ? HalfRowAvx512<kHalfFp16> : avx2 ? HalfRowAvx2<kHalfFp16> : HalfRowPortable<kHalfFp16>;
  }
  return avx512 ? HalfRowAvx512<kHalfBf16> : avx2 ? HalfRowAvx2<kHalfBf16> : HalfRowPortable<kHalfBf16>;
}

}  // namespace
