// Optimizer state kept in 16 bits (bf16 or fp16) beside the fp32 rule that updates it: each value is read
// as fp32, updated, and written back with stochastic rounding (rounded up with probability equal to the
// fraction the 16 bits drop), which is unbiased, so that an accumulator's small increments are not lost as
// round-to-nearest would lose them once the sum is large. The random bits are a hash of the value and its
// place, so the same inputs give the same bits and a resumed run goes on exactly. fp16 clips to its
// largest finite value, 65504, and flushes below 2^-24 to zero (a rule keeps its sums of squares there as
// their square roots: collection.cc); bf16 keeps fp32's range.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace {

enum StateFormat { kStateFp32 = 0, kStateBf16 = 1, kStateFp16 = 2 };

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

}  // namespace
