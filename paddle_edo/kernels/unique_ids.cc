// The distinct ids of a batch, sorted, and for each lookup the index of its id among them: a sparse-gradient
// table then looks up and sends back each row once, and in increasing order, which Paddle's Adam takes
// without merging rows. Paddle's CPU unique sorts all the ids (33 ms for 106,496). Where the ids span at
// most 64 per lookup (a batch of many ids over a table of fewer rows), a bitmap over the span marks them
// and each id's index is the number of marked ids below it; else one pass of an open-addressing hash
// table finds the distinct ones and only those are sorted.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <omp.h>

#include "paddle/extension.h"

namespace {

constexpr int64_t kEmpty = -1;  // a free slot of the hash table (slots hold positions in the output)

inline uint64_t Slot(int64_t id, int shift) {
  return (static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ULL) >> shift;  // Fibonacci hashing
}

constexpr int64_t kBitmapSpanPerId = 64;  // a bitmap of at most one 8-byte word per id
constexpr int64_t kParallelIds = 1 << 16;  // below this many ids, threads cost more than they save

// The bitmap way, for ids in [low, low + span): mark each, count the marks before each word, then an id's
// index is its word's count plus the marks below it in the word; the marked ids come out in order. Each
// thread marks its share of the ids in a bitmap of its own (no atomics, no cache line passed between
// cores), as many threads as keep those bitmaps within the ids' own size, and the bitmaps are merged.
__attribute__((target_clones("popcnt", "default"))) std::vector<paddle::Tensor> UniqueByBitmap(
    const paddle::Tensor& ids, int64_t low, int64_t span) {
  const int64_t n = ids.numel(), words = (span + 63) / 64;
  const int64_t* id = ids.data<int64_t>();
  const bool parallel = n > kParallelIds;
  const int markers = parallel ? static_cast<int>(std::min<int64_t>(omp_get_max_threads(), 1 + n / words)) : 1;
  std::vector<uint64_t> marks(words * markers, 0);  // the bitmaps, each thread's; the first is the merged one
#pragma omp parallel num_threads(markers)
  {
    uint64_t* mine = marks.data() + omp_get_thread_num() * words;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t offset = static_cast<uint64_t>(id[i] - low);
      mine[offset >> 6] |= uint64_t{1} << (offset & 63);
    }
#pragma omp for schedule(static)
    for (int64_t w = 0; w < words; ++w) {
      for (int m = 1; m < markers; ++m) marks[w] |= marks[m * words + w];
    }
  }
  std::vector<int64_t> before(words);
  int64_t u = 0;
  for (int64_t w = 0; w < words; ++w) {
    before[w] = u;
    u += __builtin_popcountll(marks[w]);
  }
  paddle::Tensor unique = paddle::empty({u}, paddle::DataType::INT64, paddle::CPUPlace());
  int64_t* sorted = unique.data<int64_t>();
#pragma omp parallel for if (parallel)
  for (int64_t w = 0; w < words; ++w) {
    int64_t* out = sorted + before[w];
    for (uint64_t bits = marks[w]; bits != 0; bits &= bits - 1) *out++ = low + w * 64 + __builtin_ctzll(bits);
  }
  paddle::Tensor inverse = paddle::empty(ids.shape(), paddle::DataType::INT64, paddle::CPUPlace());
  int64_t* index = inverse.data<int64_t>();
#pragma omp parallel for if (parallel)
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t offset = static_cast<uint64_t>(id[i] - low);
    const uint64_t below = marks[offset >> 6] & ((uint64_t{1} << (offset & 63)) - 1);
    index[i] = before[offset >> 6] + __builtin_popcountll(below);
  }
  return {unique, inverse};
}

}  // namespace

std::vector<paddle::Tensor> UniqueIds(const paddle::Tensor& ids) {
  PD_CHECK(ids.is_cpu(), "ids must be on the CPU");
  PD_CHECK(ids.dtype() == paddle::DataType::INT64, "ids must be int64");
  const int64_t n = ids.numel();
  if (n > 0) {
    const int64_t* id = ids.data<int64_t>();
    int64_t low = id[0], high = id[0];
#pragma omp parallel for reduction(min : low) reduction(max : high) if (n > kParallelIds)
    for (int64_t i = 0; i < n; ++i) {
      low = std::min(low, id[i]);
      high = std::max(high, id[i]);
    }
    const uint64_t spread = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);  // exact, as unsigned
    if (spread < static_cast<uint64_t>(n) * kBitmapSpanPerId) {
      return UniqueByBitmap(ids, low, static_cast<int64_t>(spread) + 1);
    }
  }
  int bits = 1;
  while ((int64_t{1} << bits) < 2 * n) ++bits;  // at most half full
  const int shift = 64 - bits;
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  std::vector<int64_t> slots(uint64_t{1} << bits, kEmpty);
  std::vector<int64_t> distinct;
  distinct.reserve(n);
  paddle::Tensor inverse = paddle::empty(ids.shape(), paddle::DataType::INT64, paddle::CPUPlace());
  const int64_t* id = ids.data<int64_t>();
  int64_t* index = inverse.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    uint64_t s = Slot(id[i], shift);
    while (slots[s] != kEmpty && distinct[slots[s]] != id[i]) s = (s + 1) & mask;
    if (slots[s] == kEmpty) {
      slots[s] = static_cast<int64_t>(distinct.size());
      distinct.push_back(id[i]);
    }
    index[i] = slots[s];
  }
  const int64_t u = static_cast<int64_t>(distinct.size());
  std::vector<std::pair<int64_t, int64_t>> by_id(u);  // (id, position in order of first use)
  for (int64_t k = 0; k < u; ++k) by_id[k] = {distinct[k], k};
  std::sort(by_id.begin(), by_id.end());
  paddle::Tensor unique = paddle::empty({u}, paddle::DataType::INT64, paddle::CPUPlace());
  int64_t* sorted = unique.data<int64_t>();
  std::vector<int64_t> sorted_position(u);
  for (int64_t k = 0; k < u; ++k) {
    sorted[k] = by_id[k].first;
    sorted_position[by_id[k].second] = k;
  }
  for (int64_t i = 0; i < n; ++i) index[i] = sorted_position[index[i]];
  return {unique, inverse};
}

std::vector<std::vector<int64_t>> UniqueIdsShape(const std::vector<int64_t>& ids) { return {{-1}, ids}; }

std::vector<paddle::DataType> UniqueIdsDtype(const paddle::DataType&) {
  return {paddle::DataType::INT64, paddle::DataType::INT64};
}

PD_BUILD_OP(edo_unique_ids)
    .Inputs({"Ids"})
    .Outputs({"Unique", "Inverse"})
    .SetKernelFn(PD_KERNEL(UniqueIds))
    .SetInferShapeFn(PD_INFER_SHAPE(UniqueIdsShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(UniqueIdsDtype));
