"""EmbeddingCollection: one batched lookup and one fused backward equal per-table layers trained by Paddle's
optimizers, bit for bit; pooled and ragged bags; the optimizer state's round trip; bad input named."""
import numpy as np
import paddle
import pytest

from paddle_edo.errors import EdoIndexError, EdoKeyError, EdoTypeError, EdoValueError
from paddle_edo.kernels import fused_ops
from paddle_edo.nn import DenseEmbedding, EmbeddingCollection, HashEmbedding, QuantizedEmbedding
from paddle_edo.nn.collection import load_table_optimizer_state, table_optimizer_state
from paddle_edo.optim import TableOptimizer

pytestmark = pytest.mark.skipif(fused_ops() is None, reason="the native kernels cannot be built here")

ROWS = (50, 7, 1000, 300, 200)
DIMS = (4, 1, 8, 12, 16)  # widths below, at and above the vector lengths; SGD rounds two ways by width


def tables(padding_idx=0, seed=1):
    paddle.seed(seed)
    return {f"t{i}": DenseEmbedding(r, d, padding_idx=padding_idx) for i, (r, d) in enumerate(zip(ROWS, DIMS))}


def paddle_optimizer(name, lr, parameters):
    if name == "adam":
        return paddle.optimizer.Adam(lr, parameters=parameters, lazy_mode=True)
    return {"sgd": paddle.optimizer.SGD, "adagrad": paddle.optimizer.Adagrad}[name](lr, parameters=parameters)


def batches(rng, steps, batch=64, length=None):
    shape = (batch,) if length is None else (batch, length)
    return [[paddle.to_tensor(rng.integers(0, r, shape)) for r in ROWS] for _ in range(steps)]


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam"])
def test_the_fused_step_equals_per_table_layers_with_paddles_optimizer_bit_for_bit(optimizer):
    fused, plain = tables(), tables()
    collection = EmbeddingCollection(fused)
    assert collection.bind_optimizer(TableOptimizer(optimizer, 0.05)) == list(fused)
    reference = paddle_optimizer(optimizer, 0.05, [t.weight for t in plain.values()])
    rng = np.random.default_rng(0)
    for ids in batches(rng, 4):
        out = collection(ids)
        expected = paddle.concat([plain[k](x) for k, x in zip(plain, ids)], axis=1)
        np.testing.assert_array_equal(out.numpy(), expected.numpy())
        weights = paddle.to_tensor(rng.standard_normal(out.shape).astype("float32"))
        (out * weights).sum().backward()
        (expected * weights).sum().backward()
        reference.step()
        reference.clear_grad()
    for key in fused:  # the padding row: Paddle's sparse gradient trains it (no lookup reads it); ours stays 0
        np.testing.assert_array_equal(fused[key].weight.numpy()[1:], plain[key].weight.numpy()[1:])
        assert not fused[key].weight.numpy()[0].any()
        assert fused[key].weight.grad is None  # no gradient tensor: the rows were updated in the backward


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam"])
def test_weight_decay_is_l2_on_the_batchs_rows_only(optimizer):
    fused, plain = tables(padding_idx=None), tables(padding_idx=None)
    start = {key: table.weight.numpy().copy() for key, table in fused.items()}
    collection = EmbeddingCollection(fused)
    collection.bind_optimizer(TableOptimizer(optimizer, 0.05, weight_decay=0.3))
    reference = paddle_optimizer(optimizer, 0.05, [t.weight for t in plain.values()])
    rng = np.random.default_rng(7)
    touched = {key: set() for key in fused}
    for ids in batches(rng, 3):
        out = collection(ids)
        weights = paddle.to_tensor(rng.standard_normal(out.shape).astype("float32"))
        (out * weights).sum().backward()
        # Paddle's rule given g + 0.3 w on the batch's rows: each distinct row looked up once more with an
        # output gradient of 0.3 w (Paddle's own weight_decay would decay every row)
        loss = (paddle.concat([plain[k](x) for k, x in zip(plain, ids)], axis=1) * weights).sum()
        for key, x in zip(plain, ids):
            distinct = np.unique(x.numpy())
            touched[key].update(distinct.tolist())
            decay = paddle.to_tensor(np.float32(0.3) * plain[key].weight.numpy()[distinct])
            loss = loss + (plain[key](paddle.to_tensor(distinct)) * decay).sum()
        loss.backward()
        reference.step()
        reference.clear_grad()
    for key in fused:
        untouched = np.setdiff1d(np.arange(start[key].shape[0]), sorted(touched[key]))
        np.testing.assert_array_equal(fused[key].weight.numpy()[untouched], start[key][untouched])
        np.testing.assert_allclose(fused[key].weight.numpy(), plain[key].weight.numpy(), rtol=1e-6, atol=1e-8)


def test_a_table_optimizer_refuses_a_negative_weight_decay():
    with pytest.raises(EdoValueError, match="weight_decay = -0.1 must be >= 0"):
        TableOptimizer("adam", 0.01, weight_decay=-0.1)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_pooled_bags_skip_padding_and_train_as_pooled_lookups(mode):
    fused, plain = tables(), tables()
    collection = EmbeddingCollection(fused, pooling=mode)
    collection.bind_optimizer(TableOptimizer("adagrad", 0.1))
    reference = paddle_optimizer("adagrad", 0.1, [t.weight for t in plain.values()])
    reference_bags = EmbeddingCollection(plain, pooling=mode)  # no optimizer bound: each table's own pooling
    rng = np.random.default_rng(1)
    for ids in batches(rng, 3, batch=32, length=5):
        ids[0][0] = 0  # a bag of padding only gives zeros
        out = collection(ids)
        expected = reference_bags(ids)
        np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-6, atol=1e-7)
        assert not out.numpy()[0, :DIMS[0]].any()
        out.sum().backward()
        expected.sum().backward()
        reference.step()
        reference.clear_grad()
    for key in fused:
        np.testing.assert_allclose(fused[key].weight.numpy()[1:], plain[key].weight.numpy()[1:], rtol=1e-6, atol=1e-7)


def test_ragged_bags_by_offsets_equal_the_same_bags_padded():
    ragged, padded = EmbeddingCollection(tables(), "sum"), EmbeddingCollection(tables(), "sum")
    lengths = [3, 1, 4, 2]
    rng = np.random.default_rng(2)
    flat = [rng.integers(1, r, sum(lengths)) for r in ROWS]
    offsets = paddle.to_tensor(np.cumsum([0] + lengths[:-1]))
    grid = []
    for values in flat:
        rows = np.zeros((len(lengths), max(lengths)), dtype=np.int64)
        for b, (start, n) in enumerate(zip(np.cumsum([0] + lengths[:-1]), lengths)):
            rows[b, :n] = values[start:start + n]
        grid.append(paddle.to_tensor(rows))
    with paddle.no_grad():
        out = ragged([paddle.to_tensor(v) for v in flat], offsets=[offsets] * len(ROWS))
        np.testing.assert_array_equal(out.numpy(), padded(grid).numpy())


def test_rowwise_adagrad_keeps_one_accumulator_per_row():
    paddle.seed(3)
    table = DenseEmbedding(20, 4)
    start = table.weight.numpy().copy()
    collection = EmbeddingCollection({"t": table})
    collection.bind_optimizer(TableOptimizer("rowwise_adagrad", 0.5))
    ids = np.array([3, 5, 3])
    grad = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    (collection([paddle.to_tensor(ids)]) * paddle.to_tensor(grad)).sum().backward()
    summed = {3: grad[0] + grad[2], 5: grad[1]}
    accumulator = collection.optimizer_state()["t.state1"]
    assert accumulator.shape == (20,)
    for row, g in summed.items():
        g = g.astype(np.float32)
        assert accumulator[row] == np.float32(np.sum(g * g, dtype=np.float32) / np.float32(4))
        np.testing.assert_allclose(table.weight.numpy()[row], start[row] - 0.5 * g / (np.sqrt(accumulator[row]) + 1e-8),
                                   rtol=1e-6)
    assert accumulator[np.setdiff1d(np.arange(20), ids)].sum() == 0


@pytest.mark.parametrize("beta1", [0.9, 0.0])
def test_rowwise_adam_keeps_a_second_moment_per_row_and_a_first_per_value_or_none(beta1):
    paddle.seed(8)
    table = DenseEmbedding(30, 4)
    weight = table.weight.numpy().copy()
    collection = EmbeddingCollection({"t": table})
    optimizer = TableOptimizer("rowwise_adam", 0.1, beta1=beta1, beta2=0.99)
    collection.bind_optimizer(optimizer)
    state = collection.optimizer_state()
    assert state["t.state2"].shape == (30,) and ("t.state1" in state) == (beta1 > 0)
    assert optimizer.state_bytes(30, 4) == 4 * (30 + (120 if beta1 else 0) + 2)
    m, v, pows = np.zeros((30, 4), np.float32), np.zeros(30, np.float32), np.array([beta1, 0.99], np.float32)
    rng = np.random.default_rng(8)
    for _ in range(3):
        ids = rng.integers(0, 30, 12)
        grad = rng.standard_normal((12, 4)).astype(np.float32)
        (collection([paddle.to_tensor(ids)]) * paddle.to_tensor(grad)).sum().backward()
        for row in np.unique(ids):
            g = grad[ids == row].sum(axis=0)
            v[row] = 0.99 * v[row] + 0.01 * np.mean(g * g)
            m[row] = beta1 * m[row] + (1 - beta1) * g
            lr = 0.1 * np.sqrt(1 - pows[1]) / (1 - pows[0])
            weight[row] -= lr * m[row] / (np.sqrt(v[row]) + 1e-8 * np.sqrt(1 - pows[1]))
        pows *= np.array([beta1, 0.99], np.float32)  # t = 1 at the first step (Adam's own)
    np.testing.assert_allclose(table.weight.numpy(), weight, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(collection.optimizer_state()["t.state2"], v, rtol=1e-5, atol=1e-9)


def bf16_values(bits):
    return (np.asarray(bits).astype(np.uint16).astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("rule", ["adam", "adagrad", "rowwise_adam"])
def test_fp16_states_keep_the_squares_of_small_gradients(rule):
    results = {}
    for dtype in ("float32", "float16"):
        collection = EmbeddingCollection(tables())
        collection.bind_optimizer(TableOptimizer(rule, 0.01, state_dtype=dtype))
        for ids in batches(np.random.default_rng(5), 5):  # gradients of 1e-4: squares 1e-8, below fp16's 2^-24
            (collection(ids) * 1e-4).sum().backward()
        results[dtype] = collection
    for key in ("t0", "t2", "t4"):  # (stored as is, the squares would flush to 0, and the steps blow up)
        np.testing.assert_allclose(results["float16"][key].weight.numpy(), results["float32"][key].weight.numpy(),
                                   rtol=0.02, atol=2e-4)


@pytest.mark.parametrize("state_dtype", ["bfloat16", "float16"])
def test_16_bit_states_follow_the_fp32_rule_at_half_the_bytes(state_dtype):
    results = {}
    for dtype in ("float32", state_dtype):
        collection = EmbeddingCollection(tables())
        optimizer = TableOptimizer("adam", 0.01, state_dtype=dtype)
        collection.bind_optimizer(optimizer)
        for ids in batches(np.random.default_rng(5), 5):
            collection(ids).sum().backward()
        results[dtype] = collection
    state = results[state_dtype].optimizer_state()
    assert state["t2.state1"].dtype == np.int16 and state["t2.state1"].shape == (1000, 8)
    assert TableOptimizer("adam", 0.01, state_dtype=state_dtype).state_bytes(1000, 8) == 2 * 2 * 8000 + 8 + 8
    to_float = bf16_values if state_dtype == "bfloat16" else (lambda b: np.asarray(b).view(np.float16).astype(np.float32))
    reference = results["float32"].optimizer_state()
    tolerance = 2 ** -7 if state_dtype == "bfloat16" else 2 ** -10  # one unit in the last place, relative
    np.testing.assert_allclose(to_float(state["t2.state1"]), reference["t2.state1"], rtol=2 * tolerance, atol=1e-6)
    for key in ("t0", "t2", "t4"):
        np.testing.assert_allclose(results[state_dtype][key].weight.numpy(), results["float32"][key].weight.numpy(),
                                   rtol=0.05, atol=1e-3)


def test_16_bit_accumulators_keep_small_increments_on_average():
    paddle.seed(0)
    collection = EmbeddingCollection({"t": DenseEmbedding(64, 4)})
    collection.bind_optimizer(TableOptimizer("rowwise_adagrad", 1e-9, state_dtype="bfloat16"))
    ids = [paddle.to_tensor(np.arange(64))]
    collection(ids).sum().backward()  # each row's accumulator starts at 1 (gradient 1 everywhere)
    for _ in range(1000):  # then 1000 increments of 1e-4, 1.3% of bf16's spacing at 1 (nearest would keep 1)
        (collection(ids) * 0.01).sum().backward()
    accumulators = bf16_values(collection.optimizer_state()["t.state1"])
    # each row: 1 + 0.0078 x Binomial(1000, 0.0128), standard deviation 0.028
    assert abs(accumulators.mean() - 1.1) < 0.012 and np.all(np.abs(accumulators - 1.1) < 0.12), accumulators


def int8_values(records, signed):
    """Decode 8-bit state records [rows, dim + 4] (codes, then the fp32 scale): the format of optimizer_states.h,
    written out here from its description."""
    records = np.asarray(records)
    codes = records[:, :-4].view(np.uint8).astype(np.int64)
    scale = records[:, -4:].copy().view(np.float32)
    mantissa_bits = 3 if signed else 4
    magnitude = codes & 0x7F if signed else codes
    exponent, fraction = magnitude >> mantissa_bits, magnitude & ((1 << mantissa_bits) - 1)
    values = np.where(magnitude == 0, 0.0, 2.0 ** (exponent - 16.0) * (1 + fraction / 2 ** mantissa_bits)) * scale
    return np.where(signed & (codes >= 128), -values, values).astype(np.float32)


@pytest.mark.parametrize("rule", ["adam", "adagrad", "rowwise_adam", "rowwise_adagrad"])
def test_8_bit_states_hold_each_rows_values_to_one_code_step(rule):
    rng = np.random.default_rng(6)
    steps = batches(rng, 1)
    grads = [rng.standard_normal((64, sum(DIMS))).astype("float32")]
    results = {}
    for dtype in ("float32", "int8"):
        collection = EmbeddingCollection(tables())
        collection.bind_optimizer(TableOptimizer(rule, 0.01, state_dtype=dtype))
        for ids, grad in zip(steps, grads):
            (collection(ids) * paddle.to_tensor(grad)).sum().backward()
        results[dtype] = collection.optimizer_state()
    exact, packed = results["float32"], results["int8"]
    for key, dim in (("t0", 4), ("t2", 8), ("t4", 16)):
        for label, signed in (("state1", rule in ("adam", "rowwise_adam")), ("state2", False)):
            name = f"{key}.{label}"
            if name not in exact:
                continue
            if exact[name].ndim == 1:  # a row's single value stays fp32, exactly
                np.testing.assert_array_equal(packed[name].view(np.float32).reshape(-1), exact[name])
                continue
            assert packed[name].shape == (exact[name].shape[0], dim + 4) and packed[name].dtype == np.int8
            decoded = int8_values(packed[name], signed)
            target = exact[name] if signed else np.sqrt(exact[name])  # sums of squares are kept as their roots
            scale = np.abs(target).max(axis=1, keepdims=True)
            step = np.maximum(np.abs(target) * 2.0 ** -(3 if signed else 4), scale * 2.0 ** -15)
            assert np.all(np.abs(decoded - target) <= step * 1.0001 + 1e-12), name
            assert np.allclose(np.abs(decoded).max(axis=1), scale[:, 0], rtol=1e-6)  # the largest is exact
    if rule == "rowwise_adagrad":
        assert TableOptimizer(rule, 0.01, state_dtype="int8").state_bytes(1000, 8) == 4 * 1000 + 8
    else:
        per_value = {"adam": 2, "adagrad": 1, "rowwise_adam": 1}[rule]
        assert TableOptimizer(rule, 0.01, state_dtype="int8").state_bytes(1000, 8) == \
            per_value * 12 * 1000 + (4000 if rule == "rowwise_adam" else 0) + (16 if "adam" in rule else 8)


def test_8_bit_states_follow_the_fp32_rule_and_keep_small_increments_on_average():
    results = {}
    for dtype in ("float32", "int8"):
        collection = EmbeddingCollection(tables())
        collection.bind_optimizer(TableOptimizer("adam", 0.01, state_dtype=dtype))
        rng = np.random.default_rng(5)
        for ids in batches(rng, 20):
            out = collection(ids)
            (out * paddle.to_tensor(rng.standard_normal(out.shape).astype("float32"))).sum().backward()
        results[dtype] = collection
    for key in ("t0", "t2", "t4"):
        start = tables()[key].weight.numpy()
        moved = np.abs(results["float32"][key].weight.numpy() - start).max()
        assert np.abs(results["int8"][key].weight.numpy() - results["float32"][key].weight.numpy()).max() < 0.1 * moved
    paddle.seed(0)
    collection = EmbeddingCollection({"t": DenseEmbedding(256, 4)})
    collection.bind_optimizer(TableOptimizer("adagrad", 1e-9, state_dtype="int8"))
    ids = [paddle.to_tensor(np.arange(256))]
    columns = paddle.to_tensor(np.array([[1.0, 0.7, 0.45, 0.3]], np.float32))
    (collection(ids) * columns).sum().backward()  # roots of the accumulators: the columns
    for _ in range(500):  # increments of 1e-4 c^2: 0.5% of a root's code step at most (nearest would keep them)
        (collection(ids) * columns * 0.01).sum().backward()
    roots = int8_values(collection.optimizer_state()["t.state1"], signed=False)
    expected = columns.numpy()[0] * np.sqrt(1.05)
    assert np.allclose(roots[:, 0], expected[0], rtol=2e-5)  # the row's largest value: no rounding, fp32 sums only
    assert np.allclose(roots.mean(axis=0), expected, rtol=0.01), (roots.mean(axis=0), expected)


def test_table_optimizers_refuse_betas_outside_their_range():
    with pytest.raises(EdoValueError, match=r"beta1 = 1.0, beta2 = 0.999 must be in \[0, 1\)"):
        TableOptimizer("adam", 0.01, beta1=1.0)


@pytest.mark.parametrize("rule,state_dtype", [("adam", "float32"), ("rowwise_adam", "float32"),
                                              ("rowwise_adagrad", "float32"), ("adam", "bfloat16"),
                                              ("adagrad", "float16"), ("adam", "int8"), ("rowwise_adam", "int8")])
def test_the_optimizer_state_resumes_exactly(rule, state_dtype):
    rng = np.random.default_rng(4)
    steps = batches(rng, 4)
    whole = EmbeddingCollection(tables())
    whole.bind_optimizer(TableOptimizer(rule, 0.01, state_dtype=state_dtype))
    for ids in steps:
        whole(ids).sum().backward()
    first = EmbeddingCollection(tables())
    first.bind_optimizer(TableOptimizer(rule, 0.01, state_dtype=state_dtype))
    for ids in steps[:2]:
        first(ids).sum().backward()
    saved_weights = {k: v.numpy().copy() for k, v in first.state_dict().items()}
    saved = table_optimizer_state(paddle.nn.LayerList([first]))
    resumed = EmbeddingCollection(tables(seed=9))
    resumed.bind_optimizer(TableOptimizer(rule, 0.01, state_dtype=state_dtype))
    resumed.set_state_dict({k: paddle.to_tensor(v) for k, v in saved_weights.items()})
    load_table_optimizer_state(paddle.nn.LayerList([resumed]), saved, "test")
    for ids in steps[2:]:
        resumed(ids).sum().backward()
    for key, value in whole.state_dict().items():
        np.testing.assert_array_equal(resumed.state_dict()[key].numpy(), value.numpy())
    other = EmbeddingCollection(tables())
    other.bind_optimizer(TableOptimizer("adagrad", 0.01))
    with pytest.raises(EdoValueError, match="table optimizer state"):
        load_table_optimizer_state(paddle.nn.LayerList([other]), saved, "test")


@pytest.mark.parametrize("storage_format", ["fp16", "bf16", "int8", "int4", "int2", "ternary", "binary"])
def test_qat_tables_fake_quantize_in_the_kernel_and_train_their_master_as_per_table_layers(storage_format):
    def qat_tables(seed):
        paddle.seed(seed)
        return {"bag": QuantizedEmbedding(300, 12, storage_format, mode="qat", padding_idx=0),
                "one": QuantizedEmbedding(50, 16, storage_format, mode="qat"), "dense": DenseEmbedding(40, 4),
                "ptq": QuantizedEmbedding(40, 4, storage_format, mode="ptq")}  # an fp32 master until pack()
    fused, plain = qat_tables(6), qat_tables(6)
    collection = EmbeddingCollection(fused, pooling={"bag": "mean"})
    assert collection.fused_tables() == ["bag", "one", "dense", "ptq"]
    collection.bind_optimizer(TableOptimizer("sgd", 0.5))
    reference = paddle_optimizer("sgd", 0.5, [t.weight for t in plain.values()])
    reference_bags = EmbeddingCollection(plain, pooling={"bag": "mean"})  # each table's own lookup and pooling
    rng = np.random.default_rng(6)
    exact = storage_format not in ("ternary", "binary")  # their mean |w| sums in Paddle's order there
    for _ in range(3):
        ids = [paddle.to_tensor(rng.integers(0, 300, (32, 6))), paddle.to_tensor(rng.integers(0, 50, 32)),
               paddle.to_tensor(rng.integers(0, 40, 32)), paddle.to_tensor(rng.integers(0, 40, 32))]
        out, expected = collection(ids), reference_bags(ids)
        # the bags' mean: ours scales by 1 / count, the composite pooling divides (within an ulp)
        np.testing.assert_allclose(out.numpy()[:, :12], expected.numpy()[:, :12], rtol=1e-6, atol=1e-9)
        if exact:
            np.testing.assert_array_equal(out.numpy()[:, 12:], expected.numpy()[:, 12:])
        else:
            np.testing.assert_allclose(out.numpy()[:, 12:], expected.numpy()[:, 12:], rtol=1e-6, atol=1e-9)
        assert len(np.unique(out.numpy()[:, 12:28])) < out.shape[0] * 16  # quantized values repeat
        weights = paddle.to_tensor(rng.standard_normal(out.shape).astype("float32"))
        (out * weights).sum().backward()
        (expected * weights).sum().backward()
        reference.step()
        reference.clear_grad()
    for key in ("one", "dense", "ptq"):  # straight-through gradients: the masters train as per-table layers' do
        np.testing.assert_array_equal(fused[key].weight.numpy(), plain[key].weight.numpy())
    np.testing.assert_allclose(fused["bag"].weight.numpy()[1:], plain["bag"].weight.numpy()[1:], rtol=1e-6, atol=1e-7)


def test_other_tables_join_through_their_own_lookups_and_train_through_paddle():
    paddle.seed(5)
    members = {"dense": DenseEmbedding(30, 4), "hashed": HashEmbedding(1000, 4, 64),
               "int8": QuantizedEmbedding(40, 4, "int8", mode="qat").pack()}
    collection = EmbeddingCollection(members)
    assert collection.fused_tables() == ["dense"]
    collection.bind_optimizer(TableOptimizer("sgd", 0.1))
    assert collection.fused_parameters() == [members["dense"].weight]
    ids = [paddle.to_tensor(np.array([1, 2])), paddle.to_tensor(np.array([999, 5])), paddle.to_tensor(np.array([3, 3]))]
    out = collection(ids, concat=False)
    assert [list(o.shape) for o in out] == [[2, 4]] * 3
    with paddle.no_grad():
        np.testing.assert_array_equal(out[1].numpy(), members["hashed"](ids[1]).numpy())
    paddle.concat(out, axis=1).sum().backward()
    assert members["hashed"].table.weight.grad is not None and members["dense"].weight.grad is None


def test_unpooled_sequences_and_empty_batches_keep_their_shapes():
    collection = EmbeddingCollection(tables())
    collection.bind_optimizer(TableOptimizer("adagrad", 0.1))
    ids = [paddle.to_tensor(np.ones((3, 2), dtype=np.int64))] * len(ROWS)
    assert list(collection(ids).shape) == [3, 2 * sum(DIMS)]
    assert [list(o.shape) for o in collection(ids, concat=False)] == [[3, 2, d] for d in DIMS]
    empty = [paddle.zeros([0], dtype="int64")] * len(ROWS)
    out = collection(empty)
    assert list(out.shape) == [0, sum(DIMS)]
    with paddle.no_grad():
        assert list(collection(empty).shape) == [0, sum(DIMS)]


def test_bad_input_is_refused_naming_the_table():
    collection = EmbeddingCollection(tables(padding_idx=None))
    collection.bind_optimizer(TableOptimizer("sgd", 0.1))
    good = [paddle.to_tensor(np.zeros(4, dtype=np.int64))] * len(ROWS)
    bad = list(good)
    bad[2] = paddle.to_tensor(np.array([0, 1000, 2, 3]))
    with pytest.raises(EdoIndexError, match=r"table 't2': id 1000 is out of range \[0, 1000\)"):
        collection(bad)
    with paddle.no_grad(), pytest.raises(EdoIndexError, match=r"table 't2': id -1"):
        collection(good[:2] + [paddle.to_tensor(np.array([-1, 0, 0, 0]))] + good[3:])
    with pytest.raises(EdoTypeError, match="ids must be int32 or int64, got float32"):
        collection([paddle.zeros([4])] + good[1:])
    with pytest.raises(EdoValueError, match="4 ids tensors for 5 tables"):
        collection(good[:4])
    with pytest.raises(EdoValueError, match="table 't1' has a batch of 3"):
        collection(good[:1] + [paddle.to_tensor(np.zeros(3, dtype=np.int64))] + good[2:])
    with pytest.raises(EdoKeyError, match="ids for table 't4' missing"):
        collection({f"t{i}": good[i] for i in range(4)})
    with pytest.raises(EdoValueError, match="pooling of table 't0' = 'max'"):
        EmbeddingCollection(tables(), pooling={"t0": "max"})
    with pytest.raises(EdoTypeError, match="tables must be paddle_edo tables"):
        EmbeddingCollection({"plain": paddle.nn.Embedding(3, 2)})
    with pytest.raises(EdoValueError, match="'rmsprop' is not fused"):
        TableOptimizer("rmsprop", 0.1)


def test_to_static_and_inference_programs_give_the_kernels_results(tmp_path):
    collection = EmbeddingCollection(tables(), pooling={"t2": "mean"})
    collection.eval()
    ids = [paddle.to_tensor(np.arange(8) % r) for r in ROWS]
    ids[2] = paddle.to_tensor((np.arange(16) % 7).reshape(8, 2))
    with paddle.no_grad():
        eager = collection(ids).numpy()
        for full_graph in (False, True):
            np.testing.assert_allclose(paddle.jit.to_static(collection, full_graph=full_graph)(ids).numpy(), eager,
                                       rtol=1e-6, atol=1e-7)
    specs = [paddle.static.InputSpec(list(x.shape), "int64") for x in ids]
    path = str(tmp_path / "collection")
    paddle.jit.save(paddle.jit.to_static(EmbeddingCollection(collection.tables(), collection.pooling),
                                         input_spec=[specs], full_graph=True), path)
    loaded = paddle.jit.load(path)
    np.testing.assert_allclose(loaded(*ids).numpy(), eager, rtol=1e-6, atol=1e-7)


def test_a_collection_training_with_its_table_optimizer_refuses_a_whole_graph_program():
    collection = EmbeddingCollection(tables())
    collection.bind_optimizer(TableOptimizer("adam", 0.01, state_dtype="int8"))
    ids = [paddle.to_tensor(np.arange(8) % r) for r in ROWS]
    with pytest.raises(Exception, match=r"train with the bound TableOptimizer \(adam\) in dynamic graph; in this "
                                        r"static program they would not train"):
        paddle.jit.to_static(collection, full_graph=True)(ids).sum().backward()
    trained = paddle.jit.to_static(collection)(ids)  # the default mode (SOT) trains them
    before = collection["t2"].weight.numpy().copy()
    trained.sum().backward()
    assert not np.array_equal(collection["t2"].weight.numpy(), before)
    collection.eval()
    with paddle.no_grad():  # a program that only looks rows up is served as before
        np.testing.assert_allclose(paddle.jit.to_static(collection, full_graph=True)(ids).numpy(),
                                   collection(ids).numpy(), rtol=1e-6, atol=1e-7)
