"""QAT's fused fake quantization (kernels/fake_quant.cc) against the composite encode + decode."""
import numpy as np
import paddle
import pytest

import paddle_edo.kernels as kernels
from paddle_edo.nn import QuantizedEmbedding
from paddle_edo.nn.quantized import FORMAT_NUMBERS, FUSED_FAKE_QUANTIZATION
from paddle_edo.quant import FORMATS, codecs


def rows_with_edge_cases(dim=24):
    rng = np.random.default_rng(0)
    rows = (rng.normal(0, 1, (30000, dim)) * np.exp(rng.uniform(-12, 6, (30000, 1)))).astype(np.float32)
    rows[0] = 0.0                                   # a zero row (scale 0)
    rows[1] = 1.5                                   # a constant row
    rows[2] = rng.normal(0, 1e-6, dim)               # fp16 subnormals, signed zeros
    rows[3] = 1e4
    rows[3, 0] = -7e4                               # past fp16's range: stored parameters overflow
    rows[4] *= 1000
    rows[5] = rng.normal(0, 1e-40, dim)              # fp32 subnormals
    return rows


@pytest.mark.parametrize("name,iterations", [(name, 0) for name in FUSED_FAKE_QUANTIZATION]
                         + [(name, codecs.RANGE_ITERATIONS) for name in ("int8", "int4", "int2")])
@pytest.mark.parametrize("dim", [24, 13])  # the kernel's 8- and 4-lane bodies alone, and with their tails
def test_fused_fake_quantization_gives_the_composite_bits(name, iterations, dim):
    rows = paddle.to_tensor(rows_with_edge_cases(dim))
    with paddle.no_grad():
        composite = codecs.fake_quantize(rows, FORMATS[name], iterations).numpy()
        fused = kernels.fused_ops().edo_fake_quantize(rows, FORMAT_NUMBERS[name], iterations).numpy()
    np.testing.assert_array_equal(fused.view(np.uint32), composite.view(np.uint32))


@pytest.mark.parametrize("iterations", [0, codecs.RANGE_ITERATIONS])
@pytest.mark.parametrize("name", ["int8", "int4", "int2"])
def test_native_encoding_gives_the_composite_bytes(name, iterations):
    """edo_encode_rows (packing on the CPU) against codecs.encode, on min-max and on searched ranges."""
    rows = paddle.to_tensor(np.delete(rows_with_edge_cases(), 3, axis=0))  # row 3 is beyond fp16: refused
    ranges = codecs.search_range(rows, FORMATS[name], iterations) if iterations else None
    codes, params = codecs.encode(rows, FORMATS[name], ranges=ranges)
    fused_codes, fused_params = kernels.fused_ops().edo_encode_rows(rows, FORMAT_NUMBERS[name], iterations)
    np.testing.assert_array_equal(fused_codes.numpy(), codes.numpy())
    np.testing.assert_array_equal(fused_params.numpy().view(np.uint16), params.numpy().view(np.uint16))


@pytest.mark.parametrize("name,row_range", [("int8", "auto"), ("int4", "auto"), ("int2", "search"), ("fp16", "auto")])
def test_qat_training_with_the_kernel_equals_training_without_it(monkeypatch, name, row_range):
    def train(kernel):
        with monkeypatch.context() as patch:
            if not kernel:
                patch.setitem(kernels._loaded, kernels.NAME, None)
            paddle.seed(2)
            table = QuantizedEmbedding(400, 8, name, mode="qat", padding_idx=0, init_std=0.3, row_range=row_range)
            optimizer = paddle.optimizer.Adam(0.05, parameters=table.parameters(), lazy_mode=True)
            for step in range(4):
                ids = paddle.to_tensor(np.random.default_rng(step).integers(0, 400, (128, 5)))
                (table(ids) ** 2).sum().backward()
                optimizer.step()
                optimizer.clear_grad()
            return table.weight.numpy()
    np.testing.assert_array_equal(train(True), train(False))


def test_packing_with_the_kernel_equals_packing_without_it(monkeypatch):
    weight = paddle.to_tensor(rows_with_edge_cases()[6:5006])  # within fp16's range
    table = paddle.nn.Embedding(5000, 24)
    table.weight.set_value(weight)
    fused = QuantizedEmbedding.from_embedding(table, "int4")
    with monkeypatch.context() as patch:
        patch.setitem(kernels._loaded, kernels.NAME, None)
        composite = QuantizedEmbedding.from_embedding(table, "int4")
    np.testing.assert_array_equal(fused.codes.numpy(), composite.codes.numpy())
    np.testing.assert_array_equal(fused.row_params.numpy().view(np.uint16), composite.row_params.numpy().view(np.uint16))
