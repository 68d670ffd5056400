// Fused gather-decode of QuantizedEmbedding's packed rows on the CPU: one pass reads each looked-up row's
// codes and fp16 parameters and writes its fp32 values, where Paddle's composite ops write the gathered
// codes, their cast, and each broadcast multiply and add as whole tensors. The arithmetic is the
// composite decode's (quant/codecs.py), operation for operation, so both give the same bits. For mixed
// precision the rows can come as fp16 or bf16 (half_rows.h: codecs.round_to_float's values).
#include <algorithm>
#include <cstring>
#include <vector>

#include "half_rows.h"
#include "packed_rows.h"
#include "paddle/extension.h"
#include "streaming_stores.h"

namespace {

constexpr int64_t kPrefetchDistance = 16;
constexpr int64_t kParallelLookups = 4096;
constexpr int64_t kHalfBlock = 8;

// The ids, each checked before any read: an id outside the table never reaches memory.
const int64_t* CheckedIds(const paddle::Tensor& ids, const PackedTable& table) {
  PD_CHECK(ids.is_cpu() && ids.dtype() == paddle::DataType::INT64, "ids must be int64 on the CPU");
  const int64_t* id = ids.data<int64_t>();
  const int64_t n = ids.numel();  // a call into Paddle: not in the loop's condition
  for (int64_t i = 0; i < n; ++i) {
    PD_CHECK(id[i] >= 0 && id[i] < table.rows(), "id ", id[i], " is outside [0, ", table.rows(), ")");
  }
  return id;
}

// ids [...] -> rows [..., dim]
std::vector<int64_t> RowsShape(const std::vector<int64_t>& ids, int64_t dim) {
  std::vector<int64_t> shape = ids;
  shape.push_back(dim);
  return shape;
}

// Each id's row [dim] of ``out`` written by a writer, write(id, row), the padding id's row zeros; rows
// prefetched ahead; threads over large batches, each with its own writer from make_writer() (where a writer
// keeps a scratch row). ``streamed``: the writer writes with streaming stores, fenced at each thread's end.
template <typename T, typename MakeWriter>
void WriteRows(const PackedTable& table, const int64_t* id, int64_t n, int64_t dim, bool has_padding,
               int64_t padding_idx, T* out, MakeWriter make_writer, bool streamed = false) {
#pragma omp parallel if (n > kParallelLookups)
  {
    auto write = make_writer();
#pragma omp for
    for (int64_t i = 0; i < n; ++i) {
      if (i + kPrefetchDistance < n) table.PrefetchRow(id[i + kPrefetchDistance]);
      if (has_padding && id[i] == padding_idx) {
        std::memset(out + i * dim, 0, sizeof(T) * dim);
      } else {
        write(id[i], out + i * dim);
      }
    }
    edo::FenceStreamingStores(streamed);
  }
}

// A code row decoded eight lanes at a time (the AVX2 path), each lane group put by Put: the lanes the row
// decoders store (packed_rows.h), so the same bits as DecodeRow.
template <typename Lanes, typename Put>
__attribute__((target("avx2,f16c"))) void CodeRowAvx2(const int8_t* codes, const uint16_t* params, int64_t dim,
                                                      typename Put::Element* out) {
  const Lanes lanes = Lanes::Of(codes, params);
  for (int64_t j = 0; j < dim; j += 8) Put::Lanes(out + j, lanes.At(j));
}

// Rounded to fp16 / bf16 as they are decoded (HalfLanes), rather than through a scratch row. Measured on a
// 2-core AMD EPYC Zen 3 (AVX2), int8 -> fp16 of 4096 x 26 ids from a 1e6 x 64 table: see docs/benchmarks.md.
template <int kHalf>
struct PutHalf {
  using Element = uint16_t;
  static constexpr bool kStreamed = false;
  __attribute__((target("avx2,f16c"), always_inline)) static void Lanes(uint16_t* out, __m256 lanes) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), HalfLanes<kHalf>(lanes));
  }
};

// fp32 with streaming stores, for outputs past half the last-level cache (streaming_stores.h); 32-byte
// aligned rows. Streamed from scratch rows instead, the rows of 8-bit and narrower codes were 1.1-1.35x slower
// than written in place (1e6 x 64, uniform ids, same Zen 3).
struct PutStreamed {
  using Element = float;
  static constexpr bool kStreamed = true;
  __attribute__((target("avx2,f16c"), always_inline)) static void Lanes(float* out, __m256 lanes) {
    _mm256_stream_ps(out, lanes);
  }
};

template <typename Put>
using EightLaneRowFn = void (*)(const int8_t* codes, const uint16_t* params, int64_t dim, typename Put::Element* out);

// The AVX2 path's decoder of a format whose rows come eight lanes at a time (int8, int4, int2, binary; rows
// of whole 8-lane groups), or null: then rows are decoded whole by DecodeRow (as the AVX-512 path always
// does) and written as the caller writes them.
template <typename Put>
EightLaneRowFn<Put> CodeRowWriter(int format, int64_t dim) {
  if (!edo::HasAvx2() || edo::HasAvx512() || dim % 8 != 0) return nullptr;
  switch (format) {
    case kInt8: return CodeRowAvx2<Int8Lanes, Put>;
    case kInt4: return CodeRowAvx2<BitLanes<4, false>, Put>;
    case kInt2: return CodeRowAvx2<BitLanes<2, false>, Put>;
    case kBinary: return CodeRowAvx2<BitLanes<1, true>, Put>;
    default: return nullptr;
  }
}

// Each id's row written by code_row straight from its codes (the padding id's zeros).
template <typename Put>
void WriteCodeRows(const PackedTable& table, const int64_t* id, int64_t n, int64_t dim, bool has_padding,
                   int64_t padding_idx, EightLaneRowFn<Put> code_row, typename Put::Element* out) {
  WriteRows(table, id, n, dim, has_padding, padding_idx, out, [&] {
    return [&](int64_t r, typename Put::Element* row) {
      code_row(table.codes() + r * table.row_bytes(), table.params() + r * table.params_per_row(), dim, row);
    };
  }, Put::kStreamed);
}

}  // namespace

// ids [...] int64 -> fp32 rows [..., dim] of a packed table (see PackedTable); a large output of the AVX2
// path's 8-lane formats streamed out as decoded (streaming_stores.h).
std::vector<paddle::Tensor> QuantizedLookup(const paddle::Tensor& ids, const paddle::Tensor& codes,
                                            const paddle::Tensor& params, int format, int64_t dim,
                                            bool has_padding, int64_t padding_idx) {
  const PackedTable table(codes, params, format, dim);
  const int64_t n = ids.numel();
  const int64_t* id = CheckedIds(ids, table);
  paddle::Tensor out = paddle::empty(RowsShape(ids.shape(), dim), paddle::DataType::FLOAT32, paddle::CPUPlace());
  float* o = out.data<float>();
  const EightLaneRowFn<PutStreamed> streamed = CodeRowWriter<PutStreamed>(format, dim);
  if (streamed != nullptr && edo::StreamsOutput(o, sizeof(float) * n * dim, 32)) {
    WriteCodeRows<PutStreamed>(table, id, n, dim, has_padding, padding_idx, streamed, o);
    return {out};
  }
  WriteRows(table, id, n, dim, has_padding, padding_idx, o,
            [&] { return [&](int64_t r, float* row) { table.DecodeRow(r, row); }; });
  return {out};
}

// The same rows as fp16 or bf16 (kHalf): rounded as they are decoded (the AVX2 path's 8-lane formats), or
// decoded kHalfBlock rows at a time into scratch rows, then rounded as they are written: a row read back
// right after its decoder's stores waits for them (wide stores do not forward to the loads that follow),
// where a block's first rows have long reached the cache. A table stored in the output's format gives its
// rows' bits (rounding a value of the format to it is the identity).
template <int kHalf>
std::vector<paddle::Tensor> QuantizedLookupHalf(const paddle::Tensor& ids, const paddle::Tensor& codes,
                                                const paddle::Tensor& params, int format, int64_t dim,
                                                bool has_padding, int64_t padding_idx) {
  const PackedTable table(codes, params, format, dim);
  const int64_t n = ids.numel();
  const int64_t* id = CheckedIds(ids, table);
  const bool fp16 = kHalf == kHalfFp16;
  paddle::Tensor out = paddle::empty(RowsShape(ids.shape(), dim),
                                     fp16 ? paddle::DataType::FLOAT16 : paddle::DataType::BFLOAT16, paddle::CPUPlace());
  uint16_t* o = fp16 ? reinterpret_cast<uint16_t*>(out.data<paddle::float16>())
                     : reinterpret_cast<uint16_t*>(out.data<paddle::bfloat16>());
  if (format == (fp16 ? kFp16 : kBf16)) {  // a table in the output's own format: its rows as they are
    WriteRows(table, id, n, dim, has_padding, padding_idx, o, [&] {
      return [&](int64_t r, uint16_t* row) { std::memcpy(row, table.half() + r * dim, sizeof(uint16_t) * dim); };
    });
    return {out};
  }
  const EightLaneRowFn<PutHalf<kHalf>> code_row = CodeRowWriter<PutHalf<kHalf>>(format, dim);
  if (code_row != nullptr) {
    WriteCodeRows<PutHalf<kHalf>>(table, id, n, dim, has_padding, padding_idx, code_row, o);
    return {out};
  }
  const HalfRowFn write_row = HalfRowWriter(kHalf);
#pragma omp parallel if (n > kParallelLookups)
  {
    std::vector<float> scratch(kHalfBlock * dim);
#pragma omp for
    for (int64_t start = 0; start < n; start += kHalfBlock) {
      const int64_t end = std::min(n, start + kHalfBlock);
      for (int64_t i = start; i < end; ++i) {
        if (i + kPrefetchDistance < n) table.PrefetchRow(id[i + kPrefetchDistance]);
        if (!has_padding || id[i] != padding_idx) table.DecodeRow(id[i], scratch.data() + (i - start) * dim);
      }
      for (int64_t i = start; i < end; ++i) {
        if (has_padding && id[i] == padding_idx) {
          std::memset(o + i * dim, 0, sizeof(uint16_t) * dim);
        } else {
          write_row(scratch.data() + (i - start) * dim, dim, o + i * dim);
        }
      }
    }
  }
  return {out};
}

std::vector<std::vector<int64_t>> QuantizedLookupShape(const std::vector<int64_t>& ids,
                                                       const std::vector<int64_t>& codes,
                                                       const std::vector<int64_t>& params, int format, int64_t dim,
                                                       bool has_padding, int64_t padding_idx) {
  return {RowsShape(ids, dim)};
}

std::vector<paddle::DataType> QuantizedLookupDtype(const paddle::DataType&, const paddle::DataType&,
                                                   const paddle::DataType&) {
  return {paddle::DataType::FLOAT32};
}

PD_BUILD_OP(edo_quantized_lookup)
    .Inputs({"Ids", "Codes", "Params"})
    .Outputs({"Out"})
    .Attrs({"format: int", "dim: int64_t", "has_padding: bool", "padding_idx: int64_t"})
    .SetKernelFn(PD_KERNEL(QuantizedLookup))
    .SetInferShapeFn(PD_INFER_SHAPE(QuantizedLookupShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(QuantizedLookupDtype));

std::vector<paddle::DataType> QuantizedLookupFp16Dtype(const paddle::DataType&, const paddle::DataType&,
                                                       const paddle::DataType&) {
  return {paddle::DataType::FLOAT16};
}

std::vector<paddle::DataType> QuantizedLookupBf16Dtype(const paddle::DataType&, const paddle::DataType&,
                                                       const paddle::DataType&) {
  return {paddle::DataType::BFLOAT16};
}

PD_BUILD_OP(edo_quantized_lookup_fp16)
    .Inputs({"Ids", "Codes", "Params"})
    .Outputs({"Out"})
    .Attrs({"format: int", "dim: int64_t", "has_padding: bool", "padding_idx: int64_t"})
    .SetKernelFn(PD_KERNEL(QuantizedLookupHalf<kHalfFp16>))
    .SetInferShapeFn(PD_INFER_SHAPE(QuantizedLookupShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(QuantizedLookupFp16Dtype));

PD_BUILD_OP(edo_quantized_lookup_bf16)
    .Inputs({"Ids", "Codes", "Params"})
    .Outputs({"Out"})
    .Attrs({"format: int", "dim: int64_t", "has_padding: bool", "padding_idx: int64_t"})
    .SetKernelFn(PD_KERNEL(QuantizedLookupHalf<kHalfBf16>))
    .SetInferShapeFn(PD_INFER_SHAPE(QuantizedLookupShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(QuantizedLookupBf16Dtype));
