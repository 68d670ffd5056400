"""The fused gather-decode kernel of packed tables (kernels/quantized.cc) against Paddle's composite decode."""
import numpy as np
import paddle
import pytest

import paddle_edo.kernels as kernels
from paddle_edo.data import FieldSpec
from paddle_edo.export import Predictor, export_model, input_specs, uses_fused_kernels
from paddle_edo.models import DeepFM
from paddle_edo.nn import DenseEmbedding, QuantizedEmbedding
from paddle_edo.quant import FORMATS, codecs
from paddle_edo.runtime import PADDLE_OPENMP


def composite(monkeypatch, layer, ids):
    """The layer's lookup with the kernels unavailable: Paddle's composite ops."""
    with monkeypatch.context() as patch:
        patch.setitem(kernels._loaded, kernels.NAME, None)
        with paddle.no_grad():
            return layer(ids).numpy()


def packed_table(dtype, rows, dim, padding_idx=0, seed=0):
    paddle.seed(seed)
    dense = DenseEmbedding(rows, dim, padding_idx=padding_idx, init_std=0.5)
    with paddle.no_grad():  # tiny values too: fp16 subnormals must decode exactly as well
        dense.weight[1] = paddle.full([dim], 3e-6)
        dense.weight[2] = paddle.linspace(-1e-5, 1e-5, dim)
    return QuantizedEmbedding.from_embedding(dense, dtype)


@pytest.mark.parametrize("dim", [144, 64, 37, 13, 7, 1])  # int4 64 at a time, sixteen- and eight-lane
# decoders, their tails, and tails alone
@pytest.mark.parametrize("dtype", list(FORMATS))
def test_fused_decode_equals_the_composite_decode_bit_for_bit(monkeypatch, dtype, dim):
    assert kernels.fused_ops() is not None  # built by `make test`
    table = packed_table(dtype, 3000, dim)
    ids = np.random.default_rng(1).integers(0, 3000, (700, 9)).astype(np.int64)  # enough for the threads
    ids[0, :3] = [0, 1, 2]  # the padding row, tiny values
    with paddle.no_grad():
        fused = table(paddle.to_tensor(ids)).numpy()
    expected = composite(monkeypatch, table, paddle.to_tensor(ids))
    assert fused.dtype == np.float32 and fused.shape == (700, 9, dim)
    np.testing.assert_array_equal(fused.view(np.uint32), expected.view(np.uint32))  # the very bits, signs of 0 too
    assert not fused[0, 0].any()  # the padding row decodes to zero


def test_every_lookup_of_a_packed_table_on_the_cpu_takes_the_kernel(monkeypatch):
    calls = []
    import paddle_edo.nn.quantized as quantized

    def counted():
        calls.append(1)
        return kernels.fused_ops()
    table = packed_table("int4", 100, 8)
    monkeypatch.setattr(quantized, "fused_ops", counted)
    ids = paddle.to_tensor([[1, 5, 0]], dtype="int32")  # int32 ids too
    table.eval()
    with paddle.no_grad():
        table(ids)
    table.train()
    table(ids)  # a packed table has nothing to train: its lookups take the kernel in training mode too
    assert len(calls) == 2


@pytest.mark.parametrize("dtype", ["int8", "fp16", "bf16"])
@pytest.mark.parametrize("optimizer", ["adagrad", "sgd"])
@pytest.mark.parametrize("lookups", [1, 2])  # one lookup reuses its decoded rows; two merge their gradients
def test_low_precision_training_takes_the_kernels_and_trains_the_same_bits(monkeypatch, dtype, optimizer, lookups):
    import paddle_edo.nn.quantized as quantized

    def run(kernel):
        writes = []

        def counted():
            ops = kernels.fused_ops()
            if ops is None:
                return None
            class Counting:
                def __getattr__(self, name):
                    writes.append(name)
                    return getattr(ops, name)
            return Counting()
        with monkeypatch.context() as patch:
            if not kernel:
                patch.setitem(kernels._loaded, kernels.NAME, None)
            patch.setattr(quantized, "fused_ops", counted)
            paddle.seed(3)
            table = QuantizedEmbedding(500, 13, dtype, mode="low_precision", padding_idx=0, init_std=0.2)
            table.configure_row_optimizer(optimizer)
            for step in range(3):
                rng = np.random.default_rng(step)
                loss = sum((table(paddle.to_tensor(rng.integers(0, 500, (300, 4)))) ** 2).sum() for _ in range(lookups))
                loss.backward()
                paddle.seed(100 + step)
                table.apply_row_updates(0.1)
            state = table.row_sum_sq.numpy() if optimizer == "adagrad" else np.zeros(1)
            stored = [table.codes.numpy().view(np.uint16 if dtype != "int8" else np.int8), state]
            return [*stored, *([] if table.row_params is None else [table.row_params.numpy()])], writes
    fused, fused_calls = run(True)
    composite_, composite_calls = run(False)
    assert "edo_write_rows" in fused_calls and "edo_quantized_lookup" in fused_calls and not composite_calls
    for with_kernel, without in zip(fused, composite_):
        np.testing.assert_array_equal(with_kernel, without)


def test_the_row_write_kernel_refuses_bad_ids_before_writing():
    table = QuantizedEmbedding(20, 4, "int8", mode="low_precision")
    before = table.codes.numpy().copy()
    rows = paddle.zeros([2, 4])
    for ids, message in (([3, 20], "outside"), ([5, 5], "distinct and increasing"), ([-1, 2], "outside")):
        with pytest.raises(Exception, match=message):
            kernels.fused_ops().edo_write_rows(table.codes, table.row_params, paddle.to_tensor(ids, dtype="int64"),
                                               rows, 2, 7, 0, 1)
    np.testing.assert_array_equal(table.codes.numpy(), before)


def test_the_kernel_refuses_ids_outside_the_table_before_reading_them():
    table = packed_table("int8", 50, 4)
    with pytest.raises(Exception, match=r"id 50 is outside \[0, 50\)"):
        kernels.fused_ops().edo_quantized_lookup(paddle.to_tensor([1, 50]), table.codes, table.row_params, 2, 4,
                                                 False, 0)
    with pytest.raises(Exception, match=r"id -3 is outside \[0, 50\)"):
        kernels.fused_ops().edo_quantized_lookup(paddle.to_tensor([-3]), table.codes, table.row_params, 2, 4,
                                                 False, 0)
    with pytest.raises(Exception, match="row parameters must be float16"):
        kernels.fused_ops().edo_quantized_lookup(paddle.to_tensor([1]), table.codes, table.codes, 2, 4, False, 0)


@pytest.mark.parametrize("dtype", ["int8", "int4", "bf16", "binary"])
def test_a_fused_export_of_packed_tables_serves_the_same_bits(tmp_path, dtype):
    fields = [FieldSpec("user", 2000), FieldSpec("tags", 40, max_len=3)]
    paddle.seed(0)
    model = DeepFM(fields, {"type": "quantized", "storage_format": dtype, "dim": 8, "init_std": 0.3}, hidden_units=[8])
    for table in [*model.embeddings.values(), *model.first_order.values()]:
        table.pack()
    model.eval()
    rng = np.random.default_rng(0)
    ids = [rng.integers(0, 2000, 300).astype(np.int64), rng.integers(0, 40, (300, 3)).astype(np.int64)]
    with paddle.no_grad():
        eager = model([paddle.to_tensor(i) for i in ids]).numpy()
    fused = export_model(model, input_specs(fields), tmp_path / "fused" / "model", fused_kernels=True)
    plain = export_model(model, input_specs(fields), tmp_path / "plain" / "model")
    assert uses_fused_kernels(fused) and not uses_fused_kernels(plain)
    np.testing.assert_array_equal(Predictor(fused).run(ids), eager)
    np.testing.assert_array_equal(Predictor(plain).run(ids), eager)


def test_the_kernels_follow_the_configured_threads():
    from paddle_edo.runtime import set_num_threads

    threads = kernels.c_function("edo_openmp_threads")  # as the kernels' own OpenMP runtime sees them
    try:
        set_num_threads(1)
        assert threads() == 1
        set_num_threads(2)
        assert threads() == 2
    finally:
        set_num_threads(2)


@pytest.mark.skipif(not PADDLE_OPENMP.exists(),
                    reason="this Paddle ships no Intel OpenMP for the kernels to share")
def test_the_kernels_run_on_paddles_own_openmp_threads():
    """Paddle's thread setting alone (as a predictor's config makes it) reaches the kernels: one runtime,
    one pool of threads (GNU OpenMP's setting stays apart from it)."""
    from paddle_edo.runtime import set_num_threads

    threads = kernels.c_function("edo_openmp_threads")
    try:
        for n in (1, 2):
            paddle.base.core.set_num_threads(n)
            assert threads() == n
    finally:
        set_num_threads(2)


def widened(values):
    """fp16 / bf16 values (a tensor, or numpy, where bf16 comes as its uint16 bits) as fp32 numpy."""
    if isinstance(values, paddle.Tensor):
        return paddle.cast(values, "float32").numpy()
    values = np.asarray(values)
    return (values.astype(np.uint32) << 16).view(np.float32) if values.dtype == np.uint16 else values.astype(np.float32)


def half_output_table(dtype, output_dtype, dim):
    """A packed table whose lookups return fp16 / bf16; a bf16 table also holds values past fp16's range."""
    table = packed_table(dtype, 3000, dim)
    if dtype == "bf16":
        with paddle.no_grad():
            table.bf16_codes[3] = paddle.linspace(-1e5, 1e5, dim).astype("bfloat16")
    table.output_dtype = output_dtype
    return table


@pytest.mark.parametrize("dim", [64, 29, 13])  # sixteen or eight values a write, and the tail
@pytest.mark.parametrize("output_dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("dtype", list(FORMATS))
def test_half_outputs_are_the_composite_rounding_bit_for_bit(monkeypatch, dtype, output_dtype, dim):
    # the kernel rounds each decoded value as codecs.round_to_float does: nearest, ties away, clipped
    table = half_output_table(dtype, output_dtype, dim)
    ids = np.random.default_rng(2).integers(0, 3000, (700, 9)).astype(np.int64)
    ids[0, :4] = [0, 1, 2, 3]  # the padding row, fp16 subnormals, values past fp16's range
    with paddle.no_grad():
        fused = table(paddle.to_tensor(ids))
        table.output_dtype = "float32"
        rows = table(paddle.to_tensor(ids))
        table.output_dtype = output_dtype
        rounded = codecs.round_to_float(rows, output_dtype)
    expected = composite(monkeypatch, table, paddle.to_tensor(ids))
    assert fused.dtype == getattr(paddle, output_dtype) and fused.shape == [700, 9, dim]
    got = widened(fused)
    np.testing.assert_array_equal(got.view(np.uint32), widened(expected).view(np.uint32))  # signs of 0 too
    np.testing.assert_array_equal(got.view(np.uint32), widened(rounded).view(np.uint32))
    assert not got[0, 0].any()
    if dtype == "bf16" and output_dtype == "float16":
        assert np.abs(got[0, 3]).max() == 65504.0  # clipped to fp16's largest value, not infinite


@pytest.mark.parametrize("sparse", [True, False])  # through the distinct rows, or every lookup
def test_half_outputs_train_through_the_rounding_with_the_fp32_gradient(sparse):
    # QAT's master rows in fp16: the forward values a packed table serves, the gradient the identity
    ids = paddle.to_tensor(np.random.default_rng(3).integers(0, 50, (40, 3)))
    upstream = paddle.to_tensor(np.random.default_rng(4).integers(-4, 4, (40, 3, 8)).astype(np.float32))
    tables, outputs = {}, {}
    for output_dtype in ("float32", "float16"):
        paddle.seed(3)
        table = QuantizedEmbedding(50, 8, "int8", mode="qat", sparse=sparse, output_dtype=output_dtype, init_std=0.3)
        optimizer = paddle.optimizer.SGD(0.1, parameters=table.parameters())
        outputs[output_dtype] = table(ids)
        (paddle.cast(outputs[output_dtype], "float32") * upstream).sum().backward()
        optimizer.step()
        tables[output_dtype] = table
    assert outputs["float16"].dtype == paddle.float16
    np.testing.assert_array_equal(widened(outputs["float16"]),
                                  widened(codecs.round_to_float(outputs["float32"].detach(), "float16")))
    np.testing.assert_array_equal(tables["float16"].weight.numpy(), tables["float32"].weight.numpy())
    half = tables["float16"]
    half.pack()
    with paddle.no_grad():
        np.testing.assert_array_equal(widened(half(ids)),
                                      widened(codecs.round_to_float(tables["float32"].pack()(ids), "float16")))


class WidenedOutput(paddle.nn.Layer):
    """A table whose fp16 / bf16 rows a model takes on, ending in fp32 (Paddle Inference 2.6 copies no bf16
    output to the host)."""

    def __init__(self, table):
        super().__init__()
        self.table = table

    def forward(self, ids):
        return paddle.cast(self.table(ids), "float32")


@pytest.mark.parametrize("output_dtype", ["float16", "bfloat16"])
def test_half_outputs_round_trip_through_to_static_and_paddle_inference(tmp_path, output_dtype):
    model = WidenedOutput(half_output_table("int8", output_dtype, 16))
    model.eval()
    ids = np.random.default_rng(5).integers(0, 3000, (64, 5)).astype(np.int64)
    with paddle.no_grad():
        eager = model(paddle.to_tensor(ids)).numpy()
    spec = [paddle.static.InputSpec([None, 5], "int64", name="ids")]
    static = paddle.jit.to_static(model, input_spec=spec, full_graph=True)
    np.testing.assert_array_equal(static(paddle.to_tensor(ids)).numpy(), eager)
    paddle.jit.save(static, str(tmp_path / "plain"))
    with kernels.fused_static_programs():
        fused = paddle.jit.to_static(WidenedOutput(half_output_table("int8", output_dtype, 16)), input_spec=spec,
                                     full_graph=True)
        paddle.jit.save(fused, str(tmp_path / "fused"))
    assert uses_fused_kernels(tmp_path / "fused") and not uses_fused_kernels(tmp_path / "plain")
    for prefix in ("plain", "fused"):
        served = Predictor(tmp_path / prefix, device="cpu").run([ids])
        np.testing.assert_array_equal(served, eager, err_msg=prefix)


def test_fp16_outputs_round_ties_away_from_zero_in_every_binade(monkeypatch):
    # values exactly halfway between two fp16 values, which F16C's conversion alone would round to even
    table = packed_table("int8", 4, 64)
    codes = np.zeros((4, 64), np.int8)
    codes[1] = np.arange(0, 64)                    # (c + 128) 2^-7 + 2^-11: ties in [1, 1.5)
    codes[2] = np.arange(64, 128)                  # and, with a negative scale, in (-2, -1.5]
    codes[3] = np.arange(-128, -64)                # below 1: fp16 holds them exactly
    params = np.array([[1, 0], [2 ** -7, 2 ** -11], [-2 ** -7, -2 ** -11], [2 ** -7, 2 ** -11]], np.float16)
    with paddle.no_grad():
        table.codes.set_value(paddle.to_tensor(codes))
        table.row_params.set_value(paddle.to_tensor(params))
    subnormal = packed_table("bf16", 3, 64)
    steps = np.concatenate([np.arange(-64, 0), np.arange(0, 64)]).reshape(2, 64)
    with paddle.no_grad():                         # m 2^-26: fp16's unit there is 2^-24, ties where m = 2 mod 4
        subnormal.bf16_codes[1:3] = paddle.to_tensor((steps * 2.0 ** -26).astype(np.float32)).astype("bfloat16")
    for layer, rows in ((table, [1, 2, 3]), (subnormal, [1, 2])):
        ids = paddle.to_tensor(np.array(rows, np.int64))
        with paddle.no_grad():
            values = layer(ids)
            layer.output_dtype = "float16"
            fused = widened(layer(ids))
        np.testing.assert_array_equal(fused.view(np.uint32),
                                      widened(codecs.round_to_float(values, "float16")).view(np.uint32))
        np.testing.assert_array_equal(fused.view(np.uint32), widened(composite(monkeypatch, layer, ids)).view(np.uint32))
        layer.output_dtype = "float32"
        nearest_even = values.numpy().astype(np.float16).astype(np.float32)
        assert (fused != nearest_even).sum() >= 16   # ties that rounding to even would take towards zero
    assert fused[0, 62] == -2.0 ** -24 and fused[1, 2] == 2.0 ** -24   # -0.5 and 0.5 units: away, not to 0


def test_fp16_outputs_at_the_edges_of_the_subnormal_rounding(monkeypatch):
    # the kernels round below fp16's smallest normal by adding half a unit (2^-25) and truncating: values
    # about 2^-25 (half a unit: 0 or one unit), about 1.5 units (a tie), about the smallest normal, and
    # far below any unit, each sign, bf16 values (exact in bf16, with eight bits below their leading one)
    edges = [0.0, 2.0 ** -100, 2.0 ** -26, 2.0 ** -25 - 2.0 ** -33, 2.0 ** -25, 2.0 ** -25 + 2.0 ** -32,
             1.5 * 2.0 ** -24 - 2.0 ** -31, 1.5 * 2.0 ** -24, 1.5 * 2.0 ** -24 + 2.0 ** -31,
             2.0 ** -14 - 2.0 ** -22, 2.0 ** -14, 2.0 ** -14 + 2.0 ** -21]
    values = np.array([sign * edge for edge in edges for sign in (1.0, -1.0)], np.float32)
    assert (paddle.to_tensor(values).astype("bfloat16").astype("float32").numpy() == values).all()
    table = packed_table("bf16", 3, values.size)
    with paddle.no_grad():
        table.bf16_codes[1] = paddle.to_tensor(values).astype("bfloat16")
        table.output_dtype = "float16"
        ids = paddle.to_tensor(np.array([1], np.int64))
        fused = widened(table(ids))[0]
    expected = widened(codecs.round_to_float(paddle.to_tensor(values), "float16"))
    np.testing.assert_array_equal(fused.view(np.uint32), expected.view(np.uint32))
    np.testing.assert_array_equal(fused.view(np.uint32), widened(composite(monkeypatch, table, ids))[0].view(np.uint32))
    units = np.abs(fused[:8]) / 2.0 ** -24
    np.testing.assert_array_equal(units, [0, 0, 0, 0, 0, 0, 0, 0])
    assert list(np.abs(fused[8:12]) / 2.0 ** -24) == [1, 1, 1, 1]            # 2^-25 ties away; just above
    assert list(np.abs(fused[12:18]) / 2.0 ** -24) == [1, 1, 2, 2, 2, 2]      # 1.5 units: below, tie, above
    assert (np.signbit(fused) == np.signbit(values)).all()
