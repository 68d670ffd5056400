// Fused gather-decode of QuantizedEmbedding's packed rows on the CPU: one pass reads each looked-up row's
// codes and fp16 parameters and writes its fp32 values, where Paddle's composite ops write the gathered
// codes, their cast, and each broadcast multiply and add as whole tensors. The arithmetic is the
// composite decode's (quant/codecs.py), operation for operation, so both give the same bits. For mixed
// precision the rows can come as fp16 or bf16 (half_rows.h: codecs.round_to_float's values).
#include <cstring>
#include <vector>

#include "half_rows.h"
#include "packed_rows.h"
#include "paddle/extension.h"

namespace {

constexpr int64_t kPrefetchDistance = 8;
constexpr int64_t kParallelLookups = 4096;

// The ids, each checked before any read: an id outside the table never reaches memory.
const int64_t* CheckedIds(const paddle::Tensor& ids, const PackedTable& table) {
  PD_CHECK(ids.is_cpu() && ids.dtype() == paddle::DataType::INT64, "ids must be int64 on the CPU");
  const int64_t* id = ids.data<int64_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) {
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

}  // namespace

// ids [...] int64 -> fp32 rows [..., dim] of a packed table (see PackedTable).
std::vector<paddle::Tensor> QuantizedLookup(const paddle::Tensor& ids, const paddle::Tensor& codes,
                                            const paddle::Tensor& params, int format, int64_t dim,
                                            bool has_padding, int64_t padding_idx) {
  const PackedTable table(codes, params, format, dim);
  const int64_t n = ids.numel();
  const int64_t* id = CheckedIds(ids, table);
  paddle::Tensor out = paddle::empty(RowsShape(ids.shape(), dim), paddle::DataType::FLOAT32, paddle::CPUPlace());
  float* o = out.data<float>();
#pragma omp parallel for if (n > kParallelLookups)
  for (int64_t i = 0; i < n; ++i) {
    if (i + kPrefetchDistance < n) table.PrefetchRow(id[i + kPrefetchDistance]);
    if (has_padding && id[i] == padding_idx) {
      std::memset(o + i * dim, 0, sizeof(float) * dim);
    } else {
      table.DecodeRow(id[i], o + i * dim);
    }
  }
  return {out};
}

// The same rows as fp16 or bf16 (kHalf), each decoded into a scratch row and rounded as it is written; a
// table stored in that format gives its rows' bits (rounding a value of the format to it is the identity).
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
  const HalfRowFn write_row = HalfRowWriter(kHalf);
  if (format == (fp16 ? kFp16 : kBf16)) {  // a table in the output's own format: its rows as they are
#pragma omp parallel for if (n > kParallelLookups)
    for (int64_t i = 0; i < n; ++i) {
      if (i + kPrefetchDistance < n) table.PrefetchRow(id[i + kPrefetchDistance]);
      if (has_padding && id[i] == padding_idx) {
        std::memset(o + i * dim, 0, sizeof(uint16_t) * dim);
      } else {
        std::memcpy(o + i * dim, table.half() + id[i] * dim, sizeof(uint16_t) * dim);
      }
    }
    return {out};
  }
#pragma omp parallel if (n > kParallelLookups)
  {
    std::vector<float> scratch(dim);
#pragma omp for
    for (int64_t i = 0; i < n; ++i) {
      if (i + kPrefetchDistance < n) table.PrefetchRow(id[i + kPrefetchDistance]);
      if (has_padding && id[i] == padding_idx) {
        std::memset(o + i * dim, 0, sizeof(uint16_t) * dim);
      } else {
        table.DecodeRow(id[i], scratch.data());
        write_row(scratch.data(), dim, o + i * dim);
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
