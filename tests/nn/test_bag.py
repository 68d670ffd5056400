"""EmbeddingBag and pooled_lookup: every mode and layout, fused and composite, gradients, every table
type, to_static and Paddle Inference, bad input."""
import numpy as np
import paddle
import pytest

import paddle_edo.kernels as kernels
from paddle_edo.errors import EdoValueError
from paddle_edo.export import Predictor
from paddle_edo.nn import (CachedEmbedding, DenseEmbedding, EmbeddingBag, HashEmbedding, MixedDimEmbedding,
                           QREmbedding, QuantizedEmbedding, bind_optimizer, pooled_lookup)
from paddle_edo.quant import FORMATS

N, D = 120, 6


def padded_ids(seed=0, bags=40, length=5):
    ids = np.random.default_rng(seed).integers(0, N, (bags, length)).astype(np.int64)
    ids[0] = 0            # a bag of padding only
    ids[1, 1:] = 0        # one id
    ids[2, :2] = [7, 7]   # a repeated id
    return ids


def reference(table_rows, ids, mode, weights=None, padding_idx=0):
    """numpy pooling of rows [..., L, D] by the ids [..., L]."""
    keep = (ids != padding_idx) if padding_idx is not None else np.ones(ids.shape, bool)
    factor = keep * (1.0 if weights is None else weights)
    if mode == "max":
        best = np.where(keep[..., None], table_rows, -np.inf).max(axis=-2)
        return np.where(keep.any(axis=-1, keepdims=True), best, 0.0).astype(np.float32)
    summed = (table_rows * factor[..., None]).sum(axis=-2)
    if mode == "mean":
        summed = summed / np.maximum(keep.sum(axis=-1, keepdims=True), 1)
    return summed.astype(np.float32)


def to_offsets(ids):
    """Padded bags -> flat ids and starts (padding ids stay in, as entries to skip)."""
    return paddle.to_tensor(ids.reshape(-1)), paddle.to_tensor(np.arange(0, ids.size, ids.shape[1]))


@pytest.fixture(params=["fused", "composite"])
def path(request, monkeypatch):
    if request.param == "composite":
        monkeypatch.setitem(kernels._loaded, kernels.NAME, None)
    else:
        assert kernels.fused_ops() is not None
    return request.param


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("layout", ["padded", "offsets"])
def test_pooling_equals_the_reference(path, mode, layout):
    paddle.seed(0)
    bag = EmbeddingBag(N, D, mode, padding_idx=0, init_std=0.5)
    ids = padded_ids()
    with paddle.no_grad():
        out = bag(paddle.to_tensor(ids)) if layout == "padded" else bag(*to_offsets(ids))
    expected = reference(bag.table.weight.numpy()[ids], ids, mode)
    assert out.shape == [40, D]
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6, atol=1e-6)
    assert not out.numpy()[0].any()  # a bag of padding only gives zeros


def test_weighted_sums_and_uneven_bags_with_offsets(path):
    paddle.seed(1)
    bag = EmbeddingBag(N, D, "sum")
    flat = np.array([3, 9, 9, 4, 5, 6, 7, 8], dtype=np.int64)
    starts = np.array([0, 3, 3, 4], dtype=np.int64)  # bags of 3, 0, 1 and 4 ids
    weights = np.linspace(0.5, 2.0, 8).astype(np.float32)
    with paddle.no_grad():
        out = bag(paddle.to_tensor(flat), paddle.to_tensor(starts), paddle.to_tensor(weights)).numpy()
    rows = bag.table.weight.numpy()[flat] * weights[:, None]
    expected = np.stack([rows[0:3].sum(0), np.zeros(D), rows[3:4].sum(0), rows[4:8].sum(0)])
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("layout", ["padded", "offsets"])
def test_the_gradient_is_the_dense_references_and_holds_each_row_once_in_order(path, mode, layout):
    paddle.seed(2)
    bag = EmbeddingBag(N, D, mode, padding_idx=0, init_std=0.5)
    reference_table = paddle.create_parameter([N, D], "float32")
    reference_table.set_value(bag.table.weight.numpy())
    ids = padded_ids(3)
    upstream = paddle.to_tensor(np.random.default_rng(4).normal(size=(40, D)).astype(np.float32))
    out = bag(paddle.to_tensor(ids)) if layout == "padded" else bag(*to_offsets(ids))
    (out * upstream).sum().backward()
    if mode == "max":  # each output value's gradient to the one row it came from (a repeated id: once)
        expected = np.zeros((N, D), np.float32)
        weight, g = reference_table.numpy(), upstream.numpy()
        for b, bag_ids in enumerate(ids):
            kept = [i for i in bag_ids if i != 0]
            for d in range(D):
                if kept:
                    expected[max(kept, key=lambda i: weight[i, d]), d] += g[b, d]
    else:
        rows = paddle.gather(reference_table, paddle.to_tensor(ids.reshape(-1))).reshape([40, 5, D])
        keep = paddle.to_tensor((ids != 0).astype(np.float32)).unsqueeze(-1)
        pooled = (rows * keep).sum(axis=1)
        if mode == "mean":
            pooled = pooled / paddle.clip(keep.sum(axis=1), min=1.0)
        (pooled * upstream).sum().backward()
        expected = reference_table.grad.numpy()
    grad = bag.table.weight._grad_ivar()
    assert grad.is_selected_rows()
    row_ids = np.array(grad.rows())
    assert (np.diff(row_ids) > 0).all() and set(row_ids) == set(ids.reshape(-1))
    dense = np.zeros((N, D), np.float32)
    dense[row_ids] = grad._get_tensor_from_selected_rows().numpy()
    np.testing.assert_allclose(dense, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_a_large_batchs_gradient_adds_each_rows_entries_in_their_order(mode):
    """Many blocks of gradient rows and threads: each distinct row's gradient is its entries' products
    added in the order of the entries, bit for bit (numpy's add.at adds in that order)."""
    rows, dim, bags = 30_000, 6, 4_000
    rng = np.random.default_rng(6)
    lengths = rng.integers(0, 12, bags)
    ids = rng.integers(0, rows, lengths.sum()).astype(np.int64)
    ids[rng.random(ids.size) < 0.05] = 0  # padding entries, skipped
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    weights = rng.uniform(0.5, 2.0, ids.size).astype(np.float32) if mode == "sum" else None
    bag = EmbeddingBag(rows, dim, mode, padding_idx=0, init_std=0.5)
    upstream = rng.normal(size=(bags, dim)).astype(np.float32)
    out = bag(paddle.to_tensor(ids), paddle.to_tensor(starts),
              None if weights is None else paddle.to_tensor(weights))
    (out * paddle.to_tensor(upstream)).sum().backward()
    bag_of = np.repeat(np.arange(bags), lengths)
    kept = ids != 0
    counts = np.bincount(bag_of[kept], minlength=bags).astype(np.float32)
    factor = (np.ones(ids.size, np.float32) if weights is None else weights)
    if mode == "mean":
        factor = factor * (np.float32(1) / np.maximum(counts, 1))[bag_of]
    expected = np.zeros((rows, dim), np.float32)
    np.add.at(expected, ids[kept], factor[kept, None] * upstream[bag_of[kept]])
    grad = bag.table.weight._grad_ivar()
    row_ids = np.array(grad.rows())
    assert (np.diff(row_ids) > 0).all() and set(row_ids) == set(ids)
    np.testing.assert_array_equal(grad._get_tensor_from_selected_rows().numpy(), expected[row_ids])


def test_training_steps_equal_a_lookup_then_pooling_with_lazy_adam():
    paddle.seed(5)
    bag = EmbeddingBag(N, D, "mean", padding_idx=0, init_std=0.5)
    plain = paddle.nn.Embedding(N, D, padding_idx=0, sparse=True)
    plain.weight.set_value(bag.table.weight.numpy())
    opt_bag = paddle.optimizer.Adam(0.05, parameters=bag.parameters(), lazy_mode=True)
    opt_plain = paddle.optimizer.Adam(0.05, parameters=plain.parameters(), lazy_mode=True)
    for step in range(4):
        ids = paddle.to_tensor(padded_ids(10 + step))
        keep = (ids != 0).astype("float32")
        pooled = (plain(ids) * keep.unsqueeze(-1)).sum(axis=1) / paddle.clip(keep.sum(axis=1, keepdim=True), min=1.0)
        for out, opt in ((bag(ids), opt_bag), (pooled, opt_plain)):
            (out ** 2).sum().backward()
            opt.step()
            opt.clear_grad()
    every = np.arange(1, N)  # the padding row: see docs/guides/paddle-facts.md on Paddle's sparse gradient of padding rows
    np.testing.assert_allclose(bag.table.weight.numpy()[every], plain.weight.numpy()[every], rtol=1e-5, atol=1e-6)


TABLES = {
    "int8 packed": lambda: QuantizedEmbedding.from_embedding(DenseEmbedding(N, D, init_std=0.5), "int8"),
    "hash": lambda: HashEmbedding(40, D, 40),
    "qr": lambda: QREmbedding(N, D, 11),
    "mixed_dim": lambda: MixedDimEmbedding(N, D, np.arange(N)[::-1].astype(float)),
    "cached": lambda: CachedEmbedding(N, D, cache_rows=30),
}


@pytest.mark.parametrize("kind", list(TABLES))
@pytest.mark.parametrize("layout", ["padded", "offsets"])
def test_every_table_type_pools_through_its_own_lookup(kind, layout):
    paddle.seed(6)
    table = TABLES[kind]()
    bag = EmbeddingBag(table.num_embeddings if kind != "hash" else N, D, "sum", padding_idx=0, table=table) \
        if kind != "hash" else EmbeddingBag(40, D, "sum", padding_idx=0, table=table)
    if kind == "cached":
        bind_optimizer(bag, paddle.optimizer.Adam(0.01, parameters=bag.parameters(), lazy_mode=True))
    ids = padded_ids(7) % bag.num_embeddings
    with paddle.no_grad():
        rows = table(paddle.to_tensor(ids)).numpy()
        out = bag(paddle.to_tensor(ids)) if layout == "padded" else bag(*to_offsets(ids))
    np.testing.assert_allclose(out.numpy(), reference(rows, ids, "sum"), rtol=1e-5, atol=1e-6)
    trained = bag(paddle.to_tensor(ids))  # and in training, through the table's own gradient
    (trained ** 2).sum().backward()


def test_empty_batches_and_empty_bags(path):
    bag = EmbeddingBag(N, D, "max", padding_idx=0)
    assert bag(paddle.zeros([0, 4], dtype="int64")).shape == [0, D]
    out = bag(paddle.to_tensor([5], dtype="int64"), paddle.to_tensor([0, 1, 1], dtype="int64"))
    assert out.shape == [3, D] and not out.numpy()[1:].any()
    assert bag(paddle.to_tensor([[4]])).shape == [1, D]


@pytest.mark.parametrize("layout", ["padded", "offsets"])
def test_bags_under_no_grad_record_no_backward(path, layout):
    # Paddle records a custom operator's backward under no_grad too; a bag that recorded one would keep its
    # table's gradient path alive and take a gradient from a later backward
    bag = EmbeddingBag(N, D, "sum")
    ids = paddle.to_tensor([[1, 2], [3, 4]])
    with paddle.no_grad():
        out = bag(ids) if layout == "padded" else bag(ids.reshape([-1]), paddle.to_tensor([0, 2]))
    assert out.stop_gradient
    assert not bag(ids).stop_gradient  # and with gradients on, it records one


@pytest.mark.parametrize("full_graph", [False, True])
def test_an_empty_batch_of_bags_under_to_static(path, full_graph):
    static = paddle.jit.to_static(EmbeddingBag(N, D, "sum", padding_idx=0), full_graph=full_graph)
    out = static(paddle.zeros([0, 4], dtype="int64"))
    assert out.shape == [0, D] and out.dtype == paddle.float32


@pytest.mark.parametrize("mode", ["sum", "max"])
def test_to_static_and_paddle_inference_serve_the_same_bags(tmp_path, mode):
    from tests.sot_graphs import compile_every_graph

    paddle.seed(8)
    bag = EmbeddingBag(N, D, mode, padding_idx=0, init_std=0.5)
    bag.eval()
    ids = paddle.to_tensor(padded_ids(9))
    with paddle.no_grad():
        eager = bag(ids).numpy()
        with compile_every_graph():
            np.testing.assert_allclose(paddle.jit.to_static(bag)(ids).numpy(), eager, rtol=1e-6, atol=1e-6)
        spec = [paddle.static.InputSpec([None, None], "int64", name="ids")]
        static = paddle.jit.to_static(bag, input_spec=spec, full_graph=True)
        np.testing.assert_allclose(static(ids).numpy(), eager, rtol=1e-6, atol=1e-6)
        paddle.jit.save(static, str(tmp_path / "bag"))
        with kernels.fused_static_programs():
            fused = paddle.jit.to_static(EmbeddingBag(N, D, mode, padding_idx=0, table=bag.table), input_spec=spec,
                                         full_graph=True)
            paddle.jit.save(fused, str(tmp_path / "fused"))
    for prefix in ("bag", "fused"):
        served = Predictor(tmp_path / prefix, device="cpu").run([ids.numpy()])
        np.testing.assert_allclose(served, eager, rtol=1e-6, atol=1e-6, err_msg=prefix)


def test_bad_input_is_refused_naming_the_layer_and_the_value(path):
    bag = EmbeddingBag(N, D, "sum")
    name = bag.full_name()
    flat = paddle.to_tensor([1, 2, 3])
    with pytest.raises(IndexError, match=f"id {N} is out of range"):
        bag(paddle.to_tensor([[1, N]]))
    with pytest.raises(EdoValueError, match=rf"{name}: offsets\[0\] = 1; the first bag starts at 0"):
        bag(flat, paddle.to_tensor([1, 2]))
    with pytest.raises(EdoValueError, match=r"offsets\[2\] = 1 is below offsets\[1\] = 2"):
        bag(flat, paddle.to_tensor([0, 2, 1]))
    with pytest.raises(EdoValueError, match=r"offsets\[1\] = 4 is past the end of the 3 ids"):
        bag(flat, paddle.to_tensor([0, 4]))
    with pytest.raises(EdoValueError, match=r"per_sample_weights of shape \[2\], expected the ids' \[3\]"):
        bag(flat, paddle.to_tensor([0]), paddle.to_tensor([1.0, 2.0]))
    with pytest.raises(EdoValueError, match="need offsets, or a padded shape"):
        bag(flat)
    with pytest.raises(EdoValueError, match="per_sample_weights weight a sum; mode is 'mean'"):
        pooled_lookup(bag.table, flat, paddle.to_tensor([0]), paddle.to_tensor([1.0, 1.0, 1.0]), mode="mean")
    with pytest.raises(EdoValueError, match="mode = 'median'; expected one of 'sum', 'mean', 'max'"):
        EmbeddingBag(N, D, "median")
    with pytest.raises(EdoValueError, match="the table takes 50 ids of width 6, not 120 x 6"):
        EmbeddingBag(N, D, table=DenseEmbedding(50, D))
    with pytest.raises(TypeError, match="ids must be int32 or int64, got float32"):
        bag(paddle.to_tensor([[1.0, 2.0]]))
    half = QuantizedEmbedding.from_embedding(DenseEmbedding(N, D), "int8", output_dtype="float16")
    with pytest.raises(EdoValueError, match=f"bags pool fp32 rows; {half.full_name()} has output_dtype 'float16'"):
        EmbeddingBag(N, D, "sum", table=half)(paddle.to_tensor([[1, 2]]))


@pytest.mark.parametrize("table", ["fp32", "int8"])
@pytest.mark.parametrize("gradients", [False, True])
def test_a_bag_kernel_refuses_bad_ids_naming_the_table(table, gradients):
    # without gradients the kernel checks the ids itself (the layer scans none first) and its refusal
    # comes as the table's error; an fp32 table training is checked before its distinct rows are gathered
    dense = DenseEmbedding(N, 16)
    table = dense if table == "fp32" else QuantizedEmbedding.from_embedding(dense, table)
    bag = EmbeddingBag(N, 16, "sum", table=table)
    with paddle.set_grad_enabled(gradients):
        for bad in (N, -1):
            with pytest.raises(IndexError, match=rf"{table.full_name()}: id {bad} is out of range \[0, {N}\)"):
                bag(paddle.to_tensor([[1, bad]]))
            with pytest.raises(IndexError, match=rf"{table.full_name()}: id {bad} is out of range"):
                bag(paddle.to_tensor([1, bad]), paddle.to_tensor([0]))


@pytest.mark.parametrize("dim", [D, 16, 72, 80])  # the scalar loop; sums in registers: one chunk, chunks and a part
@pytest.mark.parametrize("table", ["fp32", *FORMATS])
@pytest.mark.parametrize("mode, padding_idx, weighted", [("sum", 0, True), ("sum", 0, False), ("sum", None, True),
                                                         ("sum", None, False), ("mean", 0, False),
                                                         ("mean", None, False), ("max", 0, False)])
def test_the_kernels_and_the_composite_ops_pool_the_same_bits(monkeypatch, table, mode, padding_idx, weighted, dim):
    # both add a bag's rows one after another and divide a mean once: bit for bit, with and without
    # weights and a padding id (each a path of its own in the kernels)
    paddle.seed(9)
    dense = DenseEmbedding(N, dim, padding_idx=padding_idx, init_std=0.5)
    bag = EmbeddingBag(N, dim, mode, padding_idx=padding_idx,
                       table=dense if table == "fp32" else QuantizedEmbedding.from_embedding(dense, table))
    ids = padded_ids(11, bags=300, length=7)
    weights = paddle.to_tensor(np.random.default_rng(1).random(ids.shape).astype(np.float32)) if weighted else None
    flat, starts = to_offsets(ids)

    def pooled():
        with paddle.no_grad():
            return (bag(paddle.to_tensor(ids), per_sample_weights=weights).numpy(),
                    bag(flat, starts, None if weights is None else weights.reshape([-1])).numpy())
    fused = pooled()
    monkeypatch.setitem(kernels._loaded, kernels.NAME, None)
    for kernel, composite in zip(fused, pooled()):
        np.testing.assert_array_equal(kernel, composite)
