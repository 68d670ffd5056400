// Software prefetches of the rows a kernel will read next. They ask for each line into the L2 cache only
// (prefetcht2): a prefetch into L1 holds one of the core's few L1 miss buffers until its line arrives, which
// caps how many random rows are in flight at once; into L2 the lines ride on L2's larger queue, and the
// reads that follow hit L2. Measured on a 2-core AMD EPYC (Zen 4), fp32 bags of 20 over a 1e6 x 64 table:
// uniform ids 31.8 -> 21.1 ms, Zipf ids 11.1 -> 8.2 ms (with the bags' distance of 32 entries).
//
// Every function that issues prefetches, and every one that calls them, is EDO_PREFETCH (always inlined):
// GCC 12's mod/ref analysis (-O2 and up) sees a function whose only statements are prefetches as one
// without effects and deletes the calls to it, so a prefetch left in a function of its own was silently
// gone from the lookup, bag and collection loops (found on a 2-core AMD EPYC Zen 3, AVX2: int8 lookups
// of 4096 x 26 uniform ids from a 1e6-row table spent 88% of their time waiting on the rows' first loads).
// Inlined into the loop, the builtin is a statement of the loop's own and stays.
#pragma once

#include <cstdint>

#define EDO_PREFETCH __attribute__((always_inline)) inline

namespace {

constexpr int kIntoL2 = 1;  // __builtin_prefetch's locality hints: prefetcht2, the default here
constexpr int kIntoL1 = 3;  // prefetcht0

template <int kLocality = kIntoL2>
EDO_PREFETCH void PrefetchLine(const void* line) { __builtin_prefetch(line, 0, kLocality); }

// Every cache line of [row, row + bytes): a row need not start on a line. Into L1 (``Prefetch<kIntoL1>``)
// for a plain copy, where the row's lines are wanted at once: measured on a 2-core Intel Xeon (AVX-512),
// fp32 rows of 64 gathered by 4096 x 26 ids from 1e6 and 4e6-row tables, into L1 16 rows ahead 1.0-1.3x a
// copy without prefetches; into L2, 0.7-0.9x.
template <int kLocality = kIntoL2>
EDO_PREFETCH void Prefetch(const void* row, int64_t bytes) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(row);
  for (uintptr_t line = start & ~uintptr_t{63}; line < start + bytes; line += 64) {
    PrefetchLine<kLocality>(reinterpret_cast<const void*>(line));
  }
}

// The same for a span whose size is known when compiling: a prefetch each 64 bytes, unrolled, and one of
// its last byte (whose line is the next where the span does not start on a line; a prefetch never faults).
template <int64_t kBytes>
EDO_PREFETCH void PrefetchSpan(const void* span) {
  const char* start = static_cast<const char*>(span);
  for (int64_t offset = 0; offset < kBytes; offset += 64) PrefetchLine(start + offset);
  PrefetchLine(start + kBytes - 1);
}

}  // namespace
