// QAT's fake quantization of one row, shared by edo_fake_quantize and the table-batched collection.
#pragma once

#include <cstdint>

namespace edo {

// The fake-quantized formats, numbered as quant.formats.FORMATS (nn.quantized.FORMAT_NUMBERS).
enum FakeFormat { kFakeFp16 = 0, kFakeBf16 = 1, kFakeInt8 = 2, kFakeInt4 = 3, kFakeInt2 = 4, kFakeTernary = 5,
                  kFakeBinary = 6 };

// row [dim] fp32 -> out [dim]: the values serving returns for it once packed in ``format`` (codecs.encode
// then codecs.decode); iterations > 0: intN rows on codecs.search_range's grid. fp16 to int2 give the
// composite ops' bits; ternary and binary sum |w| in column order, which Paddle's mean may not (their
// fp16 scale then agrees but for a sum on a rounding boundary).
void FakeQuantizeRow(const float* row, int64_t dim, int format, int iterations, float* out);

}  // namespace edo
