// keyed_random.py's draws, natively: uniform noise and normal initial rows as a function of (seed, row,
// column), the normals on every processor this process may run on (they initialise tables: numpy draws some
// 15 million a second on one core, so that 10^8 rows x 64 took seven minutes). The uniform bits are exactly
// numpy's (splitmix64 of the key, integer arithmetic); the normals take the same double-precision
// Box-Muller, so they equal numpy's but where its log1p, cos or sin rounds differently in the last bit of a
// double (tests bound the difference). Called through ctypes, which lets go of the GIL.
#include <omp.h>

#include <cmath>
#include <cstdint>

#include "keyed_random.h"

namespace {

using edo::KeyedUniform;

constexpr uint64_t kSecondStream = 0x5DEECE66DULL;  // keyed_normal's second uniform: seed ^ this
constexpr int64_t kParallelValues = 1 << 16;        // below this many values, threads cost more than they save

}  // namespace

// out[i, d] = keyed uniform of (seed, rows[i] * dim + d), for n rows.
extern "C" void edo_keyed_uniform(int64_t seed, const int64_t* rows, int64_t n, int64_t dim, float* out) {
#pragma omp parallel for schedule(static) if (n * dim > kParallelValues)
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t first = static_cast<uint64_t>(rows[i]) * static_cast<uint64_t>(dim);
    for (int64_t d = 0; d < dim; ++d) out[i * dim + d] = KeyedUniform(static_cast<uint64_t>(seed), first + d);
  }
}

// Columns d and d + 1 (d even) of row i: std * r cos(a) and std * r sin(a), r = sqrt(-2 log(1 - u1)),
// a = 2 pi u2, u1 and u2 the keyed uniforms of (seed, key) and (seed ^ kSecondStream, key), key =
// rows[i] * dim + d (a last odd column takes the cosine alone).
extern "C" void edo_keyed_normal(int64_t seed, const int64_t* rows, int64_t n, int64_t dim, double std, float* out) {
  const uint64_t first_seed = static_cast<uint64_t>(seed), second_seed = first_seed ^ kSecondStream;
  const double two_pi = 2.0 * M_PI;
  const int threads = n * dim > kParallelValues ? omp_get_num_procs() : 1;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t first = static_cast<uint64_t>(rows[i]) * static_cast<uint64_t>(dim);
    for (int64_t d = 0; d < dim; d += 2) {
      const double u1 = KeyedUniform(first_seed, first + d), u2 = KeyedUniform(second_seed, first + d);
      const double radius = std::sqrt(-2.0 * std::log1p(-u1)), angle = two_pi * u2;
      out[i * dim + d] = static_cast<float>(radius * std::cos(angle) * std);
      if (d + 1 < dim) out[i * dim + d + 1] = static_cast<float>(radius * std::sin(angle) * std);
    }
  }
}
