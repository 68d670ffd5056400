// Large kernel buffers on transparent huge pages (2 MiB), where the system lets a process ask for them
// (/sys/kernel/mm/transparent_hugepage/enabled: "madvise" or "always"); elsewhere the advice is refused and
// nothing changes.
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "paddle/extension.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1: collapse the range into huge pages now
#endif

namespace edo {

constexpr uintptr_t kHugePage = uintptr_t{1} << 21;

// The whole huge pages inside [start, start + bytes), or an empty range.
inline std::pair<uintptr_t, uintptr_t> HugePagesWithin(const void* data, size_t bytes) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (start + kHugePage - 1) & ~(kHugePage - 1), last = (start + bytes) & ~(kHugePage - 1);
  return {first, last > first ? last : first};
}

// An output of a kernel, allocated by Paddle. Past 32 MiB, glibc maps such a buffer afresh on every call
// and unmaps it when it is freed, so each of its 4 KiB pages faults when first written (225 MB of a
// training batch's row gradients: 55,000 faults); on huge pages that is one fault each 2 MiB.
inline paddle::Tensor EmptyOutput(const std::vector<int64_t>& shape, paddle::DataType dtype) {
  paddle::Tensor out = paddle::empty(shape, dtype, paddle::CPUPlace());
  const size_t bytes = out.numel() * phi::SizeOf(dtype);
  const auto [first, last] = HugePagesWithin(out.data(), bytes);
  if (bytes >= (size_t{32} << 20) && last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
  return out;
}

// A table that lookups read at random rows: on 4 KiB pages nearly every row of a table past the TLB's
// reach (a few MiB) costs a page walk beside its cache miss (1e6 x 64, 4096 x 26 ids, one process, the
// same tables on either: int8 lookups 3% faster on uniform ids and 6% on Zipf ids, int8 -> fp16 9%). The
// table's memory is moved onto huge pages the first time a kernel reads it (MADV_COLLAPSE; a kernel
// before 6.1 leaves that to khugepaged, later); its values do not change. Once per buffer and process:
// a table first read while PADDLE_EDO_HUGE_PAGES=0 stays where it is.
inline void PlaceTableOnHugePages(const void* data, size_t bytes) {
  constexpr size_t kLargeTable = size_t{2} << 20;
  constexpr size_t kMostTables = 4096;  // a bound on the record, not on the tables a process may read
  if (bytes < kLargeTable) return;
  static std::mutex mutex;
  static std::set<std::pair<const void*, size_t>> placed;
  const std::lock_guard<std::mutex> lock(mutex);
  if (placed.size() >= kMostTables || !placed.insert({data, bytes}).second) return;
  const char* setting = std::getenv("PADDLE_EDO_HUGE_PAGES");
  if (setting != nullptr && std::string(setting) == "0") return;
  const auto [first, last] = HugePagesWithin(data, bytes);
  if (last > first && madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE) == 0) {
    madvise(reinterpret_cast<void*>(first), last - first, MADV_COLLAPSE);
  }
}

}  // namespace edo
