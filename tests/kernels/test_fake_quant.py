"""QAT's fused fake quantization (kernels/fake_quant.cc) against the composite encode + decode."""
import numpy as np
import paddle
import pytest

import paddle_edo.kernels as kernels
from paddle_edo.nn import QuantizedEmbedding
from paddle_edo.nn.quantized import FORMAT_NUMBERS, FUSED_FAKE_QUANTIZATION
from paddle_edo.quant import FORMATS, codecs


def rows_with_edge_cases():
    rng = np.random.default_rng(0)
    rows = (rng.normal(0, 1, (30000, 24)) * np.exp(rng.uniform(-12, 6, (30000, 1)))).astype(np.float32)
    rows[0] = 0.0                                   # a zero row (scale 0)
    rows[1] = 1.5                                   # a constant row
    rows[2] = rng.normal(0, 1e-6, 24)               # fp16 subnormals, signed zeros
    rows[3] = 1e4
    rows[3, 0] = -7e4                               # past fp16's range: stored parameters overflow
    rows[4] *= 1000
    rows[5] = rng.normal(0, 1e-40, 24)              # fp32 subnormals
    return rows


@pytest.mark.parametrize("name", FUSED_FAKE_QUANTIZATION)
def test_fused_fake_quantization_gives_the_composite_bits(name):
    rows = paddle.to_tensor(rows_with_edge_cases())
    with paddle.no_grad():
        composite = codecs.fake_quantize(rows, FORMATS[name]).numpy()
        fused = kernels.fused_ops().edo_fake_quantize(rows, FORMAT_NUMBERS[name]).numpy()
    np.testing.assert_array_equal(fused.view(np.uint32), composite.view(np.uint32))


@pytest.mark.parametrize("name", ["int8", "int4", "fp16"])
def test_qat_training_with_the_kernel_equals_training_without_it(monkeypatch, name):
    def train(kernel):
        with monkeypatch.context() as patch:
            if not kernel:
                patch.setitem(kernels._loaded, kernels.NAME, None)
            paddle.seed(2)
            table = QuantizedEmbedding(400, 8, name, mode="qat", padding_idx=0, init_std=0.3)
            optimizer = paddle.optimizer.Adam(0.05, parameters=table.parameters(), lazy_mode=True)
            for step in range(4):
                ids = paddle.to_tensor(np.random.default_rng(step).integers(0, 400, (128, 5)))
                (table(ids) ** 2).sum().backward()
                optimizer.step()
                optimizer.clear_grad()
            return table.weight.numpy()
    np.testing.assert_array_equal(train(True), train(False))
