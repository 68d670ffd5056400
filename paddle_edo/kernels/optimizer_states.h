// Optimizer state kept in 16 bits (bf16 or fp16) or 8 bits beside the fp32 rule that updates it: each value
// is read as fp32, updated, and written back with stochastic rounding (rounded up with probability equal to
// the fraction the stored bits drop), which is unbiased, so that an accumulator's small increments are not
// lost as round-to-nearest would lose them once the sum is large. The random bits are a hash of the value's
// place (its table, row and column, and the table's step count), so a resumed run goes on exactly, and not of
// the value: values a float rounding apart (a gradient summed in another order, by other ranks) round alike
// but for a chance of their difference over the step between codes. fp16 clips to its largest finite value,
// 65504, and flushes below 2^-24 to zero (a rule keeps its sums of squares there as their square roots:
// collection.cc); bf16 keeps fp32's range.
//
// 8 bits: blockwise quantization with one block per row (the unit a lazy update reads and writes), as
// 8-bit optimizers quantize blocks of a dense state: the row's values divided by a scale (its largest
// magnitude maps to the largest code) in an 8-bit float code, and the scale in fp32 after the codes. A float
// code keeps relative precision over 15 octaves below the row's largest value, where a linear code would
// round most of a row's small values to zero. A signed state (Adam's first moment) takes sign, 4 exponent
// and 3 mantissa bits; a sum of squares, kept as its square root, takes 4 exponent and 4 mantissa bits, and
// never rounds a positive value to zero (a zero second moment would divide a step by epsilon). A state of
// single value per row (row-wise rules, tables of dimension 1) stays one fp32.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu_isa.h"

namespace {

enum StateFormat { kStateFp32 = 0, kStateBf16 = 1, kStateFp16 = 2, kStateInt8 = 3 };

// splitmix64's finaliser: 64 well-mixed bits of x.
inline uint64_t MixBits(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

inline uint32_t FloatBits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

inline float BitsFloat(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

inline float Fp16Value(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  if (exponent == 0) {  // zero or subnormal: mantissa x 2^-24, exact in fp32
    const float value = static_cast<float>(mantissa) * 5.9604644775390625e-08f;
    return sign ? -value : value;
  }
  if (exponent == 31) return BitsFloat(sign | 0x7F800000u | (mantissa << 13));
  return BitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// x in bf16, rounded up in magnitude with probability the dropped fraction (random: 16 uniform bits).
inline uint16_t StochasticBf16(float x, uint64_t random) {
  const uint32_t bits = FloatBits(x), sign = (bits >> 16) & 0x8000u, magnitude = bits & 0x7FFFFFFFu;
  if (magnitude >= 0x7F800000u) return static_cast<uint16_t>(bits >> 16);  // inf, nan as they are
  const uint32_t rounded = (magnitude + static_cast<uint32_t>(random & 0xFFFFu)) >> 16;
  return static_cast<uint16_t>(sign | (rounded >= 0x7F80u ? 0x7F7Fu : rounded));  // no carry into infinity
}

// x in fp16 (clipped to +-65504), rounded up in magnitude with probability the dropped fraction.
inline uint16_t StochasticFp16(float x, uint64_t random) {
  x = std::fmin(std::fmax(x, -65504.0f), 65504.0f);
  const uint32_t bits = FloatBits(x), sign = (bits >> 16) & 0x8000u, magnitude = bits & 0x7FFFFFFFu;
  if (magnitude >= 0x38800000u) {  // normal in fp16: 10 mantissa bits kept of 23
    const uint32_t kept = (magnitude >> 13) - ((127 - 15) << 10);
    const uint32_t up = ((magnitude & 0x1FFFu) + static_cast<uint32_t>(random & 0x1FFFu)) >> 13;
    const uint32_t rounded = kept + up;
    return static_cast<uint16_t>(sign | (rounded > 0x7BFFu ? 0x7BFFu : rounded));
  }
  const float units = BitsFloat(magnitude) * 16777216.0f, whole = std::floor(units);  // units of 2^-24, exact
  const float uniform = static_cast<float>(random & 0xFFFFFFu) * 5.9604644775390625e-08f;  // [0, 1)
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(whole) + (uniform < units - whole ? 1u : 0u)));
}

inline float LoadState(const void* states, int64_t i, int format) {
  if (format == kStateFp32) return static_cast<const float*>(states)[i];
  const uint16_t h = static_cast<const uint16_t*>(states)[i];
  return format == kStateBf16 ? BitsFloat(static_cast<uint32_t>(h) << 16) : Fp16Value(h);
}

// Writes value i of the state; ``place`` tells values apart for the rounding's random bits.
inline void StoreState(void* states, int64_t i, float value, int format, uint64_t place) {
  if (format == kStateFp32) {
    static_cast<float*>(states)[i] = value;
    return;
  }
  const uint64_t random = MixBits(place * 0x9E3779B97F4A7C15ULL);
  static_cast<uint16_t*>(states)[i] = format == kStateBf16 ? StochasticBf16(value, random) : StochasticFp16(value, random);
}

// Bytes one row's state of ``width`` values takes in ``format``.
inline int64_t StateRowBytes(int64_t width, int format) {
  if (width == 0) return 0;
  if (format == kStateFp32) return 4 * width;
  if (format != kStateInt8) return 2 * width;
  return width == 1 ? 4 : width + 4;  // codes, then the fp32 scale; a row's single value stays fp32
}

// 8-bit float codes of magnitudes in (0, 1): exponent field E in 1..15 and M mantissa bits f stand for
// 2^(E - 16) (1 + f / 2^M); code 0 is zero. The largest code is 1 - 2^-(M + 1).
template <int M>
inline float Int8Largest() {
  return 1.0f - 1.0f / static_cast<float>(2 << M);
}

// The 8-bit codes of a row's magnitudes y in [0, Int8Largest<M>()] (its values over its scale), stochastically
// rounded: at or above the smallest normal value 2^-15 the code's mantissa is rounded up with probability the
// dropped fraction; below it a signed state's value rounds to that smallest code or to zero in proportion,
// and a sum of squares' root rounds up to it (never to zero). Written without branches so that the compiler
// vectorizes them (the 64-bit hash of the rounding's random bits too: vpmullq with AVX-512 DQ), compiled for
// each instruction set the kernels take (cpu_isa.h); every path gives the same bits. Value d of a row draws
// its random bits from place + 2 d.
template <int M, bool kSigned>
__attribute__((always_inline)) inline void EncodeInt8Codes(const float* values, int64_t width, float inverse,
                                                            uint64_t place, uint8_t* codes) {
  constexpr uint32_t kDropped = (1u << (23 - M)) - 1u, kTop = (16u << M) - 1u, kSmallest = 1u << M;
  const uint32_t largest_code = FloatBits(Int8Largest<M>());
  for (int64_t d = 0; d < width; ++d) {
    const float value = values[d];
    const uint64_t random = MixBits((place + 2 * static_cast<uint64_t>(d)) * 0x9E3779B97F4A7C15ULL);
    // y = |value| x inverse is +0, positive or NaN, so its bits order as it does (a NaN's above every number):
    // clamped as integers, a NaN takes the largest code, as fmin gives it, and no float comparison sits in a
    // branch (one that could trap keeps the compiler from vectorizing)
    uint32_t bits = FloatBits(std::fabs(value) * inverse);
    bits = bits < largest_code ? bits : largest_code;
    const uint32_t low = static_cast<uint32_t>(random);
    uint32_t normal = ((bits + (low & kDropped)) >> (23 - M)) - (111u << M);
    normal = normal > kTop ? kTop : normal;
    // below 2^-15: the smallest code or zero (bitwise ands, not branches)
    uint32_t rounds_up = static_cast<uint32_t>(bits != 0);
    if (kSigned) {
      const float uniform = static_cast<float>(static_cast<int32_t>(low & 0xFFFFFFu)) * 5.9604644775390625e-08f;
      rounds_up &= static_cast<uint32_t>(uniform < BitsFloat(bits) * 32768.0f);
    }
    uint32_t code = bits >= (112u << 23) ? normal : rounds_up * kSmallest;
    if (kSigned) code |= (static_cast<uint32_t>(value < 0.0f) & static_cast<uint32_t>(code != 0)) << 7;
    codes[d] = static_cast<uint8_t>(code);
  }
}

template <int M, bool kSigned>
__attribute__((always_inline)) inline void DecodeInt8Codes(const uint8_t* codes, int64_t width, float scale,
                                                            float* out) {
  for (int64_t d = 0; d < width; ++d) {
    const uint32_t code = kSigned ? codes[d] & 0x7Fu : codes[d];
    const float magnitude = (code != 0 ? BitsFloat((((code >> M) + 111u) << 23) | ((code & ((1u << M) - 1u)) << (23 - M)))
                                       : 0.0f) * scale;
    out[d] = kSigned && (codes[d] & 0x80u) ? -magnitude : magnitude;
  }
}

// A row's largest magnitude (NaNs passed over, as fmax passes them), found on the magnitudes' bits, which
// order as the magnitudes do: an integer maximum the compiler vectorizes, where a float one needs NaN rules.
__attribute__((always_inline)) inline float LargestMagnitude(const float* values, int64_t width) {
  uint32_t largest = 0;
  for (int64_t d = 0; d < width; ++d) {
    uint32_t magnitude = FloatBits(values[d]) & 0x7FFFFFFFu;
    magnitude = magnitude > 0x7F800000u ? 0u : magnitude;
    largest = magnitude > largest ? magnitude : largest;
  }
  return BitsFloat(largest);
}

// A row's codes and scale, stored (one path per instruction set, the same bits).
#define EDO_STORE_INT8_ROW(suffix, target)                                                                        \
  target inline void StoreInt8Codes##suffix(int8_t* record, const float* values, int64_t width, bool is_signed,   \
                                            uint64_t place) {                                                   \
    const float largest = LargestMagnitude(values, width);                                                       \
    const float scale = largest / (is_signed ? Int8Largest<3>() : Int8Largest<4>());                             \
    const float inverse = largest > 0.0f ? 1.0f / scale : 0.0f;                                                  \
    uint8_t* codes = reinterpret_cast<uint8_t*>(record);                                                         \
    if (is_signed) {                                                                                             \
      EncodeInt8Codes<3, true>(values, width, inverse, place, codes);                                            \
    } else {                                                                                                     \
      EncodeInt8Codes<4, false>(values, width, inverse, place, codes);                                           \
    }                                                                                                            \
    std::memcpy(record + width, &scale, sizeof(scale));                                                          \
  }                                                                                                              \
  target inline void LoadInt8Codes##suffix(const int8_t* record, int64_t width, bool is_signed, float* out) {     \
    float scale;                                                                                                 \
    std::memcpy(&scale, record + width, sizeof(scale));                                                          \
    const uint8_t* codes = reinterpret_cast<const uint8_t*>(record);                                             \
    if (is_signed) {                                                                                             \
      DecodeInt8Codes<3, true>(codes, width, scale, out);                                                        \
    } else {                                                                                                     \
      DecodeInt8Codes<4, false>(codes, width, scale, out);                                                       \
    }                                                                                                            \
  }

EDO_STORE_INT8_ROW(Portable, )
EDO_STORE_INT8_ROW(Avx2, __attribute__((target("avx2,fma,f16c"))))
EDO_STORE_INT8_ROW(Avx512, __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl"))))
#undef EDO_STORE_INT8_ROW

// One row's ``width`` values from their 8-bit record (signed: sign and e4m3; else e4m4; one value: fp32).
inline void LoadInt8Row(const int8_t* record, int64_t width, bool is_signed, float* out) {
  if (width == 1) {
    std::memcpy(out, record, sizeof(float));
    return;
  }
  if (edo::HasAvx512()) {
    LoadInt8CodesAvx512(record, width, is_signed, out);
  } else if (edo::HasAvx2()) {
    LoadInt8CodesAvx2(record, width, is_signed, out);
  } else {
    LoadInt8CodesPortable(record, width, is_signed, out);
  }
}

// Writes one row's ``width`` values into their 8-bit record; value d draws random bits from place + 2 d.
inline void StoreInt8Row(int8_t* record, const float* values, int64_t width, bool is_signed, uint64_t place) {
  if (width == 1) {
    std::memcpy(record, values, sizeof(float));
    return;
  }
  if (edo::HasAvx512()) {
    StoreInt8CodesAvx512(record, values, width, is_signed, place);
  } else if (edo::HasAvx2()) {
    StoreInt8CodesAvx2(record, values, width, is_signed, place);
  } else {
    StoreInt8CodesPortable(record, values, width, is_signed, place);
  }
}

}  // namespace
