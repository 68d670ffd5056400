import numpy as np
import paddle
import pytest

from paddle_edo import dequantize_model, memory_report, quantize
from paddle_edo.checkpoint import CheckpointError, load_model_state
from paddle_edo.data import FieldSpec
from paddle_edo.models import DeepFM
from paddle_edo.nn import DenseEmbedding, QuantizedEmbedding
from paddle_edo.quant import FORMATS

DTYPES = list(FORMATS)


def dense(rows=200, dim=64, padding_idx=0, seed=0):
    paddle.seed(seed)
    return DenseEmbedding(rows, dim, padding_idx=padding_idx, init_std=0.5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_from_embedding_decodes_close_to_the_source_and_padding_to_zero(dtype):
    source = dense()
    table = QuantizedEmbedding.from_embedding(source, dtype)
    ids = paddle.to_tensor([[0, 3, 199], [7, 0, 0]])
    out = table(ids).numpy()
    np.testing.assert_array_equal(out[0, 0], np.zeros(64, np.float32))
    np.testing.assert_array_equal(out[1, 1:], np.zeros((2, 64), np.float32))
    np.testing.assert_array_equal(out[0, 1], table.dequantize().weight.numpy()[3])
    error = np.abs(out[0, 1:] - source.weight.numpy()[[3, 199]]).max()
    limit = {"fp16": 1e-3, "bf16": 1e-2, "int8": 0.02, "int4": 0.3, "int2": 1.5, "ternary": 2.5, "binary": 2.5}
    assert error < limit[dtype]


@pytest.mark.parametrize("dtype,bits", [("int8", 8), ("int4", 4), ("int2", 2), ("binary", 1)])
def test_bytes_held_are_rows_times_packed_bytes_plus_row_parameters(dtype, bits):
    table = QuantizedEmbedding.from_embedding(dense(1000, 64), dtype)
    params = 2 if dtype == "binary" else 4
    expected = 1000 * (int(np.ceil(64 * bits / 8)) + params)
    report = memory_report(paddle.nn.Sequential(table))
    assert report.tables[0].estimated_bytes == report.tables[0].held_bytes == expected
    assert report.tables[0].dtype == dtype and report.tables[0].kind == "quantized"
    ratio = 1000 * 64 * 4 / expected
    assert ratio >= {"int8": 3.7, "int4": 7, "int2": 12, "binary": 25}[dtype]


def test_quantize_swaps_tables_in_place_with_include_and_exclude():
    fields = [FieldSpec("user", 100), FieldSpec("item", 80)]
    model = DeepFM(fields, {"type": "dense", "dim": 8, "sparse": True, "init_std": 0.1}, [8])
    model.plain = paddle.nn.Embedding(30, 4)
    assert quantize(model, "int4", exclude=["first_order.*"]) is model
    kinds = {t.name: (t.kind, t.dtype) for t in memory_report(model).tables}
    assert kinds["embeddings.user"] == ("quantized", "int4") and kinds["plain"] == ("quantized", "int4")
    assert kinds["first_order.user"] == ("dense", "float32")
    quantize(model, "int8", include=["first_order.item"])
    kinds = {t.name: t.dtype for t in memory_report(model).tables}
    assert kinds["first_order.item"] == "int8" and kinds["first_order.user"] == "float32"
    ids = [paddle.to_tensor([1, 2]), paddle.to_tensor([3, 4])]
    before = model(ids).numpy()
    dequantize_model(model)
    assert {t.kind for t in memory_report(model).tables} == {"paddle.nn.Embedding", "dense"}
    np.testing.assert_allclose(model(ids).numpy(), before, rtol=1e-6, atol=1e-7)
    with pytest.raises(TypeError, match="from_embedding"):
        quantize(DenseEmbedding(5, 2))


def test_ptq_trains_fp32_then_packs_to_the_values_from_embedding_gives():
    table = QuantizedEmbedding(100, 16, "int4", padding_idx=0, mode="ptq")
    assert table.storage_dtype == "float32" and table.weight.shape == [100, 16]
    expected = QuantizedEmbedding.from_embedding(table, "int4")(paddle.arange(100)).numpy()
    table.pack()
    assert table.packed and "weight" not in dict(table.named_parameters())
    np.testing.assert_array_equal(table(paddle.arange(100)).numpy(), expected)
    assert table.estimated_bytes() == 100 * (8 + 4)


def test_packing_hands_memory_back_after_a_master_of_a_mebibyte_or_more(monkeypatch):
    import paddle_edo.nn.quantized as quantized

    released = []
    monkeypatch.setattr(quantized, "release_freed_memory", lambda: released.append(True))
    QuantizedEmbedding(4095, 64, "int8", mode="ptq").pack()       # 4095 x 64 x 4 bytes: just under 1 MiB
    assert released == []
    QuantizedEmbedding(4096, 64, "int8", mode="ptq").pack()
    assert released == [True]


def test_qat_lookups_are_fake_quantized_and_gradients_stay_sparse():
    table = QuantizedEmbedding(100, 16, "int2", padding_idx=0, mode="qat")
    ids = paddle.to_tensor([1, 5, 5, 0])
    out = table(ids)
    served = QuantizedEmbedding.from_embedding(table, "int2")(ids)
    np.testing.assert_array_equal(out.numpy(), served.numpy())
    out.sum().backward()
    grad = table.weight._grad_ivar()
    assert grad.is_selected_rows()


def test_low_precision_updates_only_touched_rows_and_learns():
    paddle.seed(0)
    table = QuantizedEmbedding(50, 8, "int8", padding_idx=0, mode="low_precision", init_std=0.1)
    assert [n for n, _ in table.named_parameters()] == []
    with pytest.raises(RuntimeError, match="configure_row_optimizer"):
        table(paddle.to_tensor([1]))
    table.configure_row_optimizer("sgd")
    target = paddle.full([8], 0.5)
    before = table.dequantize().weight.numpy()
    for _ in range(60):
        out = table(paddle.to_tensor([[3, 4, 0], [4, 4, 0]]))
        ((out[:, :2] - target) ** 2).sum().backward()
        table.apply_row_updates(0.05)
    after = table.dequantize().weight.numpy()
    changed = np.flatnonzero((after != before).any(1)).tolist()
    assert changed == [3, 4]
    np.testing.assert_allclose(after[[3, 4]], 0.5, atol=0.01)
    np.testing.assert_array_equal(after[0], np.zeros(8, np.float32))


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "int8"])
def test_low_precision_keeps_small_updates_on_average(dtype):
    # an update far below the format's resolution survives in expectation thanks to stochastic rounding
    paddle.seed(3)
    table = QuantizedEmbedding(2000, 4, dtype, mode="low_precision", init_std=0.0)
    table.configure_row_optimizer("sgd")
    with paddle.no_grad():
        base = table.decode_rows(paddle.arange(2000))
    ids = paddle.arange(1, 2000)
    for _ in range(10):
        table(ids).sum().backward()  # gradient 1 for every element
        table.apply_row_updates(1e-4)
    moved = (table.dequantize().weight.numpy()[1:] - base.numpy()[1:]).mean()
    assert moved == pytest.approx(-1e-3, rel=0.1)


def test_adagrad_row_state_is_one_float_per_row_and_counted():
    table = QuantizedEmbedding(30, 8, "fp16", mode="low_precision")
    table.configure_row_optimizer("adagrad")
    assert table.row_sum_sq.shape == [30]
    report = memory_report(paddle.nn.Sequential(table))
    assert report.tables[0].estimated_bytes == report.tables[0].held_bytes == 30 * 8 * 2 + 30 * 4
    table(paddle.to_tensor([2, 2])).sum().backward()
    table.apply_row_updates(0.1)
    state = table.row_sum_sq.numpy()
    assert state[2] == pytest.approx(4.0) and (np.delete(state, 2) == 0).all()  # (1 + 1)^2 averaged over dims


def test_bad_arguments_name_the_layer_and_what_is_allowed():
    with pytest.raises(ValueError, match="storage_format = 'int3' is not supported; supported: fp16, bf16"):
        QuantizedEmbedding(10, 4, "int3")
    with pytest.raises(ValueError, match="mode = 'fast' is not supported"):
        QuantizedEmbedding(10, 4, "int8", mode="fast")
    with pytest.raises(ValueError, match="'low_precision' stores fp16, bf16, int8 tables"):
        QuantizedEmbedding(10, 4, "int4", mode="low_precision")
    with pytest.raises(ValueError, match="output_dtype = 'int8' is not supported; supported: float32, float16, "
                                         "bfloat16"):
        QuantizedEmbedding(10, 4, "int8", output_dtype="int8")
    table = QuantizedEmbedding(10, 4, "int8", mode="low_precision")
    with pytest.raises(ValueError, match="sgd or adagrad, not 'adam'"):
        table.configure_row_optimizer("adam")
    with pytest.raises(TypeError, match="quantized_embedding.*int32 or int64, got float32"):
        table(paddle.to_tensor([1.5]))
    with pytest.raises(IndexError, match=r"id 10 is out of range \[0, 10\)"):
        table.eval()
        table(paddle.to_tensor([10]))


def test_nan_inf_and_overflowing_rows_are_named():
    source = dense(20, 4)
    with paddle.no_grad():
        source.weight[3, 1] = float("nan")
        source.weight[11, 0] = float("inf")
    with pytest.raises(ValueError, match=r"rows \[3, 11\] \(2 in all\) hold NaN or Inf"):
        QuantizedEmbedding.from_embedding(source, "int8")
    big = dense(20, 4)
    with paddle.no_grad():
        big.weight[7, 2] = 1e6
    with pytest.raises(ValueError, match=r"rows \[7\] .* beyond \+-65504"):
        QuantizedEmbedding.from_embedding(big, "int4")
    assert QuantizedEmbedding.from_embedding(big, "bf16").storage_dtype == "bf16"


def test_a_checkpoint_of_another_dtype_is_refused():
    int8 = paddle.nn.Sequential(QuantizedEmbedding.from_embedding(dense(40, 8), "int8"))
    int4 = paddle.nn.Sequential(QuantizedEmbedding.from_embedding(dense(40, 8), "int4"))
    fp16 = paddle.nn.Sequential(QuantizedEmbedding.from_embedding(dense(40, 8), "fp16"))
    with pytest.raises(CheckpointError, match="needs '0.int4_codes'.*has '0.int8_codes'"):
        load_model_state(int4, int8.state_dict())
    with pytest.raises(CheckpointError, match="needs '0.fp16_codes'"):
        load_model_state(fp16, int8.state_dict())
    other = paddle.nn.Sequential(QuantizedEmbedding.from_embedding(dense(40, 16), "int8"))
    with pytest.raises(CheckpointError, match=r"'0.int8_codes' is int8\[40, 16\] in the checkpoint, but the model holds int8\[40, 8\]"):
        load_model_state(int8, other.state_dict())
    copy = paddle.nn.Sequential(QuantizedEmbedding.from_embedding(dense(40, 8, seed=5), "int8"))
    load_model_state(copy, int8.state_dict())
    np.testing.assert_array_equal(copy[0].codes.numpy(), int8[0].codes.numpy())


def test_quantize_reports_each_tables_error_weighted_by_frequency():
    paddle.seed(4)
    model = paddle.nn.Sequential(paddle.nn.Embedding(300, 16), paddle.nn.Embedding(200, 16))
    weight = model[0].weight.numpy().copy()
    weight[:10] *= 50.0                         # a few rows far larger than the rest
    model[0].weight.set_value(weight)
    counts = np.zeros(300)
    counts[:10] = 1.0                           # and only they occur
    _, errors = quantize(model, "int4", report=True, frequencies={"0": counts})
    by_name = {e.name: e for e in errors}
    assert set(by_name) == {"0", "1"} and by_name["0"].frequency_weighted and not by_name["1"].frequency_weighted
    decoded = model[0].dequantize().weight.numpy()
    row_errors = np.linalg.norm(decoded - weight, axis=1) / np.linalg.norm(weight, axis=1)
    assert by_name["0"].relative_l2 == pytest.approx(row_errors[:10].mean(), rel=1e-5)
    assert by_name["0"].bytes_before == 300 * 16 * 4 and by_name["0"].bytes_after == 300 * (8 + 4)
    report = memory_report(model)
    assert report.tables[1].error == pytest.approx(by_name["1"].relative_l2)
    assert "error" in str(report) and f"{by_name['1'].relative_l2:.4f}" in str(report)


@pytest.mark.parametrize("name", ["int4", "int2"])
def test_searched_ranges_pack_closer_than_min_max_and_decode_the_same_way(name):
    rng = np.random.default_rng(2)
    source = paddle.nn.Embedding(2000, 32)
    weight = rng.standard_t(3, (2000, 32)).astype(np.float32) * 0.05   # heavy tails: outliers spend min-max codes
    source.weight.set_value(weight)
    searched = QuantizedEmbedding.from_embedding(source, name)         # 'auto' searches at int4 and int2
    min_max = QuantizedEmbedding.from_embedding(source, name, row_range="min_max")
    assert searched.packing_error < min_max.packing_error
    assert searched.row_params.shape == min_max.row_params.shape and searched.codes.shape == min_max.codes.shape
    ids = paddle.to_tensor(np.arange(2000))
    with paddle.no_grad():
        decoded = searched(ids).numpy()
    expected = searched.codes.numpy()  # the stored format is unchanged: decoding is the codecs' own
    from paddle_edo.quant import codecs
    np.testing.assert_array_equal(decoded, codecs.decode(paddle.to_tensor(expected), searched.row_params,
                                                         FORMATS[name], 32).numpy())
    with pytest.raises(ValueError, match="row_range = 'best' is not supported; supported: auto, search, min_max"):
        QuantizedEmbedding(10, 4, name, row_range="best")


@pytest.mark.parametrize("output_dtype", ["float16", "bfloat16"])
def test_half_outputs_keep_their_dtype_under_sot_and_for_an_empty_batch(output_dtype):
    packed = QuantizedEmbedding.from_embedding(DenseEmbedding(100, 16), "int8", output_dtype=output_dtype)
    packed.eval()
    ids = paddle.to_tensor(np.random.default_rng(0).integers(0, 100, (8, 3)))
    empty = paddle.zeros([0, 3], dtype="int64")
    sot = paddle.jit.to_static(packed)  # the default mode, as users call it
    expected = paddle.cast(packed(ids), "float32").numpy()
    np.testing.assert_array_equal(paddle.cast(sot(ids), "float32").numpy(), expected)
    for lookup in (packed, sot):
        out = lookup(empty)
        assert out.dtype == getattr(paddle, output_dtype) and out.shape == [0, 3, 16]
    qat = QuantizedEmbedding(100, 16, "int4", mode="qat", output_dtype=output_dtype)
    optimizer = paddle.optimizer.Adam(1e-2, parameters=qat.parameters(), lazy_mode=True)
    before = qat.weight.numpy()
    for layer in (qat, paddle.jit.to_static(qat)):  # a training step in dygraph, then under SOT
        paddle.cast(layer(ids), "float32").square().sum().backward()
        optimizer.step()
        optimizer.clear_grad()
        assert layer(empty).dtype == getattr(paddle, output_dtype)
    assert not np.array_equal(qat.weight.numpy(), before)


@pytest.mark.parametrize("name", ["fp16", "bf16", "int8", "int4"])
def test_packing_by_the_native_kernels_gives_the_composite_codecs_bytes(name):
    """Rows packed on the CPU (native encode) hold the values codecs.encode makes, from rows of 1e-9 to 1e4
    (below fp16's smallest step too, where a negative value may round to +0 where the composite ops give -0)."""
    from paddle_edo.kernels import fused_ops
    from paddle_edo.quant import codecs
    from paddle_edo.quant.formats import get_format
    if fused_ops() is None:
        pytest.skip("the native kernels cannot be built here")
    rng = np.random.default_rng(4)
    rows = (rng.normal(0, 1, [300, 24]) * 10.0 ** rng.integers(-9, 4, [300, 1])).astype("float32")
    rows[0, :3] = [6.5e4, -6.5e4, 6e-9]
    table = QuantizedEmbedding.from_embedding(paddle.nn.Embedding(300, 24, weight_attr=paddle.ParamAttr(
        initializer=paddle.nn.initializer.Assign(rows))), name, row_range="min_max")
    codes, params = codecs.encode(paddle.to_tensor(rows), get_format(name))
    np.testing.assert_array_equal(table.codes.numpy().astype(np.float32), codes.numpy().astype(np.float32))
    if params is not None:
        np.testing.assert_array_equal(table.row_params.numpy(), params.numpy())
