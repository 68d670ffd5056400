"""RowTrainer: tables outside a collection trained by a TableOptimizer from their own sparse gradients equal
Paddle's optimizers bit for bit, take the row-wise and compressed rules, and resume exactly."""
import numpy as np
import paddle
import pytest

from paddle_edo.errors import EdoValueError
from paddle_edo.kernels import fused_ops
from paddle_edo.nn import (CachedEmbedding, DenseEmbedding, HashEmbedding, MixedDimEmbedding, QREmbedding,
                           QuantizedEmbedding)
from paddle_edo.nn.row_trainer import RowTrainer, bind_row_trainer, row_trained_tables
from paddle_edo.optim import TableOptimizer

pytestmark = pytest.mark.skipif(fused_ops() is None, reason="the native kernels cannot be built here")


def paddle_optimizer(name, lr, parameters):
    if name == "adam":
        return paddle.optimizer.Adam(lr, parameters=parameters, lazy_mode=True)
    return {"sgd": paddle.optimizer.SGD, "adagrad": paddle.optimizer.Adagrad}[name](lr, parameters=parameters)


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("name", ["sgd", "adagrad", "adam"])
def test_a_table_trained_by_rows_equals_paddles_optimizer(name, sparse):
    paddle.seed(3)
    ours, theirs = DenseEmbedding(40, 8, sparse=sparse), DenseEmbedding(40, 8, sparse=sparse)
    theirs.weight.set_value(ours.weight.numpy())
    start = ours.weight.numpy().copy()
    trainer = RowTrainer(TableOptimizer(name, 0.05), {"t": ours})
    reference = paddle_optimizer(name, 0.05, [theirs.weight])
    rng = np.random.default_rng(0)
    for _ in range(4):
        ids = paddle.to_tensor(rng.integers(0, 40, (16, 3)))  # repeated ids: their rows summed in order
        upstream = paddle.to_tensor(rng.standard_normal((16, 3, 8)).astype("float32"))
        (ours(ids) * upstream).sum().backward()
        (theirs(ids) * upstream).sum().backward()
        trainer.step()
        trainer.clear_grad()
        reference.step()
        reference.clear_grad()
        assert ours.weight.grad is None
    if sparse:
        np.testing.assert_array_equal(ours.weight.numpy(), theirs.weight.numpy())
    elif name != "adam":  # a dense gradient: every row takes the rule (Paddle's dense kernels round in their order)
        np.testing.assert_allclose(ours.weight.numpy(), theirs.weight.numpy(), rtol=1e-5, atol=1e-7)
    else:  # every row moves, as non-lazy Adam's; its bias correction counts steps as Paddle's sparse Adam does
        assert np.all(ours.weight.numpy() != start)


@pytest.mark.parametrize("state_dtype", ["float32", "bfloat16", "int8"])
@pytest.mark.parametrize("rule", ["rowwise_adagrad", "rowwise_adam", "adam"])
def test_composite_tables_train_their_parts_by_rows_and_resume_exactly(rule, state_dtype):
    def model(seed):
        paddle.seed(seed)
        layer = paddle.nn.Layer()
        layer.hashed = HashEmbedding(1000, 8, 64, num_hashes=2)
        layer.qr = QREmbedding(500, 8, 16)
        layer.mixed = MixedDimEmbedding(500, 8, np.arange(500)[::-1].astype(float), num_blocks=2)
        return layer

    def train(layer, trainer, steps):
        for ids in steps:
            out = layer.hashed(ids) + layer.qr(ids % 500) + layer.mixed(ids % 500)
            (out * out).sum().backward()
            trainer.step()
            trainer.clear_grad()

    rng = np.random.default_rng(1)
    steps = [paddle.to_tensor(rng.integers(0, 1000, 32)) for _ in range(4)]
    optimizer = TableOptimizer(rule, 0.02, state_dtype=state_dtype)
    whole = model(1)
    names = sorted(row_trained_tables(whole))
    assert names == ["hashed.table", "mixed.blocks.0", "mixed.blocks.1", "qr.quotient", "qr.remainder"]
    start = whole.hashed.table.weight.numpy().copy()
    train(whole, bind_row_trainer(whole, optimizer), steps)
    assert not np.array_equal(whole.hashed.table.weight.numpy(), start)
    first = model(1)
    trainer = bind_row_trainer(first, optimizer)
    train(first, trainer, steps[:2])
    saved_weights = {k: v.numpy().copy() for k, v in first.state_dict().items()}
    saved_state = trainer.state_dict()
    resumed = model(2)
    resumed.set_state_dict({k: paddle.to_tensor(v) for k, v in saved_weights.items()})
    trainer = bind_row_trainer(resumed, optimizer)
    trainer.load(saved_state, "test")
    train(resumed, trainer, steps[2:])
    for key, value in whole.state_dict().items():
        np.testing.assert_array_equal(resumed.state_dict()[key].numpy(), value.numpy(), err_msg=key)
    assert trainer.state_held_bytes("qr.quotient") == optimizer.state_bytes(*resumed.qr.quotient.weight.shape)
    with pytest.raises(EdoValueError, match="belongs to no table trained by rows"):
        trainer.load({**saved_state, "other.state1": np.zeros(1)}, "test")


@pytest.mark.parametrize("rule, state_dtype", [("sgd", "float32"), ("adagrad", "bfloat16"), ("rowwise_adagrad", "float32"),
                                               ("adam", "int8"), ("adam", "float32"), ("rowwise_adam", "int8")])
def test_a_low_precision_table_takes_the_rule_as_an_fp32_table_of_its_rows_does(rule, state_dtype):
    """Each step, the rows a low_precision table re-encodes are, bit for bit, what the rule makes of an fp32
    table holding its decoded rows, and the two states are the same bytes."""
    paddle.seed(0)
    packed = QuantizedEmbedding(50, 8, "int8", "low_precision", padding_idx=0)
    dense = DenseEmbedding(50, 8, padding_idx=0)
    optimizer = TableOptimizer(rule, 0.05, state_dtype=state_dtype)
    by_rows, reference = RowTrainer(optimizer, {"t": packed}), RowTrainer(optimizer, {"t": dense})
    assert by_rows.parameters() == [] and packed.row_trainer == (by_rows, "t")
    written, write = [], packed._write_rows
    packed._write_rows = lambda ids, rows: (written.append((ids.numpy(), rows.numpy().copy())), write(ids, rows))
    rng = np.random.default_rng(1)
    for _ in range(4):
        paddle.assign(packed.decode_rows(paddle.arange(50)), dense.weight)
        ids = rng.integers(0, 50, [16, 3])
        ids[0, 0] = 0
        ids = paddle.to_tensor(ids)
        target = paddle.to_tensor(rng.normal(size=[16, 3, 8]).astype("float32"))
        for layer, trainer in ((packed, by_rows), (dense, reference)):
            ((layer(ids) - target) ** 2).mean().backward()
            trainer.step()
            trainer.clear_grad()
        rows, values = written[-1]
        assert 0 in rows  # the padding row is looked up, and left as it is
        np.testing.assert_array_equal(values[rows == 0], 0)
        np.testing.assert_array_equal(values, dense.weight.numpy()[rows])
        state, expected = by_rows.state_dict(), reference.state_dict()
        assert sorted(state) == sorted(expected)
        for key in state:
            np.testing.assert_array_equal(state[key], expected[key], err_msg=key)
    assert by_rows.state_held_bytes("t") == optimizer.state_bytes(50, 8)


def test_low_precision_tables_join_a_row_trainer_when_asked_and_resume_exactly():
    def model():
        paddle.seed(3)
        layer = paddle.nn.Layer()
        layer.packed = QuantizedEmbedding(300, 16, "fp16", "low_precision")
        layer.dense = DenseEmbedding(300, 16)
        return layer

    def train(layer, trainer, batches, first):
        for step, ids in enumerate(batches, first):
            paddle.seed(100 + step)  # the rounding noise of each step, as the engine draws it
            out = layer.packed(ids) * layer.dense(ids)
            (out * out).sum().backward()
            trainer.step()
            trainer.clear_grad()

    rng = np.random.default_rng(2)
    batches = [paddle.to_tensor(rng.integers(0, 300, 64)) for _ in range(4)]
    optimizer = TableOptimizer("adam", 0.01, state_dtype="int8")
    assert sorted(row_trained_tables(model())) == ["dense"]
    whole = model()
    assert sorted(row_trained_tables(whole, own_rules=True)) == ["dense", "packed"]
    start = whole.packed.codes.numpy().copy()
    train(whole, bind_row_trainer(whole, optimizer, own_rules=True), batches, 0)
    assert not np.array_equal(whole.packed.codes.numpy(), start)
    first = model()
    trainer = bind_row_trainer(first, optimizer, own_rules=True)
    train(first, trainer, batches[:2], 0)
    saved, state = {k: v.numpy().copy() for k, v in first.state_dict().items()}, trainer.state_dict()
    assert state["packed.state1"].dtype == np.int8 and state["packed.state1"].shape == (300, 16 + 4)
    resumed = model()
    resumed.set_state_dict({k: paddle.to_tensor(v) for k, v in saved.items()})
    trainer = bind_row_trainer(resumed, optimizer, own_rules=True)
    trainer.load(state, "test")
    train(resumed, trainer, batches[2:], 2)
    for key, value in whole.state_dict().items():
        np.testing.assert_array_equal(resumed.state_dict()[key].numpy(), value.numpy(), err_msg=key)


@pytest.mark.parametrize("host", ["memory", "mmap"])
@pytest.mark.parametrize("rule, state_dtype", [("rowwise_adagrad", "float32"), ("adam", "int8"),
                                               ("rowwise_adam", "bfloat16")])
def test_a_cached_table_trained_by_a_rule_equals_the_resident_table(rule, state_dtype, host, tmp_path):
    """Rows in the cache, evicted to the host and read past a full cache (more distinct ids than slots) all
    take the rule as a resident table's rows do, bit for bit, with the state of every row in the trainer."""
    paddle.seed(5)
    cached = CachedEmbedding(60, 8, cache_rows=12, padding_idx=0, host=host, path=tmp_path / "t.f32",
                             prefetch=False)
    dense = DenseEmbedding(60, 8, padding_idx=0)
    paddle.assign(paddle.to_tensor(cached.host.column("weight").copy()), dense.weight)
    optimizer = TableOptimizer(rule, 0.05, state_dtype=state_dtype)
    by_rows, reference = RowTrainer(optimizer, {"t": cached}), RowTrainer(optimizer, {"t": dense})
    assert by_rows.parameters() == [cached.cache] and cached.row_trainer == (by_rows, "t")
    rng = np.random.default_rng(4)
    for step in range(6):
        ids = paddle.to_tensor(rng.integers(0, 60, [8 if step % 2 else 20, 2]))  # 20 x 2 ids: past 12 slots
        target = paddle.to_tensor(rng.normal(size=[ids.shape[0], 2, 8]).astype("float32"))
        for layer, trainer in ((cached, by_rows), (dense, reference)):
            ((layer(ids) - target) ** 2).mean().backward()
            trainer.step()
            trainer.clear_grad()
    assert cached.stats.as_dict()["bypass_rows"] > 0 and cached.stats.as_dict()["evictions"] > 0
    cached.flush()
    np.testing.assert_array_equal(cached.host.column("weight"), dense.weight.numpy())
    state, expected = by_rows.state_dict(), reference.state_dict()
    for key in expected:
        np.testing.assert_array_equal(state[key], expected[key], err_msg=key)
    assert by_rows.state_held_bytes("t") == optimizer.state_bytes(60, 8)


def test_a_cached_table_joins_a_row_trainer_when_asked_and_resumes_exactly(tmp_path):
    def model():
        paddle.seed(3)
        layer = paddle.nn.Layer()
        layer.cached = CachedEmbedding(200, 8, cache_rows=40, prefetch=False)
        return layer

    def train(layer, trainer, batches):
        for ids in batches:
            (layer.cached(ids) ** 2).sum().backward()
            trainer.step()
            trainer.clear_grad()

    rng = np.random.default_rng(6)
    batches = [paddle.to_tensor(rng.integers(0, 200, 64)) for _ in range(4)]
    optimizer = TableOptimizer("rowwise_adagrad", 0.05, state_dtype="float32")
    assert row_trained_tables(model()) == {}
    whole = model()
    train(whole, bind_row_trainer(whole, optimizer, own_rules=True), batches)
    first = model()
    trainer = bind_row_trainer(first, optimizer, own_rules=True)
    train(first, trainer, batches[:2])
    saved, state = {k: v.numpy().copy() for k, v in first.state_dict().items()}, trainer.state_dict()
    assert sorted(saved) == ["cached.weight"] and state["cached.state1"].shape == (200,)
    resumed = model()
    resumed.cached.set_state_dict({"weight": saved["cached.weight"]})
    trainer = bind_row_trainer(resumed, optimizer, own_rules=True)
    trainer.load(state, "test")
    train(resumed, trainer, batches[2:])
    np.testing.assert_array_equal(resumed.state_dict()["cached.weight"].numpy(), whole.state_dict()["cached.weight"].numpy())
