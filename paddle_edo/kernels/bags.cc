// Pooled lookups (embedding bags) on the CPU: each bag's rows summed, averaged or maxed into one output
// row in one pass, where a lookup followed by a reduction writes and reads every looked-up row once more.
// fp32 ``rows`` are the table itself (lookups without gradient) or the batch's distinct rows (training:
// the gradient then reaches the table as one sparse row per distinct id, see nn/bag.py); packed tables
// are decoded row by row as they are pooled (no gradient: they serve).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include <omp.h>

#include "packed_rows.h"
#include "paddle/extension.h"
#include "streaming_stores.h"

namespace {

enum Mode { kSum = 0, kMean = 1, kMax = 2 };

constexpr int64_t kPrefetchDistance = 32;
constexpr int64_t kParallelBags = 256;
constexpr int64_t kParallelChecks = 1 << 16;

struct Bags {
  int64_t num_rows, dim;
  const int64_t* index;    // row of each entry
  const int64_t* ids;      // id of each entry (the padding id's entries are skipped)
  const int64_t* offsets;  // bag b holds entries [offsets[b], offsets[b + 1])
  int64_t num_bags, num_entries;
  const float* weights;    // one per entry, or null
  bool has_padding;
  int64_t padding_idx;

  bool Skipped(int64_t j) const { return has_padding && ids[j] == padding_idx; }
};

// Rows of an fp32 tensor, read in place.
struct Fp32Rows {
  const float* rows;
  int64_t dim;
  const float* Row(int64_t r, float*) const { return rows + r * dim; }
  EDO_PREFETCH void PrefetchRow(int64_t r) const { Prefetch(rows + r * dim, 4 * dim); }
};

// Rows of a packed table, decoded into the caller's scratch row.
struct PackedRows {
  const PackedTable& table;
  const float* Row(int64_t r, float* scratch) const {
    table.DecodeRow(r, scratch);
    return scratch;
  }
  EDO_PREFETCH void PrefetchRow(int64_t r) const { table.PrefetchRow(r); }
};

const float* CheckedFp32Rows(const paddle::Tensor& rows) {
  PD_CHECK(rows.is_cpu() && rows.dtype() == paddle::DataType::FLOAT32 && rows.shape().size() == 2,
           "rows must be float32 [rows, dim] on the CPU");
  return rows.data<float>();
}

// The bags' output shape: padded ids [..., L] give [..., dim] (no reshape after the call, which costs a
// dygraph call microseconds); flat ids [N] with offsets give [bags, dim].
std::vector<int64_t> BagsShape(const std::vector<int64_t>& ids, int64_t bags, int64_t dim) {
  if (ids.size() < 2) return {bags, dim};
  std::vector<int64_t> shape(ids.begin(), ids.end() - 1);
  shape.push_back(dim);
  return shape;
}

Bags Check(int64_t num_rows, int64_t dim, const paddle::Tensor& index, const paddle::Tensor& ids,
           const paddle::Tensor& offsets, const paddle::Tensor& weights, bool has_padding, int64_t padding_idx) {
  for (const paddle::Tensor* t : {&index, &ids, &offsets}) {
    PD_CHECK(t->is_cpu() && t->dtype() == paddle::DataType::INT64, "index, ids and offsets must be int64 on the CPU");
  }
  PD_CHECK(offsets.shape().size() == 1, "offsets must be 1-D");
  Bags bags{num_rows, dim, index.data<int64_t>(), ids.data<int64_t>(), offsets.data<int64_t>(),
            offsets.numel() - 1, index.numel(), nullptr, has_padding, padding_idx};
  PD_CHECK(ids.numel() == bags.num_entries, "ids and index must have one entry each");
  if (ids.shape().size() >= 2) {
    PD_CHECK(bags.num_entries == bags.num_bags * ids.shape().back(), "padded ids [..., L] must make one bag of L a row");
  }
  PD_CHECK(bags.num_bags >= 0 && bags.offsets[0] == 0 && bags.offsets[bags.num_bags] == bags.num_entries,
           "offsets must start at 0 and end at the number of ids");
  int64_t first_decrease = bags.num_bags, first_bad = bags.num_entries;  // both scans before any row is read
#pragma omp parallel if (bags.num_entries + bags.num_bags > kParallelChecks)
  {
#pragma omp for reduction(min : first_decrease) nowait
    for (int64_t b = 0; b < bags.num_bags; ++b) {
      if (bags.offsets[b] > bags.offsets[b + 1]) first_decrease = std::min(first_decrease, b);
    }
#pragma omp for reduction(min : first_bad)
    for (int64_t j = 0; j < bags.num_entries; ++j) {
      if (!bags.Skipped(j) && (bags.index[j] < 0 || bags.index[j] >= bags.num_rows)) first_bad = std::min(first_bad, j);
    }
  }
  PD_CHECK(first_decrease == bags.num_bags, "offsets must not decrease (bag ", first_decrease, ")");
  PD_CHECK(first_bad == bags.num_entries, "entry ", first_bad, ": row ", bags.index[first_bad],
           " is outside [0, ", bags.num_rows, ")");
  if (weights.numel() > 0) {
    PD_CHECK(weights.is_cpu() && weights.dtype() == paddle::DataType::FLOAT32 && weights.numel() == bags.num_entries,
             "weights must be float32, one per id");
    bags.weights = weights.data<float>();
  }
  return bags;
}

// acc += row and acc += w * row (the product rounded, then the sum: no fused multiply-add), eight lanes
// at a time where the processor has AVX2: elementwise, so the same bits either way.
__attribute__((target_clones("avx2", "default"))) void AddRow(float* acc, const float* row, int64_t dim) {
  for (int64_t d = 0; d < dim; ++d) acc[d] += row[d];
}

__attribute__((target_clones("avx2", "default"))) void AddWeightedRow(float* acc, const float* row, float w,
                                                                      int64_t dim) {
  for (int64_t d = 0; d < dim; ++d) acc[d] += w * row[d];
}

template <typename Rows>
void PoolBag(const Bags& bags, const Rows& source, int mode, int64_t b, float* scratch, float* out, int64_t* argmax) {
  const int64_t dim = bags.dim;
  float* acc = out + b * dim;
  int64_t* arg = mode == kMax ? argmax + b * dim : nullptr;
  std::fill(acc, acc + dim, mode == kMax ? -std::numeric_limits<float>::infinity() : 0.0f);
  if (arg != nullptr) std::fill(arg, arg + dim, int64_t{-1});
  int64_t count = 0;
  const int64_t end = bags.offsets[b + 1];
  for (int64_t j = bags.offsets[b]; j < end; ++j) {
    const int64_t ahead = j + kPrefetchDistance;  // past this bag's end too: the next bags' rows
    if (ahead < bags.num_entries && !bags.Skipped(ahead)) source.PrefetchRow(bags.index[ahead]);
    if (bags.Skipped(j)) continue;
    ++count;
    const float* row = source.Row(bags.index[j], scratch);
    if (mode == kMax) {
      for (int64_t d = 0; d < dim; ++d) {
        if (row[d] > acc[d]) {
          acc[d] = row[d];
          arg[d] = j;
        }
      }
    } else if (bags.weights != nullptr) {
      AddWeightedRow(acc, row, bags.weights[j], dim);
    } else {
      AddRow(acc, row, dim);
    }
  }
  if (count == 0) {
    std::fill(acc, acc + dim, 0.0f);  // an empty bag gives zeros in every mode
  } else if (mode == kMean) {
    const float n = static_cast<float>(count);
    for (int64_t d = 0; d < dim; ++d) acc[d] /= n;
  }
}

// Sums and means with AVX2, the bag's running sum held in registers: a chunk of up to 64 columns (eight
// 8-lane accumulators) over every row of the bag, then the next chunk. A row source gives a row's chunk
// (``RowOf(r, start)``: ``At(j)`` the 8 values at column start + j, decoded where the table is packed) and
// prefetches a later row's chunk, its size fixed when compiling; the additions are the scalar loop's, row
// after row (and w * row rounded before its addition), so the same bits. Code rows come as
// packed_rows.h's Int8Lanes / BitLanes, the very lanes its row decoders store.
struct Fp32LaneSource {
  const float* rows;
  int64_t dim;
  struct Row {
    const float* p;
    EDO_AVX2 __m256 At(int64_t j) const { return _mm256_loadu_ps(p + j); }
  };
  EDO_AVX2 Row RowOf(int64_t r, int64_t start) const { return {rows + r * dim + start}; }
  template <int kVectors>
  EDO_PREFETCH void PrefetchChunk(int64_t r, int64_t start) const { PrefetchSpan<32 * kVectors>(rows + r * dim + start); }
};

struct Fp16LaneSource {
  const PackedTable& table;
  struct Row {
    const uint16_t* p;
    EDO_AVX2 __m256 At(int64_t j) const {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + j)));
    }
  };
  EDO_AVX2 Row RowOf(int64_t r, int64_t start) const { return {table.half() + r * table.row_bytes() / 2 + start}; }
  template <int kVectors>
  EDO_PREFETCH void PrefetchChunk(int64_t r, int64_t start) const {
    PrefetchSpan<16 * kVectors>(table.half() + r * table.row_bytes() / 2 + start);
  }
};

struct Bf16LaneSource {  // the bf16 bits are the high half of the fp32 bits
  const PackedTable& table;
  struct Row {
    const uint16_t* p;
    EDO_AVX2 __m256 At(int64_t j) const {
      const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + j)));
      return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
    }
  };
  EDO_AVX2 Row RowOf(int64_t r, int64_t start) const { return {table.half() + r * table.row_bytes() / 2 + start}; }
  template <int kVectors>
  EDO_PREFETCH void PrefetchChunk(int64_t r, int64_t start) const {
    PrefetchSpan<16 * kVectors>(table.half() + r * table.row_bytes() / 2 + start);
  }
};

// Code rows of kBits a value: a chunk's codes start kBits * start / 8 bytes into the row (start is a
// multiple of 64), and its row parameters are read too.
template <int kBits>
struct CodeChunks {
  explicit CodeChunks(const PackedTable& codes) : table(codes) {}
  const PackedTable& table;
  const int8_t* Codes(int64_t r, int64_t start) const {
    return table.codes() + r * table.row_bytes() + start * kBits / 8;
  }
  const uint16_t* Params(int64_t r) const { return table.params() + table.params_per_row() * r; }
  template <int kVectors>
  EDO_PREFETCH void PrefetchChunk(int64_t r, int64_t start) const {
    PrefetchSpan<kBits * kVectors>(Codes(r, start));
    PrefetchLine(Params(r));
  }
};

struct Int8LaneSource : CodeChunks<8> {
  using CodeChunks<8>::CodeChunks;
  EDO_AVX2 Int8Lanes RowOf(int64_t r, int64_t start) const { return Int8Lanes::Of(Codes(r, start), Params(r)); }
};

template <int kBits, bool kSymmetric>
struct BitLaneSource : CodeChunks<kBits> {
  using CodeChunks<kBits>::CodeChunks;
  EDO_AVX2 BitLanes<kBits, kSymmetric> RowOf(int64_t r, int64_t start) const {
    return BitLanes<kBits, kSymmetric>::Of(this->Codes(r, start), this->Params(r));
  }
};

// acc += row's chunk (kWeighted: += w * row, the product rounded first).
template <int kVectors, bool kWeighted, typename Row>
EDO_AVX2 void AddChunk(__m256* acc, const Row& row, float w) {
  if constexpr (kWeighted) {
    const __m256 weight = _mm256_set1_ps(w);
    for (int v = 0; v < kVectors; ++v) acc[v] = _mm256_add_ps(acc[v], _mm256_mul_ps(weight, row.At(8 * v)));
  } else {
    for (int v = 0; v < kVectors; ++v) acc[v] = _mm256_add_ps(acc[v], row.At(8 * v));
  }
}

// How a summed bag's registers are written: divided by the bag's count for a mean (an empty bag's, all
// zeros, as they are), and with streaming stores where the output is large (streaming_stores.h).
struct BagWrite {
  bool divide;
  float count;
  bool stream;
};

// The entries a bag counts: all but the padding id's.
template <bool kPadded>
inline int64_t CountedEntries(const Bags& bags, int64_t b) {
  int64_t count = bags.offsets[b + 1] - bags.offsets[b];
  if (kPadded) {
    for (int64_t j = bags.offsets[b]; j < bags.offsets[b + 1]; ++j) count -= bags.Skipped(j);
  }
  return count;
}

template <bool kPadded>
inline BagWrite WriteOf(const Bags& bags, int mode, int64_t b, bool stream) {
  const int64_t count = CountedEntries<kPadded>(bags, b);
  return {mode == kMean && count > 0, static_cast<float>(count), stream};
}

// Columns [start, start + 8 kVectors) of bag b's sum (kWeighted: weighted; kPadded: the padding id's
// entries skipped) into out, as ``write`` says. Each entry prefetches its own columns of the row
// kPrefetchDistance entries on (padding entries too: a prefetch reads nothing), but for the last
// kPrefetchDistance entries of the batch.
template <int kVectors, bool kWeighted, bool kPadded, typename Source>
EDO_AVX2 void SumChunkAvx2(const Bags& bags, const Source& source, int64_t b, int64_t start, const BagWrite& write,
                           float* out) {
  const int64_t* const index = bags.index;
  const int64_t* const ids = bags.ids;
  const float* const weights = bags.weights;
  const int64_t padding_idx = bags.padding_idx, begin = bags.offsets[b], end = bags.offsets[b + 1];
  const int64_t prefetched_end = std::max(begin, std::min(end, bags.num_entries - kPrefetchDistance));
  __m256 acc[kVectors];
  for (int v = 0; v < kVectors; ++v) acc[v] = _mm256_setzero_ps();
  for (int64_t j = begin; j < prefetched_end; ++j) {
    source.template PrefetchChunk<kVectors>(index[j + kPrefetchDistance], start);
    if (kPadded && ids[j] == padding_idx) continue;
    AddChunk<kVectors, kWeighted>(acc, source.RowOf(index[j], start), kWeighted ? weights[j] : 0.0f);
  }
  for (int64_t j = prefetched_end; j < end; ++j) {
    if (kPadded && ids[j] == padding_idx) continue;
    AddChunk<kVectors, kWeighted>(acc, source.RowOf(index[j], start), kWeighted ? weights[j] : 0.0f);
  }
  if (write.divide) {
    const __m256 count = _mm256_set1_ps(write.count);
    for (int v = 0; v < kVectors; ++v) acc[v] = _mm256_div_ps(acc[v], count);
  }
  for (int v = 0; v < kVectors; ++v) {
    if (write.stream) {
      _mm256_stream_ps(out + start + 8 * v, acc[v]);
    } else {
      _mm256_storeu_ps(out + start + 8 * v, acc[v]);
    }
  }
}

// Inlined, with its chunks, into the loop over the bags: a call per bag (and the stack frame of one) costs as
// much as a bag of one row takes (fp32 bags of one id, 1e6 x 64 table, AMD EPYC Zen 3).
template <bool kWeighted, bool kPadded, typename Source>
EDO_AVX2 void SumBagAvx2(const Bags& bags, const Source& source, int mode, int64_t b, bool stream, float* out) {
  const int64_t dim = bags.dim;
  const BagWrite write = WriteOf<kPadded>(bags, mode, b, stream);
  float* bag = out + b * dim;
  for (int64_t start = 0; start < dim; start += 64) {
    switch (std::min<int64_t>(8, (dim - start) / 8)) {
      case 1: SumChunkAvx2<1, kWeighted, kPadded>(bags, source, b, start, write, bag); break;
      case 2: SumChunkAvx2<2, kWeighted, kPadded>(bags, source, b, start, write, bag); break;
      case 3: SumChunkAvx2<3, kWeighted, kPadded>(bags, source, b, start, write, bag); break;
      case 4: SumChunkAvx2<4, kWeighted, kPadded>(bags, source, b, start, write, bag); break;
      case 5: SumChunkAvx2<5, kWeighted, kPadded>(bags, source, b, start, write, bag); break;
      case 6: SumChunkAvx2<6, kWeighted, kPadded>(bags, source, b, start, write, bag); break;
      case 7: SumChunkAvx2<7, kWeighted, kPadded>(bags, source, b, start, write, bag); break;
      default: SumChunkAvx2<8, kWeighted, kPadded>(bags, source, b, start, write, bag); break;
    }
  }
}

// Sixteen-lane row sources for the AVX-512 sums, as the 8-lane ones above: fp32 rows read in place, and
// int8 code rows decoded as Int8RowAvx512 decodes them (code * scale, then + the offset, rounded apart).
#define EDO_AVX512 __attribute__((target("avx2,f16c,avx512f"), always_inline)) inline

struct Fp32Lanes16 {
  const float* rows;
  int64_t dim;
  struct Row {
    const float* p;
    EDO_AVX512 __m512 At(int64_t j) const { return _mm512_loadu_ps(p + j); }
  };
  EDO_AVX512 Row RowOf(int64_t r, int64_t start) const { return {rows + r * dim + start}; }
  template <int kVectors>
  EDO_PREFETCH void PrefetchChunk(int64_t r, int64_t start) const { PrefetchSpan<64 * kVectors>(rows + r * dim + start); }
};

struct Int8Lanes16 : CodeChunks<8> {
  using CodeChunks<8>::CodeChunks;
  struct Row {
    const int8_t* codes;
    __m512 scales, offsets;
    EDO_AVX512 __m512 At(int64_t j) const {
      const __m512i digits = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + j)));
      return _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(digits), scales), offsets);
    }
  };
  EDO_AVX512 Row RowOf(int64_t r, int64_t start) const {
    const Int8Lanes lanes = Int8Lanes::Of(Codes(r, start), Params(r));  // its scale and folded offset
    return {lanes.codes, _mm512_set1_ps(lanes.scale), _mm512_set1_ps(lanes.offset)};
  }
  template <int kVectors>
  EDO_PREFETCH void PrefetchChunk(int64_t r, int64_t start) const {
    PrefetchSpan<16 * kVectors>(Codes(r, start));
    PrefetchLine(Params(r));
  }
};

// SumChunkAvx2's loop over sixteen-lane accumulators (the same additions in the same order, so the same
// bits), kVectors of them: columns [start, start + 16 kVectors).
template <int kVectors, bool kWeighted, bool kPadded, typename Source>
__attribute__((target("avx2,f16c,avx512f"))) void SumChunkAvx512(const Bags& bags, const Source& source, int64_t b,
                                                                 int64_t start, const BagWrite& write, float* out) {
  const int64_t* const index = bags.index;
  const int64_t* const ids = bags.ids;
  const float* const weights = bags.weights;
  const int64_t padding_idx = bags.padding_idx, begin = bags.offsets[b], end = bags.offsets[b + 1];
  const int64_t prefetched_end = std::max(begin, std::min(end, bags.num_entries - kPrefetchDistance));
  __m512 acc[kVectors];
  for (int v = 0; v < kVectors; ++v) acc[v] = _mm512_setzero_ps();
  for (int64_t j = begin; j < end; ++j) {
    if (j < prefetched_end) source.template PrefetchChunk<kVectors>(index[j + kPrefetchDistance], start);
    if (kPadded && ids[j] == padding_idx) continue;
    const auto row = source.RowOf(index[j], start);
    if constexpr (kWeighted) {
      const __m512 w = _mm512_set1_ps(weights[j]);
      for (int v = 0; v < kVectors; ++v) acc[v] = _mm512_add_ps(acc[v], _mm512_mul_ps(w, row.At(16 * v)));
    } else {
      for (int v = 0; v < kVectors; ++v) acc[v] = _mm512_add_ps(acc[v], row.At(16 * v));
    }
  }
  if (write.divide) {
    const __m512 count = _mm512_set1_ps(write.count);
    for (int v = 0; v < kVectors; ++v) acc[v] = _mm512_div_ps(acc[v], count);
  }
  for (int v = 0; v < kVectors; ++v) {
    if (write.stream) {
      _mm512_stream_ps(out + start + 16 * v, acc[v]);
    } else {
      _mm512_storeu_ps(out + start + 16 * v, acc[v]);
    }
  }
}

template <bool kWeighted, bool kPadded, typename Source>
void SumBagsAvx512(const Bags& bags, const Source& source, int mode, float* out) {
  const int64_t dim = bags.dim;
  const bool stream = edo::StreamsOutput(out, sizeof(float) * bags.num_bags * dim, 64);
#pragma omp parallel if (bags.num_bags > kParallelBags)
  {
#pragma omp for
    for (int64_t b = 0; b < bags.num_bags; ++b) {
      const BagWrite write = WriteOf<kPadded>(bags, mode, b, stream);
      float* bag = out + b * dim;
      for (int64_t start = 0; start < dim; start += 64) {
        switch (std::min<int64_t>(4, (dim - start) / 16)) {
          case 1: SumChunkAvx512<1, kWeighted, kPadded>(bags, source, b, start, write, bag); break;
          case 2: SumChunkAvx512<2, kWeighted, kPadded>(bags, source, b, start, write, bag); break;
          case 3: SumChunkAvx512<3, kWeighted, kPadded>(bags, source, b, start, write, bag); break;
          default: SumChunkAvx512<4, kWeighted, kPadded>(bags, source, b, start, write, bag); break;
        }
      }
    }
    edo::FenceStreamingStores(stream);
  }
}

// Whether the register path pools these bags: sums and means, whole 8-lane rows, AVX2 and F16C.
bool RegisterPathServes(int mode, int64_t dim) {
  return edo::HasAvx2() && mode != kMax && dim % 8 == 0 && dim > 0;
}

template <bool kWeighted, bool kPadded, typename Source>
__attribute__((target("avx2,f16c"))) void SumBagsAvx2(const Bags& bags, const Source& source, int mode, float* out) {
  const bool stream = edo::StreamsOutput(out, sizeof(float) * bags.num_bags * bags.dim, 32);
#pragma omp parallel if (bags.num_bags > kParallelBags)
  {
#pragma omp for
    for (int64_t b = 0; b < bags.num_bags; ++b) SumBagAvx2<kWeighted, kPadded>(bags, source, mode, b, stream, out);
    edo::FenceStreamingStores(stream);
  }
}

// run(weighted, padded) with the bags' weights and padding id as compile-time flags (std::bool_constant
// arguments), decided once for all bags.
template <typename Run>
void WithBagFlags(const Bags& bags, Run run) {
  const bool weighted = bags.weights != nullptr;
  if (weighted && bags.has_padding) return run(std::true_type{}, std::true_type{});
  if (weighted) return run(std::true_type{}, std::false_type{});
  if (bags.has_padding) return run(std::false_type{}, std::true_type{});
  run(std::false_type{}, std::false_type{});
}

template <typename Source>
void SumBagsAvx2(const Bags& bags, const Source& source, int mode, float* out) {
  WithBagFlags(bags, [&](auto weighted, auto padded) {
    SumBagsAvx2<decltype(weighted)::value, decltype(padded)::value>(bags, source, mode, out);
  });
}

template <typename Source>
void SumBagsAvx512(const Bags& bags, const Source& source, int mode, float* out) {
  WithBagFlags(bags, [&](auto weighted, auto padded) {
    SumBagsAvx512<decltype(weighted)::value, decltype(padded)::value>(bags, source, mode, out);
  });
}

// Whether the sixteen-lane sums serve: AVX-512 and whole 16-lane rows.
bool WideRegisterPathServes(int64_t dim) { return edo::HasAvx512() && dim % 16 == 0; }

// The register path over a packed table, where its format has 8-lane rows (not ternary), sixteen lanes
// for int8 rows where they serve; false if not.
bool SumPackedBags(const Bags& bags, const PackedTable& table, int mode, float* out) {
  switch (table.format()) {
    case kFp16: SumBagsAvx2(bags, Fp16LaneSource{table}, mode, out); return true;
    case kBf16: SumBagsAvx2(bags, Bf16LaneSource{table}, mode, out); return true;
    case kInt8:
      if (WideRegisterPathServes(bags.dim)) {
        SumBagsAvx512(bags, Int8Lanes16(table), mode, out);
      } else {
        SumBagsAvx2(bags, Int8LaneSource(table), mode, out);
      }
      return true;
    case kInt4: SumBagsAvx2(bags, BitLaneSource<4, false>(table), mode, out); return true;
    case kInt2: SumBagsAvx2(bags, BitLaneSource<2, false>(table), mode, out); return true;
    case kBinary: SumBagsAvx2(bags, BitLaneSource<1, true>(table), mode, out); return true;
    default: return false;
  }
}

}  // namespace

// rows [R, D], index/ids [N] (or padded [..., L]), offsets [B + 1], weights [N] or [0] -> out [B, D] (or
// [..., D]) and, for max, the entry each output value came from ([B, D]; a [1, 1] placeholder otherwise:
// Paddle refuses an empty output), which the backward pass routes the gradient to.
std::vector<paddle::Tensor> BagPool(const paddle::Tensor& rows, const paddle::Tensor& index, const paddle::Tensor& ids,
                                    const paddle::Tensor& offsets, const paddle::Tensor& weights, int mode,
                                    bool has_padding, int64_t padding_idx) {
  PD_CHECK(mode >= kSum && mode <= kMax, "unknown pooling mode ", mode);
  const Fp32Rows source{CheckedFp32Rows(rows), rows.shape()[1]};
  const Bags bags = Check(rows.shape()[0], rows.shape()[1], index, ids, offsets, weights, has_padding, padding_idx);
  if (bags.index == bags.ids) {  // rows read at the ids themselves: the table (training reads a batch's own rows)
    edo::PlaceTableOnHugePages(source.rows, sizeof(float) * rows.numel());
  }
  paddle::Tensor out = paddle::empty(BagsShape(ids.shape(), bags.num_bags, bags.dim), paddle::DataType::FLOAT32,
                                    paddle::CPUPlace());
  const bool max = mode == kMax;
  paddle::Tensor argmax = paddle::empty({max ? bags.num_bags : 1, max ? bags.dim : 1}, paddle::DataType::INT64,
                                        paddle::CPUPlace());
  float* o = out.data<float>();
  int64_t* a = argmax.data<int64_t>();
  if (!max) a[0] = -1;
  if (RegisterPathServes(mode, bags.dim)) {
    if (WideRegisterPathServes(bags.dim)) {
      SumBagsAvx512(bags, Fp32Lanes16{source.rows, source.dim}, mode, o);
    } else {
      SumBagsAvx2(bags, Fp32LaneSource{source.rows, source.dim}, mode, o);
    }
    return {out, argmax};
  }
#pragma omp parallel for if (bags.num_bags > kParallelBags)
  for (int64_t b = 0; b < bags.num_bags; ++b) PoolBag(bags, source, mode, b, nullptr, o, a);
  return {out, argmax};
}

// Bags of a packed table's rows (see PackedTable), without gradient: ids [N] (or padded [..., L]), offsets
// [B + 1], weights [N] or [0] -> [B, dim] (or [..., dim]).
std::vector<paddle::Tensor> PackedBagPool(const paddle::Tensor& ids, const paddle::Tensor& codes,
                                          const paddle::Tensor& params, const paddle::Tensor& offsets,
                                          const paddle::Tensor& weights, int format, int64_t dim, int mode,
                                          bool has_padding, int64_t padding_idx) {
  PD_CHECK(mode >= kSum && mode <= kMax, "unknown pooling mode ", mode);
  const PackedTable table(codes, params, format, dim);
  const PackedRows source{table};
  const Bags bags = Check(table.rows(), dim, ids, ids, offsets, weights, has_padding, padding_idx);
  paddle::Tensor out = paddle::empty(BagsShape(ids.shape(), bags.num_bags, dim), paddle::DataType::FLOAT32,
                                    paddle::CPUPlace());
  float* o = out.data<float>();
  if (RegisterPathServes(mode, dim) && SumPackedBags(bags, table, mode, o)) return {out};
  std::vector<int64_t> argmax(mode == kMax ? bags.num_bags * dim : 0);
#pragma omp parallel if (bags.num_bags > kParallelBags)
  {
    std::vector<float> scratch(dim);
#pragma omp for
    for (int64_t b = 0; b < bags.num_bags; ++b) PoolBag(bags, source, mode, b, scratch.data(), o, argmax.data());
  }
  return {out};
}

// An entry of the bags' gradient, filed under its block of rows.
struct BlockEntry {
  int64_t bag;
  uint32_t row;  // within its block
  float factor;  // its weight, over its bag's count for mean
};

// Rows of the gradient a block holds: as many as fill about 256 KiB, so that a block's rows stay in the
// core's L2 cache while its entries are added to them.
int BlockShift(int64_t dim) {
  int shift = 0;
  while (shift < 20 && (int64_t{2} << shift) * dim * 4 <= (int64_t{1} << 18)) ++shift;
  return shift;
}

// The gradient of the rows: each entry's row gets its bag's output gradient (times its weight, divided by
// the bag's count for mean; for max, only where it gave the maximum). Sums and means file their entries
// under blocks of rows (a stable counting sort: each thread counts and files the entries of its own
// bags), then each block's rows are zeroed and its entries added in their order: for every row, its
// entries in the scalar accumulation's order, so the same bits, with the row in cache, not a random
// read-modify-write of the gradient in memory per entry.
std::vector<paddle::Tensor> BagPoolGrad(const paddle::Tensor& rows, const paddle::Tensor& index,
                                        const paddle::Tensor& ids, const paddle::Tensor& offsets,
                                        const paddle::Tensor& weights, const paddle::Tensor& argmax,
                                        const paddle::Tensor& grad_out, int mode, bool has_padding,
                                        int64_t padding_idx) {
  CheckedFp32Rows(rows);
  const Bags bags = Check(rows.shape()[0], rows.shape()[1], index, ids, offsets, weights, has_padding, padding_idx);
  const int64_t dim = bags.dim, num_rows = bags.num_rows;
  paddle::Tensor grad_rows = edo::EmptyOutput({num_rows, dim}, paddle::DataType::FLOAT32);
  float* g = grad_rows.data<float>();
  const float* go = grad_out.data<float>();
  if (mode == kMax) {
    std::memset(g, 0, sizeof(float) * num_rows * dim);
    const int64_t* a = argmax.data<int64_t>();
    for (int64_t b = 0; b < bags.num_bags; ++b) {
      for (int64_t d = 0; d < dim; ++d) {
        if (a[b * dim + d] >= 0) g[bags.index[a[b * dim + d]] * dim + d] += go[b * dim + d];
      }
    }
    return {grad_rows};
  }
  const int shift = BlockShift(dim);
  const int64_t num_blocks = (num_rows + (int64_t{1} << shift) - 1) >> shift;
  std::vector<int64_t> filed;     // [thread][block]: the thread's entries in the block, then where they go
  std::vector<int64_t> block_start(num_blocks + 1, 0);
  std::unique_ptr<BlockEntry[]> entries;
  // Blocks handed out one at a time from a shared counter: `omp for schedule(dynamic)` calls GNU's loop entry
  // points, which Paddle's OpenMP runtime does not serve (GNU's then gives every block to every thread).
  std::atomic<int64_t> next_block{0};
#pragma omp parallel if (bags.num_entries * dim > (1 << 16))
  {
    const int threads = omp_get_num_threads(), t = omp_get_thread_num();
#pragma omp single
    filed.assign(static_cast<size_t>(threads) * num_blocks, 0);
    int64_t* mine = filed.data() + t * num_blocks;
    const int64_t first_bag = bags.num_bags * t / threads, end_bag = bags.num_bags * (t + 1) / threads;
    for (int64_t j = bags.offsets[first_bag]; j < bags.offsets[end_bag]; ++j) {
      if (!bags.Skipped(j)) ++mine[bags.index[j] >> shift];
    }
#pragma omp barrier
#pragma omp single
    {
      int64_t position = 0;  // blocks in order, and in a block the threads in the order of their bags
      for (int64_t block = 0; block < num_blocks; ++block) {
        block_start[block] = position;
        for (int u = 0; u < threads; ++u) {
          const int64_t count = filed[u * num_blocks + block];
          filed[u * num_blocks + block] = position;
          position += count;
        }
      }
      block_start[num_blocks] = position;
      entries.reset(new BlockEntry[position]);
    }
    const uint32_t row_mask = (uint32_t{1} << shift) - 1;
    for (int64_t b = first_bag; b < end_bag; ++b) {
      int64_t count = 0;
      for (int64_t j = bags.offsets[b]; j < bags.offsets[b + 1]; ++j) count += !bags.Skipped(j);
      const float scale = mode == kMean && count > 0 ? 1.0f / static_cast<float>(count) : 1.0f;
      for (int64_t j = bags.offsets[b]; j < bags.offsets[b + 1]; ++j) {
        if (bags.Skipped(j)) continue;
        const int64_t row = bags.index[j];
        entries[mine[row >> shift]++] = {b, static_cast<uint32_t>(row) & row_mask,
                                         (bags.weights != nullptr ? bags.weights[j] : 1.0f) * scale};
      }
    }
#pragma omp barrier
    for (int64_t block = next_block++; block < num_blocks; block = next_block++) {
      float* block_rows = g + (block << shift) * dim;
      std::fill(block_rows, g + std::min(num_rows, (block + 1) << shift) * dim, 0.0f);
      const int64_t end = block_start[block + 1];
      for (int64_t k = block_start[block]; k < end; ++k) {
        if (k + kPrefetchDistance < end) Prefetch(go + entries[k + kPrefetchDistance].bag * dim, sizeof(float) * dim);
        AddWeightedRow(block_rows + entries[k].row * dim, go + entries[k].bag * dim, entries[k].factor, dim);
      }
    }
  }
  return {grad_rows};
}

std::vector<std::vector<int64_t>> BagPoolShape(const std::vector<int64_t>& rows, const std::vector<int64_t>& index,
                                               const std::vector<int64_t>& ids, const std::vector<int64_t>& offsets,
                                               const std::vector<int64_t>& weights, int mode, bool has_padding,
                                               int64_t padding_idx) {
  const int64_t bags = offsets[0] < 0 ? -1 : offsets[0] - 1;
  return {BagsShape(ids, bags, rows[1]), {mode == kMax ? bags : 1, mode == kMax ? rows[1] : 1}};
}

std::vector<std::vector<int64_t>> PackedBagPoolShape(const std::vector<int64_t>& ids,
                                                     const std::vector<int64_t>& codes,
                                                     const std::vector<int64_t>& params,
                                                     const std::vector<int64_t>& offsets,
                                                     const std::vector<int64_t>& weights, int format, int64_t dim,
                                                     int mode, bool has_padding, int64_t padding_idx) {
  return {BagsShape(ids, offsets[0] < 0 ? -1 : offsets[0] - 1, dim)};
}

std::vector<paddle::DataType> PackedBagPoolDtype(const paddle::DataType&, const paddle::DataType&,
                                                 const paddle::DataType&, const paddle::DataType&,
                                                 const paddle::DataType&) {
  return {paddle::DataType::FLOAT32};
}

std::vector<paddle::DataType> BagPoolDtype(const paddle::DataType&, const paddle::DataType&, const paddle::DataType&,
                                           const paddle::DataType&, const paddle::DataType&) {
  return {paddle::DataType::FLOAT32, paddle::DataType::INT64};
}

PD_BUILD_OP(edo_bag_pool)
    .Inputs({"Rows", "Index", "Ids", "Offsets", "Weights"})
    .Outputs({"Out", "Argmax"})
    .Attrs({"mode: int", "has_padding: bool", "padding_idx: int64_t"})
    .SetKernelFn(PD_KERNEL(BagPool))
    .SetInferShapeFn(PD_INFER_SHAPE(BagPoolShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(BagPoolDtype));

PD_BUILD_GRAD_OP(edo_bag_pool)
    .Inputs({"Rows", "Index", "Ids", "Offsets", "Weights", "Argmax", paddle::Grad("Out")})
    .Outputs({paddle::Grad("Rows")})
    .Attrs({"mode: int", "has_padding: bool", "padding_idx: int64_t"})
    .SetKernelFn(PD_KERNEL(BagPoolGrad));

PD_BUILD_OP(edo_packed_bag_pool)
    .Inputs({"Ids", "Codes", "Params", "Offsets", "Weights"})
    .Outputs({"Out"})
    .Attrs({"format: int", "dim: int64_t", "mode: int", "has_padding: bool", "padding_idx: int64_t"})
    .SetKernelFn(PD_KERNEL(PackedBagPool))
    .SetInferShapeFn(PD_INFER_SHAPE(PackedBagPoolShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(PackedBagPoolDtype));
