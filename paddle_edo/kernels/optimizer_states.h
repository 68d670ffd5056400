// Optimizer state kept in 16 bits (bf16 or fp16) or 8 bits beside the fp32 rule that updates it: each value
// is read as fp32, updated, and written back with stochastic rounding (rounded up with probability equal to
// the fraction the stored bits drop), which is unbiased, so that an accumulator's small increments are not
// lost as round-to-nearest would lose them once the sum is large. The random bits are a hash of the value and
// its place, so the same inputs give the same bits and a resumed run goes on exactly. fp16 clips to its
// largest finite value, 65504, and flushes below 2^-24 to zero (a rule keeps its sums of squares there as
// their square roots: collection.cc); bf16 keeps fp32's range.
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
  const uint64_t random = MixBits(place * 0x9E3779B97F4A7C15ULL ^ FloatBits(value));
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

template <int M>
inline float Int8Value(uint32_t code) {
  if (code == 0) return 0.0f;
  return BitsFloat((((code >> M) + 111u) << 23) | ((code & ((1u << M) - 1u)) << (23 - M)));
}

// The code of magnitude y in [0, Int8Largest<M>()], stochastically rounded; below the smallest normal
// value 2^-15, ``keep_positive`` rounds up to it, otherwise to it or to zero in proportion.
template <int M>
inline uint32_t Int8Code(float y, uint64_t random, bool keep_positive) {
  const uint32_t bits = FloatBits(y);
  if (bits >= (112u << 23)) {
    const uint32_t dropped = (1u << (23 - M)) - 1u;
    const uint32_t code = ((bits + static_cast<uint32_t>(random & dropped)) >> (23 - M)) - (111u << M);
    return code > (16u << M) - 1u ? (16u << M) - 1u : code;
  }
  if (y <= 0.0f) return 0;
  if (keep_positive) return 1u << M;
  const float uniform = static_cast<float>(random & 0xFFFFFFu) * 5.9604644775390625e-08f;  // [0, 1)
  return uniform < y * 32768.0f ? 1u << M : 0u;
}

// One row's ``width`` values from their 8-bit record (signed: sign and e4m3; else e4m4; one value: fp32).
inline void LoadInt8Row(const int8_t* record, int64_t width, bool is_signed, float* out) {
  if (width == 1) {
    std::memcpy(out, record, sizeof(float));
    return;
  }
  float scale;
  std::memcpy(&scale, record + width, sizeof(scale));
  const uint8_t* codes = reinterpret_cast<const uint8_t*>(record);
  for (int64_t d = 0; d < width; ++d) {
    if (is_signed) {
      const float magnitude = Int8Value<3>(codes[d] & 0x7Fu) * scale;
      out[d] = codes[d] & 0x80u ? -magnitude : magnitude;
    } else {
      out[d] = Int8Value<4>(codes[d]) * scale;
    }
  }
}

// Writes one row's ``width`` values into their 8-bit record; value d draws random bits from place + 2 d.
inline void StoreInt8Row(int8_t* record, const float* values, int64_t width, bool is_signed, uint64_t place) {
  if (width == 1) {
    std::memcpy(record, values, sizeof(float));
    return;
  }
  float largest = 0.0f;
  for (int64_t d = 0; d < width; ++d) largest = std::fmax(largest, std::fabs(values[d]));
  const float scale = largest / (is_signed ? Int8Largest<3>() : Int8Largest<4>());
  const float inverse = largest > 0.0f ? 1.0f / scale : 0.0f;
  uint8_t* codes = reinterpret_cast<uint8_t*>(record);
  for (int64_t d = 0; d < width; ++d) {
    const uint64_t random = MixBits((place + 2 * static_cast<uint64_t>(d)) * 0x9E3779B97F4A7C15ULL ^ FloatBits(values[d]));
    const float y = std::fabs(values[d]) * inverse;
    if (is_signed) {
      const uint32_t code = Int8Code<3>(std::fmin(y, Int8Largest<3>()), random, false);
      codes[d] = static_cast<uint8_t>(code | (values[d] < 0.0f && code != 0 ? 0x80u : 0u));
    } else {
      codes[d] = static_cast<uint8_t>(Int8Code<4>(std::fmin(y, Int8Largest<4>()), random, true));
    }
  }
  std::memcpy(record + width, &scale, sizeof(scale));
}

}  // namespace
