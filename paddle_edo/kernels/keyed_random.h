// Uniform draws keyed by (seed, key): splitmix64 of key * golden + seed * mix, its top 24 bits as a float in
// [0, 1), the same bits as keyed_random.py's numpy code (integer arithmetic). Keys are row * dim + column, so
// a table row draws the same values wherever it is drawn (in one process, or on the rank that owns it).
#pragma once

#include <cstdint>

namespace edo {

inline float KeyedUniform(uint64_t seed, uint64_t key) {
  uint64_t x = key * 0x9E3779B97F4A7C15ULL + seed * 0x94D049BB133111EBULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  x = x ^ (x >> 31);
  return static_cast<float>(x >> 40) * (1.0f / (1 << 24));
}

}  // namespace edo
