"""Deduplicated training lookups: a gradient of distinct sorted rows, and the same training."""
import numpy as np
import paddle
import pytest

from paddle_edo import kernels
from paddle_edo.compat import PADDLE_MAJOR
from paddle_edo.nn import (CachedEmbedding, DenseEmbedding, HashEmbedding, MixedDimEmbedding, QREmbedding,
                           QuantizedEmbedding, bind_optimizer)
from paddle_edo.nn.dedup import unique_ids


@pytest.fixture(params=["native", "paddle.unique"])
def kernel(request, monkeypatch):
    if request.param == "native":
        assert kernels.fused_ops() is not None  # built by `make test`
    else:
        monkeypatch.setattr("paddle_edo.nn.dedup.fused_ops", lambda: None)
    return request.param


@pytest.mark.parametrize("shape", [(0,), (7,), (64, 5), (3, 4, 2), (300, 700)])  # the last: threads
@pytest.mark.parametrize("spread", ["narrow", "wide"])  # the kernel's bitmap over the ids' span, or its hash table
def test_unique_ids_are_sorted_and_index_every_id(kernel, shape, spread):
    ids = np.random.default_rng(0).zipf(1.3, shape) % 50 - 10  # negatives too
    if spread == "wide":
        ids = ids * 10 ** 17
        ids.flat[:2] = [np.iinfo(np.int64).min, np.iinfo(np.int64).max][:ids.size]
    unique, inverse = unique_ids(paddle.to_tensor(ids if spread == "wide" else ids.astype(np.int32)))
    np.testing.assert_array_equal(unique.numpy(), np.unique(ids))
    assert inverse.shape == list(shape) and unique.dtype == inverse.dtype == paddle.int64
    np.testing.assert_array_equal(unique.numpy()[inverse.numpy()], ids)


def test_the_gradient_holds_each_looked_up_row_once_in_increasing_order(kernel):
    table = DenseEmbedding(10, 3, padding_idx=0)
    ids = paddle.to_tensor([[7, 2, 7], [0, 2, 7]])
    weights = paddle.arange(18, dtype="float32").reshape([2, 3, 3])
    out = table(ids)
    np.testing.assert_array_equal(out.numpy(), table.weight.numpy()[ids.numpy()])
    (out * weights).sum().backward()
    grad = table.weight._grad_ivar()
    assert grad.is_selected_rows() and grad.rows() == [0, 2, 7]
    values = grad._get_tensor_from_selected_rows().numpy()
    w = weights.numpy()
    np.testing.assert_array_equal(values[1], w[0, 1] + w[1, 1])
    np.testing.assert_array_equal(values[2], w[0, 0] + w[0, 2] + w[1, 2])


def test_no_deduplication_without_gradient_or_when_turned_off():
    table = DenseEmbedding(10, 3)
    assert table.deduplicates()
    with paddle.no_grad():
        assert not table.deduplicates()
    assert not DenseEmbedding(10, 3, deduplicate=False).deduplicates()
    assert not DenseEmbedding(10, 3, sparse=False).deduplicates()
    table.weight.stop_gradient = True
    assert not table.deduplicates()


def layers():
    frequencies = np.arange(200)[::-1].astype(float)
    return {"dense": lambda: DenseEmbedding(200, 8, padding_idx=0, init_std=0.5),
            "hash": lambda: HashEmbedding(37, 8, 37, padding_idx=0),
            "qr": lambda: QREmbedding(200, 8, 15, padding_idx=0),
            "mixed_dim": lambda: MixedDimEmbedding(200, 8, frequencies, padding_idx=0),
            "cached": lambda: CachedEmbedding(200, 8, cache_rows=120, padding_idx=0, init_std=0.5),
            "int8 qat": lambda: QuantizedEmbedding(200, 8, "int8", padding_idx=0, mode="qat", init_std=0.5),
            "int4 ptq": lambda: QuantizedEmbedding(200, 8, "int4", padding_idx=0, mode="ptq", init_std=0.5)}


def train(name, deduplicate, optimizer, steps=6):
    paddle.seed(0)
    layer = layers()[name]()
    for table in layer.sublayers(include_self=True):
        if hasattr(table, "deduplicate"):
            table.deduplicate = deduplicate
    parameters = layer.parameters()
    opt = (paddle.optimizer.Adam(0.01, parameters=parameters, lazy_mode=True) if optimizer == "adam"
           else paddle.optimizer.SGD(0.1, parameters=parameters))
    if name == "cached":
        bind_optimizer(layer, opt)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        ids = paddle.to_tensor(rng.zipf(1.3, (64, 5)) % 200)
        out = layer(ids)
        (out * paddle.to_tensor(rng.standard_normal(out.shape).astype("float32"))).sum().backward()
        opt.step()
        opt.clear_grad()
    if name == "cached":
        return [layer.state_dict()["weight"].numpy()]
    return [p.numpy() for p in parameters]


@pytest.mark.parametrize("name", list(layers()))
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_deduplicated_training_equals_training_on_every_lookup(name, optimizer):
    """Adam merges a gradient's duplicate rows in lookup order, as the deduplicated gather sums them: the
    same bits for one lookup per table. A hash table's two lookups are summed per column first, and SGD
    applies duplicates one by one: the same to float rounding (Paddle 3 adds them in another order: 4e-5
    relative after six steps of a QR table's products, seen)."""
    deduplicated, every_lookup = train(name, True, optimizer), train(name, False, optimizer)
    assert not np.array_equal(deduplicated[0], train(name, True, optimizer, steps=0)[0])  # it trained
    if name in ("dense", "cached", "int8 qat", "int4 ptq"):
        # the padding row: Paddle's sparse embedding gradient ignores padding_idx (Paddle 3 trains the row
        # when every id is looked up); the deduplicated lookup keeps it zero
        assert not deduplicated[0][0].any()
        deduplicated, every_lookup = [deduplicated[0][1:]], [every_lookup[0][1:]]
    for got, expected in zip(deduplicated, every_lookup):
        if optimizer == "adam" and name != "hash":
            np.testing.assert_array_equal(got, expected)
        else:
            np.testing.assert_allclose(got, expected, rtol=1e-5 if PADDLE_MAJOR < 3 else 1e-4, atol=1e-6)
