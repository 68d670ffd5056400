"""Every table as users call paddle.jit.to_static: the default mode (SOT) and full_graph=True, with and
without input_spec, inference and training steps, then jit.save and Paddle Inference.

SOT falls back to dynamic graph for a whole function whose graph has fewer than 10 ops, which would
hide what it does to a small model; the layer cases set that bound to 0 so SOT compiles everything it
can. The DeepFM case runs with every default.
"""
import numpy as np
import paddle
import pytest
from layer_zoo import DIM, LAYERS, ROWS, STATIC_ONLY
from tests.sot_graphs import compile_every_graph

from paddle_edo.data import FieldSpec
from paddle_edo.export import Predictor, export_model, input_specs
from paddle_edo.models import DeepFM
from paddle_edo.nn import DenseEmbedding, QuantizedEmbedding, bind_optimizer, uncache
from paddle_edo.nn.cached import load_model_with_caches
from paddle_edo.nn.registry import field_tables


class Head(paddle.nn.Layer):
    """A table and a linear head: what a model does with it."""

    def __init__(self, table):
        super().__init__()
        self.table = table
        self.head = paddle.nn.Linear(DIM, 1)

    def forward(self, ids):
        return self.head(paddle.nn.functional.relu(self.table(ids) * 2.0 + 0.1)).squeeze(-1)


def twins(kind):
    """Two identical models: one for dynamic graph, one to convert."""
    paddle.seed(7)
    eager = Head(LAYERS[kind]())
    paddle.seed(7)
    other = Head(LAYERS[kind]())
    other.set_state_dict(load_model_with_caches(other, eager.state_dict()))
    return eager, other


def batches(count=3, shape=(16, 5), seed=0):
    rng = np.random.default_rng(seed)
    return [paddle.to_tensor(rng.integers(0, ROWS, shape).astype(np.int64)) for _ in range(count)]


def spec():
    return [paddle.static.InputSpec([None, None], "int64", name="ids")]


def convert(model, mode, with_spec=False):
    return paddle.jit.to_static(model, input_spec=spec() if with_spec else None, full_graph=mode == "full_graph")


def optimizer(model, name):
    if name == "adam":
        opt = paddle.optimizer.Adam(0.05, parameters=model.parameters(), lazy_mode=True)
    else:
        opt = paddle.optimizer.SGD(0.2, parameters=model.parameters())
    bind_optimizer(model, opt)
    if isinstance(model.table, QuantizedEmbedding) and model.table.mode == "low_precision":
        model.table.configure_row_optimizer("sgd")
    return opt


def train_step(model, run, opt, ids):
    out = run(ids)
    (out * out).mean().backward()
    opt.step()
    if isinstance(model.table, QuantizedEmbedding) and model.table.mode == "low_precision":
        paddle.seed(11)  # stochastic rounding draws the same in both models
        model.table.apply_row_updates(0.2)
    opt.clear_grad()
    return out.numpy()


def test_the_matrix_covers_every_field_table():
    kinds = {type(factory()).registry_name for factory in LAYERS.values()}
    assert kinds | STATIC_ONLY == set(field_tables())


@pytest.mark.parametrize("kind", list(LAYERS))
def test_sot_training_steps_equal_dynamic_graph_bit_for_bit(kind):
    # under SOT each table runs in dynamic graph as one piece: sparse rows of distinct ids, lazy Adam
    eager, other = twins(kind)
    eager.train(), other.train()
    opt_eager, opt_other = optimizer(eager, "adam"), optimizer(other, "adam")
    static = convert(other, "sot")
    before = {name: value.numpy().copy() for name, value in other.table.state_dict().items()}
    with compile_every_graph():
        for ids in batches():
            np.testing.assert_array_equal(train_step(other, static, opt_other, ids),
                                          train_step(eager, eager, opt_eager, ids))
    after = other.table.state_dict()
    if kind != "quantized_packed":  # a packed table has nothing to train
        assert any(not np.array_equal(after[name].numpy(), value) for name, value in before.items())
    for name, value in eager.state_dict().items():
        np.testing.assert_array_equal(other.state_dict()[name].numpy(), value.numpy(), err_msg=name)


@pytest.mark.parametrize("kind", [k for k in LAYERS if k not in ("cached", "quantized_low_precision")])
def test_full_graph_training_steps_train_the_tables(kind):
    # whole-graph programs drop sparse gradients in Paddle 2.6.2: the tables take dense ones there, which
    # SGD applies exactly as the sparse rows of dynamic graph
    eager, other = twins(kind)
    eager.train(), other.train()
    opt_eager, opt_other = optimizer(eager, "sgd"), optimizer(other, "sgd")
    static = convert(other, "full_graph")
    for ids in batches():
        np.testing.assert_allclose(train_step(other, static, opt_other, ids), train_step(eager, eager, opt_eager, ids),
                                   rtol=0, atol=1e-6)
    # compared through lookups: dynamic graph's sparse gradient also moves the padding row, which every
    # lookup reads as zero (Paddle 2.6.2's sparse embedding gradient keeps the padding id's row; a dense one
    # does not)
    every_id = paddle.arange(ROWS, dtype="int64")
    other.eval(), eager.eval()
    with paddle.no_grad():
        np.testing.assert_allclose(other(every_id).numpy(), eager(every_id).numpy(), rtol=0, atol=1e-6)
        np.testing.assert_allclose(other.table(every_id).numpy(), eager.table(every_id).numpy(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("kind,message", [("cached", "uncache"), ("quantized_low_precision", "low_precision")])
def test_full_graph_training_refuses_what_updates_rows_on_the_host(kind, message):
    _, other = twins(kind)
    other.train()
    optimizer(other, "sgd")
    with pytest.raises(Exception, match=message):
        convert(other, "full_graph")(batches(1)[0])


@pytest.mark.parametrize("mode", ["sot", "full_graph"])
@pytest.mark.parametrize("with_spec", [False, True])
@pytest.mark.parametrize("kind", list(LAYERS))
def test_inference_equals_dynamic_graph(kind, mode, with_spec):
    eager, other = twins(kind)
    eager.eval(), other.eval()
    if kind == "cached" and mode == "full_graph":
        uncache(other)
    static = convert(other, mode, with_spec)
    with paddle.no_grad(), compile_every_graph():
        for ids in batches(2):
            expected = eager(ids).numpy()
            if kind.startswith("quantized") and kind != "quantized_qat":
                np.testing.assert_array_equal(static(ids).numpy(), expected)
            else:
                np.testing.assert_allclose(static(ids).numpy(), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("mode", ["sot", "full_graph"])
@pytest.mark.parametrize("kind", list(LAYERS))
def test_jit_save_after_either_mode_serves_in_paddle_inference(tmp_path, kind, mode):
    eager, other = twins(kind)
    eager.eval(), other.eval()
    uncache(other)
    static = convert(other, mode, with_spec=True)
    ids = batches(1)[0]
    with paddle.no_grad(), compile_every_graph():
        static(ids)
        paddle.jit.save(static, str(tmp_path / "model"), input_spec=spec())
        expected = eager(ids).numpy()
    served = Predictor(tmp_path / "model", device="cpu").run([ids.numpy()])
    np.testing.assert_allclose(served, expected, rtol=0, atol=1e-6)


def test_qat_search_in_static_programs(tmp_path):
    """A QAT table on searched ranges (int4's default) fake-quantizes alike in dygraph, in a whole-graph
    program and in Paddle Inference: the composite search in the programs, the native one in dygraph."""
    paddle.seed(3)
    table = QuantizedEmbedding(64, 8, "int4", mode="qat", init_std=0.3)
    assert table.range_iterations > 0
    table.eval()
    ids = paddle.to_tensor(np.random.default_rng(0).integers(0, 64, (16, 3)))
    spec = [paddle.static.InputSpec([None, 3], "int64")]
    with paddle.no_grad():
        expected = table(ids).numpy()
        static = paddle.jit.to_static(table, input_spec=spec, full_graph=True)
        np.testing.assert_array_equal(static(ids).numpy(), expected)
        paddle.jit.save(static, str(tmp_path / "model"), input_spec=spec)
    np.testing.assert_array_equal(Predictor(tmp_path / "model", device="cpu").run([ids.numpy()]), expected)


@pytest.mark.parametrize("shape", [[0], [0, 3], [1], [1, 1], [4, 3]])
@pytest.mark.parametrize("mode", ["dygraph", "sot", "full_graph"])
@pytest.mark.parametrize("kind", list(LAYERS))
def test_empty_single_and_all_padding_batches(kind, mode, shape):
    table = LAYERS[kind]()
    if kind == "cached":
        optimizer(Head(table), "adam")
        if mode == "full_graph":
            table = table.to_dense()
    if kind == "quantized_low_precision":
        table.configure_row_optimizer("sgd")
    ids = paddle.zeros(shape, dtype="int64") if 0 in shape or shape == [4, 3] else paddle.full(shape, 5, "int64")
    run = table if mode == "dygraph" else convert(table, mode)
    for training in (False, True):
        table.train() if training else table.eval()
        if mode == "full_graph" and training:
            continue  # whole-graph training steps: test_full_graph_training_steps_train_the_tables
        with compile_every_graph():
            out = run(ids)
        assert out.shape == [*shape, DIM] and out.dtype == paddle.float32
        if shape == [4, 3] and kind != "clustered":  # every id is the padding id 0 (clustered: no padding)
            np.testing.assert_array_equal(out.numpy(), np.zeros([*shape, DIM], np.float32))


@pytest.mark.parametrize("mode", ["dygraph", "sot"])
def test_out_of_range_ids_are_refused_naming_the_layer_in_every_dynamic_mode(mode):
    table = DenseEmbedding(ROWS, DIM)
    run = table if mode == "dygraph" else convert(table, "sot")
    with pytest.raises(IndexError, match=f"{table.full_name()}: id {ROWS} is out of range"):
        with compile_every_graph():
            run(paddle.to_tensor([[1, ROWS]]))


FIELDS = [FieldSpec("user", 300), FieldSpec("item", 500), FieldSpec("genres", 20, max_len=3)]


def test_deepfm_with_int8_tables_under_default_to_static_trains_saves_and_serves(tmp_path):
    paddle.seed(3)
    model = DeepFM(FIELDS, {"type": "quantized", "storage_format": "int8", "mode": "qat", "dim": 8, "sparse": True,
                            "init_std": 0.1}, hidden_units=[16, 8])
    paddle.seed(3)
    twin = DeepFM(FIELDS, {"type": "quantized", "storage_format": "int8", "mode": "qat", "dim": 8, "sparse": True,
                           "init_std": 0.1}, hidden_units=[16, 8])
    twin.set_state_dict(model.state_dict())
    rng = np.random.default_rng(1)
    ids = [paddle.to_tensor(rng.integers(0, f.vocab_size, (64, f.max_len) if f.multi_valued else 64)) for f in FIELDS]
    labels = paddle.to_tensor(rng.integers(0, 2, 64).astype(np.float32))
    static = paddle.jit.to_static(model)  # every default: SOT
    losses = []
    for net, run in ((model, static), (twin, twin)):
        net.train()
        opt = paddle.optimizer.Adam(0.01, parameters=net.parameters(), lazy_mode=True)
        for _ in range(2):
            loss = paddle.nn.functional.binary_cross_entropy_with_logits(run(ids), labels)
            loss.backward()
            opt.step()
            opt.clear_grad()
        losses.append(float(loss))
    assert losses[0] == losses[1]
    for net in (model, twin):
        for table in [*net.embeddings.values(), *net.first_order.values()]:
            table.pack()
    model.eval(), twin.eval()
    with paddle.no_grad():
        np.testing.assert_array_equal(static(ids).numpy(), twin(ids).numpy())
        prefix = export_model(model, input_specs(FIELDS), tmp_path / "deepfm")
        expected = twin(ids).numpy()
    served = Predictor(prefix, device="cpu").run([x.numpy() for x in ids])
    np.testing.assert_array_equal(served, expected)
