// Outputs larger than half the last-level cache are written with non-temporal ("streaming") stores, as
// glibc's memcpy writes its large copies: such an output cannot stay in the cache for its reader anyway,
// and an ordinary store first reads every line it writes (read for ownership), a third of a lookup's
// memory traffic. Measured on a 2-core AMD EPYC Zen 3 (32 MiB L3, 1e6 x 64 fp32 table, uniform ids, two
// threads), a gather of rows then a pass that reads them all: 1.06-1.21x faster with 16-27 MiB outputs,
// 1.02-1.06x at 8 MiB, 0.72-0.78x at 2 MiB. The stores write the same values: only where they go differs.
// PADDLE_EDO_STREAMING_STORES = "always" or "never" overrides the size rule (kernels/__init__.py checks it).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>

namespace edo {

// The last-level cache a core shares, in bytes, as Linux describes cpu0's caches (glibc's sysconf reports
// an AMD processor's whole L3, all its core complexes together); 0 where unknown.
inline size_t LastLevelCacheBytes() {
  size_t largest = 0;
  for (int index = 0; index < 8; ++index) {
    std::ifstream file("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
    size_t size = 0;
    std::string unit;
    if (!(file >> size)) continue;
    file >> unit;
    const size_t bytes = unit == "K" ? size << 10 : unit == "M" ? size << 20 : size;
    if (bytes > largest) largest = bytes;
  }
  return largest;
}

inline size_t StreamingThresholdBytes() {
  static const size_t threshold = [] {
    const char* setting = std::getenv("PADDLE_EDO_STREAMING_STORES");
    if (setting != nullptr && std::strcmp(setting, "always") == 0) return size_t{0};
    if (setting != nullptr && std::strcmp(setting, "never") == 0) return std::numeric_limits<size_t>::max();
    const size_t cache = LastLevelCacheBytes();
    return cache > 0 ? cache / 2 : std::numeric_limits<size_t>::max();
  }();
  return threshold;
}

// Whether an output of ``bytes`` at ``out`` is written with streaming stores of ``alignment`` bytes (32 for
// AVX2's, 64 for AVX-512's): large enough, and aligned for them.
inline bool StreamsOutput(const void* out, size_t bytes, size_t alignment) {
  return bytes > 0 && bytes >= StreamingThresholdBytes() && reinterpret_cast<uintptr_t>(out) % alignment == 0;
}

// ``count`` floats (a multiple of 8) from ``src`` to ``dst`` (32-byte aligned) with streaming stores.
__attribute__((target("avx"))) inline void StreamRow(float* dst, const float* src, int64_t count) {
  for (int64_t j = 0; j < count; j += 8) _mm256_stream_ps(dst + j, _mm256_loadu_ps(src + j));
}

__attribute__((target("avx"))) inline void StreamZeros(float* dst, int64_t count) {
  const __m256 zeros = _mm256_setzero_ps();
  for (int64_t j = 0; j < count; j += 8) _mm256_stream_ps(dst + j, zeros);
}

// Streaming stores are weakly ordered: each thread that made them fences them before its results are read.
inline void FenceStreamingStores(bool streamed) {
  if (streamed) _mm_sfence();
}

}  // namespace edo
