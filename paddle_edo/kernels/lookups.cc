// Fused CPU lookups of paddle_edo's shared tables, for forward passes that need no gradient (evaluation,
// serving in dynamic graph). One pass writes each output row: the composite Paddle ops write the full
// output once per gather and once more per combine, and the output traffic is what costs.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "cpu_isa.h"
#include "huge_pages.h"
#include "prefetch.h"
#include "paddle/extension.h"
#include "streaming_stores.h"

namespace {

// A table the lookups read at random rows, checked; on huge pages from its first read (huge_pages.h).
const float* TableData(const paddle::Tensor& table, const char* name) {
  PD_CHECK(table.is_cpu(), name, " must be on the CPU");
  PD_CHECK(table.dtype() == paddle::DataType::FLOAT32, name, " must be float32");
  PD_CHECK(table.shape().size() == 2, name, " must be 2-D");
  edo::PlaceTableOnHugePages(table.data<float>(), sizeof(float) * table.numel());
  return table.data<float>();
}

void CheckIds(const paddle::Tensor& ids) {
  PD_CHECK(ids.is_cpu(), "ids must be on the CPU");
  PD_CHECK(ids.dtype() == paddle::DataType::INT64, "ids must be int64");
}

// Rows are read at random: ask for the row of a lookup this many lookups ahead, so that memory latency
// overlaps the work on the rows at hand.
constexpr int64_t kPrefetchDistance = 8;
constexpr int64_t kCopyPrefetchDistance = 16;  // a plain copy gets through rows faster (prefetch.h)
// Below this many lookups, threads cost more than they save.
constexpr int64_t kParallelLookups = 4096;

paddle::Tensor Output(const paddle::Tensor& ids, int64_t width) {
  std::vector<int64_t> shape = ids.shape();
  shape.push_back(width);
  return paddle::empty(shape, paddle::DataType::FLOAT32, paddle::CPUPlace());
}

}  // namespace

// ids [...] -> rows [..., dim] of an fp32 table [rows, dim]; the padding id's row zeros. Every id is checked
// before any row is read.
std::vector<paddle::Tensor> DenseLookup(const paddle::Tensor& ids, const paddle::Tensor& table, bool has_padding,
                                        int64_t padding_idx) {
  CheckIds(ids);
  const float* t = TableData(table, "table");
  const int64_t rows = table.shape()[0], width = table.shape()[1], n = ids.numel();
  const int64_t* id = ids.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    PD_CHECK(id[i] >= 0 && id[i] < rows, "id ", id[i], " is outside [0, ", rows, ")");
  }
  paddle::Tensor out = Output(ids, width);
  float* o = out.data<float>();
  const int64_t bytes = sizeof(float) * width;
  const bool stream = edo::HasAvx2() && width % 8 == 0 && edo::StreamsOutput(o, bytes * n, 32);
#pragma omp parallel if (n > kParallelLookups)
  {
#pragma omp for
    for (int64_t i = 0; i < n; ++i) {
      if (i + kCopyPrefetchDistance < n) Prefetch<kIntoL1>(t + id[i + kCopyPrefetchDistance] * width, bytes);
      const bool padding = has_padding && id[i] == padding_idx;
      if (stream) {
        padding ? edo::StreamZeros(o + i * width, width) : edo::StreamRow(o + i * width, t + id[i] * width, width);
      } else if (padding) {
        std::memset(o + i * width, 0, bytes);
      } else {
        std::memcpy(o + i * width, t + id[i] * width, bytes);
      }
    }
    edo::FenceStreamingStores(stream);
  }
  return {out};
}

// id -> (id / m, id % m): rows of the quotient and remainder tables, multiplied (0), added (1) or
// concatenated (2).
std::vector<paddle::Tensor> QRLookup(const paddle::Tensor& ids, const paddle::Tensor& quotient,
                                     const paddle::Tensor& remainder, int64_t collisions, int operation,
                                     bool has_padding, int64_t padding_idx) {
  CheckIds(ids);
  const float* q = TableData(quotient, "quotient");
  const float* r = TableData(remainder, "remainder");
  const int64_t width = quotient.shape()[1];
  PD_CHECK(remainder.shape()[1] == width, "quotient and remainder must have the same width");
  const int64_t out_width = operation == 2 ? 2 * width : width;
  paddle::Tensor out = Output(ids, out_width);
  const int64_t n = ids.numel(), q_rows = quotient.shape()[0], r_rows = remainder.shape()[0];
  const int64_t* id = ids.data<int64_t>();
  float* o = out.data<float>();
  std::atomic<int64_t> bad{-1};
#pragma omp parallel for if (n > kParallelLookups)
  for (int64_t i = 0; i < n; ++i) {
    float* row = o + i * out_width;
    if (has_padding && id[i] == padding_idx) {
      std::memset(row, 0, sizeof(float) * out_width);
      continue;
    }
    const int64_t qi = id[i] / collisions, ri = id[i] % collisions;
    if (id[i] < 0 || qi >= q_rows || ri >= r_rows) {
      bad = i;
      std::memset(row, 0, sizeof(float) * out_width);
      continue;
    }
    const float* a = q + qi * width;
    const float* b = r + ri * width;
    if (operation == 0) {
      for (int64_t j = 0; j < width; ++j) row[j] = a[j] * b[j];
    } else if (operation == 1) {
      for (int64_t j = 0; j < width; ++j) row[j] = a[j] + b[j];
    } else {
      std::memcpy(row, a, sizeof(float) * width);
      std::memcpy(row + width, b, sizeof(float) * width);
    }
  }
  PD_CHECK(bad.load() < 0, "id ", bad.load() < 0 ? 0 : id[bad.load()], " is outside the QR tables");
  return {out};
}

// Multiply-shift hashes (the high 32 bits of a x + b modulo 2^64, floor modulo buckets) into one table;
// rows summed (0), averaged (1) or concatenated (2), as Paddle's add_n and scale ops compute them.
std::vector<paddle::Tensor> HashLookup(const paddle::Tensor& ids, const paddle::Tensor& coefficients,
                                       const paddle::Tensor& table, int64_t buckets, int combine,
                                       bool has_padding, int64_t padding_idx) {
  CheckIds(ids);
  const float* t = TableData(table, "table");
  PD_CHECK(coefficients.dtype() == paddle::DataType::INT64 && coefficients.shape().size() == 2 &&
               coefficients.shape()[1] == 2, "coefficients must be int64 [hashes, 2]");
  PD_CHECK(table.shape()[0] == buckets, "the table must have one row per bucket");
  const int64_t hashes = coefficients.shape()[0], width = table.shape()[1];
  const int64_t out_width = combine == 2 ? hashes * width : width;
  paddle::Tensor out = Output(ids, out_width);
  const int64_t n = ids.numel();
  const int64_t* id = ids.data<int64_t>();
  const int64_t* ab = coefficients.data<int64_t>();
  float* o = out.data<float>();
  const float inverse = static_cast<float>(1.0 / hashes);  // Paddle divides by a scalar as a scale op
  std::vector<int64_t> bucket(n * hashes);  // first the buckets, then the rows (prefetched ahead)
#pragma omp parallel for if (n > kParallelLookups)
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < hashes; ++h) {
      const uint64_t mixed = static_cast<uint64_t>(id[i]) * static_cast<uint64_t>(ab[2 * h]) +
                             static_cast<uint64_t>(ab[2 * h + 1]);  // wraps modulo 2^64
      const int64_t b = (static_cast<int64_t>(mixed) >> 32) % buckets;
      bucket[i * hashes + h] = b < 0 ? b + buckets : b;
    }
  }
#pragma omp parallel for if (n > kParallelLookups)
  for (int64_t i = 0; i < n; ++i) {
    if (i + kPrefetchDistance < n) {
      for (int64_t h = 0; h < hashes; ++h) Prefetch(t + bucket[(i + kPrefetchDistance) * hashes + h] * width, sizeof(float) * width);
    }
    float* row = o + i * out_width;
    if (has_padding && id[i] == padding_idx) {
      std::memset(row, 0, sizeof(float) * out_width);
      continue;
    }
    for (int64_t h = 0; h < hashes; ++h) {
      const float* src = t + bucket[i * hashes + h] * width;
      if (combine == 2) {
        std::memcpy(row + h * width, src, sizeof(float) * width);
      } else if (h == 0) {
        std::memcpy(row, src, sizeof(float) * width);
      } else {
        for (int64_t j = 0; j < width; ++j) row[j] += src[j];
      }
    }
    if (combine == 1) {
      for (int64_t j = 0; j < width; ++j) row[j] *= inverse;
    }
  }
  return {out};
}

// Ids ranked by frequency into blocks: each id's row of its block's table, times the block's projection
// ([width, dim]; an empty tensor when the block is already dim wide).
std::vector<paddle::Tensor> MixedDimLookup(const paddle::Tensor& ids, const paddle::Tensor& rank,
                                           const paddle::Tensor& block_starts,
                                           const std::vector<paddle::Tensor>& tables,
                                           const std::vector<paddle::Tensor>& projections, int64_t dim,
                                           bool has_padding, int64_t padding_idx) {
  CheckIds(ids);
  PD_CHECK(rank.dtype() == paddle::DataType::INT32 && block_starts.dtype() == paddle::DataType::INT32,
           "rank and block_starts must be int32");
  const int64_t blocks = block_starts.numel();
  PD_CHECK(static_cast<int64_t>(tables.size()) == blocks && static_cast<int64_t>(projections.size()) == blocks,
           "one table and one projection per block");
  std::vector<const float*> table_data(blocks), projection_data(blocks);
  std::vector<int64_t> widths(blocks);
  for (int64_t b = 0; b < blocks; ++b) {
    table_data[b] = TableData(tables[b], "a block table");
    widths[b] = tables[b].shape()[1];
    if (projections[b].numel() == 0) {
      PD_CHECK(widths[b] == dim, "a block without projection must be dim wide");
      projection_data[b] = nullptr;
    } else {
      projection_data[b] = TableData(projections[b], "a projection");
      PD_CHECK(projections[b].shape()[0] == widths[b] && projections[b].shape()[1] == dim,
               "a projection must be [block width, dim]");
    }
  }
  paddle::Tensor out = Output(ids, dim);
  const int64_t n = ids.numel(), num_ids = rank.numel();
  const int64_t* id = ids.data<int64_t>();
  const int32_t* ranks = rank.data<int32_t>();
  const int32_t* starts = block_starts.data<int32_t>();
  float* o = out.data<float>();
  std::atomic<int64_t> bad{-1};
  std::vector<int32_t> block(n);   // first each lookup's block and row (-1: padding), then the rows
  std::vector<int64_t> local(n);
#pragma omp parallel for if (n > kParallelLookups)
  for (int64_t i = 0; i < n; ++i) {
    if ((has_padding && id[i] == padding_idx) || id[i] < 0 || id[i] >= num_ids) {
      if (!(has_padding && id[i] == padding_idx)) bad = i;
      block[i] = -1;
      continue;
    }
    const int32_t r = ranks[id[i]];
    block[i] = static_cast<int32_t>(std::upper_bound(starts, starts + blocks, r) - starts - 1);
    local[i] = r - starts[block[i]];
  }
#pragma omp parallel for if (n > kParallelLookups)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t ahead = i + kPrefetchDistance;
    if (ahead < n && block[ahead] >= 0) {
      Prefetch(table_data[block[ahead]] + local[ahead] * widths[block[ahead]], sizeof(float) * widths[block[ahead]]);
    }
    float* row = o + i * dim;
    const int32_t b = block[i];
    if (b < 0) {
      std::memset(row, 0, sizeof(float) * dim);
      continue;
    }
    const float* src = table_data[b] + local[i] * widths[b];
    const float* w = projection_data[b];
    if (w == nullptr) {
      std::memcpy(row, src, sizeof(float) * dim);
      continue;
    }
    std::memset(row, 0, sizeof(float) * dim);
    for (int64_t k = 0; k < widths[b]; ++k) {
      const float a = src[k];
      const float* wk = w + k * dim;
      for (int64_t j = 0; j < dim; ++j) row[j] += a * wk[j];
    }
  }
  PD_CHECK(bad.load() < 0, "id ", bad.load() < 0 ? 0 : id[bad.load()], " is outside [0, ", num_ids, ")");
  return {out};
}

// Shapes and dtypes for static programs (to_static, jit.save, Paddle Inference): ids [...] -> [..., width].
std::vector<int64_t> WithWidth(std::vector<int64_t> shape, int64_t width) {
  shape.push_back(width);
  return shape;
}

std::vector<std::vector<int64_t>> DenseShape(const std::vector<int64_t>& ids, const std::vector<int64_t>& table,
                                             bool has_padding, int64_t padding_idx) {
  return {WithWidth(ids, table[1])};
}

std::vector<std::vector<int64_t>> QRShape(const std::vector<int64_t>& ids, const std::vector<int64_t>& quotient,
                                          const std::vector<int64_t>& remainder, int64_t collisions, int operation,
                                          bool has_padding, int64_t padding_idx) {
  return {WithWidth(ids, operation == 2 ? 2 * quotient[1] : quotient[1])};
}

std::vector<std::vector<int64_t>> HashShape(const std::vector<int64_t>& ids, const std::vector<int64_t>& coefficients,
                                            const std::vector<int64_t>& table, int64_t buckets, int combine,
                                            bool has_padding, int64_t padding_idx) {
  return {WithWidth(ids, combine == 2 ? coefficients[0] * table[1] : table[1])};
}

std::vector<std::vector<int64_t>> MixedDimShape(const std::vector<int64_t>& ids, const std::vector<int64_t>& rank,
                                                const std::vector<int64_t>& block_starts,
                                                const std::vector<std::vector<int64_t>>& tables,
                                                const std::vector<std::vector<int64_t>>& projections, int64_t dim,
                                                bool has_padding, int64_t padding_idx) {
  return {WithWidth(ids, dim)};
}

std::vector<paddle::DataType> Float32Out3(const paddle::DataType&, const paddle::DataType&, const paddle::DataType&) {
  return {paddle::DataType::FLOAT32};
}

std::vector<paddle::DataType> Float32OutMixed(const paddle::DataType&, const paddle::DataType&, const paddle::DataType&,
                                              const std::vector<paddle::DataType>&,
                                              const std::vector<paddle::DataType>&) {
  return {paddle::DataType::FLOAT32};
}

std::vector<paddle::DataType> Float32Out2(const paddle::DataType&, const paddle::DataType&) {
  return {paddle::DataType::FLOAT32};
}

PD_BUILD_OP(edo_dense_lookup)
    .Inputs({"Ids", "Table"})
    .Outputs({"Out"})
    .Attrs({"has_padding: bool", "padding_idx: int64_t"})
    .SetKernelFn(PD_KERNEL(DenseLookup))
    .SetInferShapeFn(PD_INFER_SHAPE(DenseShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(Float32Out2));

PD_BUILD_OP(edo_qr_lookup)
    .Inputs({"Ids", "Quotient", "Remainder"})
    .Outputs({"Out"})
    .Attrs({"collisions: int64_t", "operation: int", "has_padding: bool", "padding_idx: int64_t"})
    .SetKernelFn(PD_KERNEL(QRLookup))
    .SetInferShapeFn(PD_INFER_SHAPE(QRShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(Float32Out3));

PD_BUILD_OP(edo_hash_lookup)
    .Inputs({"Ids", "Coefficients", "Table"})
    .Outputs({"Out"})
    .Attrs({"buckets: int64_t", "combine: int", "has_padding: bool", "padding_idx: int64_t"})
    .SetKernelFn(PD_KERNEL(HashLookup))
    .SetInferShapeFn(PD_INFER_SHAPE(HashShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(Float32Out3));

PD_BUILD_OP(edo_mixed_dim_lookup)
    .Inputs({"Ids", "Rank", "BlockStarts", paddle::Vec("Tables"), paddle::Vec("Projections")})
    .Outputs({"Out"})
    .Attrs({"dim: int64_t", "has_padding: bool", "padding_idx: int64_t"})
    .SetKernelFn(PD_KERNEL(MixedDimLookup))
    .SetInferShapeFn(PD_INFER_SHAPE(MixedDimShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(Float32OutMixed));
