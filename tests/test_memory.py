import numpy as np
import paddle
import pytest

from nn.layer_zoo import LAYERS
from paddle_edo import memory_report
from paddle_edo.data import FieldSpec
from paddle_edo.memory import held_bytes
from paddle_edo.models import DeepFM
from paddle_edo.nn import DenseEmbedding
from paddle_edo.nn.cached import bind_optimizer
from paddle_edo.nn.collection import bind_table_optimizer
from paddle_edo.optim import TableOptimizer


def state_bytes(layer):
    return sum(np.asarray(v.numpy()).nbytes for v in layer.state_dict().values())


def test_estimate_equals_held_bytes_for_every_table_of_a_model():
    fields = [FieldSpec("user", 1000), FieldSpec("item", 300), FieldSpec("tags", 50, max_len=4)]
    model = DeepFM(fields, {"type": "dense", "dim": 16, "sparse": True, "init_std": 0.01}, hidden_units=[8])
    report = memory_report(model)
    names = [t.name for t in report.tables]
    assert names == ["embeddings.user", "embeddings.item", "embeddings.tags",
                     "first_order.user", "first_order.item", "first_order.tags"]
    for table in report.tables:
        assert table.estimated_bytes == table.held_bytes
    assert report.tables[0].held_bytes == 1000 * 16 * 4
    assert report.tables[3].held_bytes == 1000 * 1 * 4
    assert report.held_bytes == report.estimated_bytes == sum(t.held_bytes for t in report.tables)
    # held bytes agree with an independent count over the tables' state dicts
    assert report.held_bytes == sum(state_bytes(layer) for layer in model.embeddings.values()) + sum(
        state_bytes(layer) for layer in model.first_order.values())
    text = str(report)
    assert "embeddings.user" in text and "total" in text and "62.50 KiB" in text


def test_plain_paddle_embedding_is_reported_and_shared_tensors_count_once():
    class Model(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.plain = paddle.nn.Embedding(100, 8)
            self.mine = DenseEmbedding(20, 4)
            self.alias = self.mine  # the same layer reachable twice

    report = memory_report(Model())
    assert [(t.name, t.kind, t.dtype) for t in report.tables] == [
        ("plain", "paddle.nn.Embedding", "float32", ), ("mine", "dense", "float32")]
    assert report.tables[0].estimated_bytes == report.tables[0].held_bytes == 3200
    assert held_bytes(paddle.nn.Sequential(DenseEmbedding(5, 2), DenseEmbedding(5, 2))) == 80


def test_model_without_embeddings_gives_an_empty_report():
    report = memory_report(paddle.nn.Linear(3, 2))
    assert report.tables == [] and report.held_bytes == 0


def test_the_report_says_what_the_process_holds_beside_the_tables():
    report = memory_report(paddle.nn.Sequential(DenseEmbedding(1000, 16)))
    process = report.process
    assert process.resident_bytes >= process.baseline_resident_bytes > 0
    assert process.device_allocated_bytes == process.device_reserved_bytes == 0 or paddle.is_compiled_with_cuda()
    line = str(report).splitlines()[-1]
    assert line.startswith("process: ") and "resident = the overhead at import" in line and "tables 62.50 KiB" in line
    assert report.to_dict()["process"]["resident_bytes"] == process.resident_bytes


PADDLE_OPTIMIZERS = {"SGD": paddle.optimizer.SGD, "Adagrad": paddle.optimizer.Adagrad,
                     "Momentum": paddle.optimizer.Momentum, "RMSProp": paddle.optimizer.RMSProp,
                     "Adam": lambda lr, parameters: paddle.optimizer.Adam(lr, parameters=parameters, lazy_mode=True),
                     "AdamW": paddle.optimizer.AdamW, "Lamb": paddle.optimizer.Lamb}
SPARSE = ("SGD", "Adagrad", "Momentum", "RMSProp", "Adam")  # AdamW and Lamb stop the process on a sparse gradient
CACHED = ("SGD", "Adagrad", "Adam")  # the rules a cache keeps row state for


def trained_report(layer, optimizer):
    """(the report before a step, after one) of a model of one table trained by ``optimizer``."""
    model = paddle.nn.LayerDict({"table": layer})
    trained = [p for p in model.parameters() if not p.stop_gradient]
    paddle_optimizer = PADDLE_OPTIMIZERS[optimizer](0.01, parameters=trained)
    bind_optimizer(model, paddle_optimizer)  # a cached table's rows carry the optimizer's row state
    before = memory_report(model, paddle_optimizer).tables[0]
    layer(paddle.to_tensor(np.arange(1, 40))).sum().backward()
    paddle_optimizer.step()
    return before, memory_report(model, paddle_optimizer).tables[0], trained


@pytest.mark.parametrize("optimizer", SPARSE)
@pytest.mark.parametrize("kind", sorted(k for k in LAYERS if k not in ("quantized_low_precision", "quantized_packed")))
def test_the_optimizer_state_of_every_table_type_is_estimated_to_the_byte(kind, optimizer):
    from paddle_edo.memory import PADDLE_STATES
    if kind == "cached" and optimizer not in CACHED:
        pytest.skip("a cache refuses it")
    paddle.seed(0)
    before, table, trained = trained_report(LAYERS[kind](), optimizer)
    assert before.optimizer == optimizer.lower()
    assert before.optimizer_held_bytes == 0 or kind == "cached"  # Paddle's is made at the first step, a cache's at bind
    assert table.optimizer_estimated_bytes == table.optimizer_held_bytes == before.optimizer_estimated_bytes
    per_value, single = PADDLE_STATES[optimizer]
    assert table.optimizer_held_bytes == sum(per_value * int(p.size) * 4 + single * 4 for p in trained) > 0 or (
        optimizer == "SGD" and table.optimizer_held_bytes == 0)


@pytest.mark.parametrize("optimizer", sorted(set(PADDLE_OPTIMIZERS) - set(SPARSE)))
def test_optimizers_of_dense_gradients_are_estimated_too(optimizer):
    before, table, _ = trained_report(DenseEmbedding(50, 4, sparse=False), optimizer)
    assert table.optimizer_estimated_bytes == table.optimizer_held_bytes == 50 * 4 * 4 * 2 + 8


def test_packed_and_low_precision_tables_keep_no_optimizer_state_of_paddles():
    report = memory_report(paddle.nn.LayerDict({k: LAYERS[k]() for k in ("quantized_packed", "quantized_low_precision")}),
                           paddle.optimizer.SGD(0.1, parameters=[paddle.create_parameter([1], "float32")]))
    assert [(t.optimizer, t.optimizer_held_bytes) for t in report.tables] == [("", 0), ("", 0)]
    with pytest.raises(Exception, match="optimizer Adadelta has no state formula"):
        memory_report(paddle.nn.LayerDict({"t": DenseEmbedding(5, 2)}),
                      paddle.optimizer.Adadelta(0.1, parameters=[paddle.create_parameter([1], "float32")]))


@pytest.mark.parametrize("state_dtype", ["float32", "bfloat16", "int8"])
@pytest.mark.parametrize("rule", ["sgd", "adagrad", "rowwise_adagrad", "adam", "rowwise_adam"])
def test_a_collections_fused_state_is_counted_for_each_of_its_tables(rule, state_dtype):
    fields = [FieldSpec("user", 1000), FieldSpec("item", 300)]
    model = DeepFM(fields, {"type": "dense", "dim": 8}, hidden_units=[8])
    fused = bind_table_optimizer(model, TableOptimizer(rule, 0.01, state_dtype=state_dtype))
    dense = paddle.optimizer.Adam(0.01, parameters=[p for p in model.parameters() if all(p is not f for f in fused)])
    report = memory_report(model, dense)
    counts = (8 if rule in ("adam", "rowwise_adam") else 0) + (8 if state_dtype != "float32" and rule != "sgd" else 0)
    value_bytes = 4 if state_dtype == "float32" else 2
    for table in report.tables:
        dim = 8 if table.name.startswith("embeddings") else 1
        per_row = {"sgd": 0, "adagrad": dim, "rowwise_adagrad": 1, "adam": 2 * dim, "rowwise_adam": dim + 1}[rule]
        per_row_bytes = value_bytes * per_row
        if state_dtype == "int8":  # a row's codes and fp32 scale per state of dim values; a single value in fp32
            record = dim + 4 if dim > 1 else 4
            per_row_bytes = {"sgd": 0, "adagrad": record, "rowwise_adagrad": 4, "adam": 2 * record,
                             "rowwise_adam": record + 4}[rule]
        assert table.optimizer == f"{rule} (fused)"
        assert table.optimizer_estimated_bytes == table.optimizer_held_bytes == table.rows * per_row_bytes + counts
    assert report.optimizer_held_bytes == sum(t.optimizer_held_bytes for t in report.tables)
    text = str(report)
    assert "state estimated" in text and f"{rule} (fused)" in text
    assert ("their optimizer state" in text) == (rule != "sgd")


@pytest.mark.parametrize("rule, state_dtype", [("rowwise_adagrad", "float32"), ("adam", "int8")])
@pytest.mark.parametrize("kind", sorted(k for k in LAYERS if k != "quantized_packed"))
def test_every_table_type_trained_by_a_rule_is_estimated_to_the_byte(kind, rule, state_dtype):
    """A RowTrainer's state for every table type that trains (fp32 tables and parts, QAT masters,
    low_precision and cached tables), estimated by the rule's formula and held, before and after a step."""
    from paddle_edo.nn.row_trainer import bind_row_trainer
    paddle.seed(0)
    model = paddle.nn.LayerDict({"table": LAYERS[kind]()})
    optimizer = TableOptimizer(rule, 0.01, state_dtype=state_dtype)
    trainer = bind_row_trainer(model, optimizer, own_rules=True)
    before = memory_report(model).tables[0]
    model["table"](paddle.to_tensor(np.arange(1, 40))).sum().backward()
    trainer.step()
    trainer.clear_grad()
    table = memory_report(model).tables[0]
    assert before.optimizer == table.optimizer == f"{rule} (by rows)"
    assert table.optimizer_estimated_bytes == table.optimizer_held_bytes == before.optimizer_held_bytes > 0
    assert table.optimizer_held_bytes == sum(trainer.state_held_bytes(name) for name in trainer.trained_tables())


def test_a_composite_tables_fused_parts_are_counted_under_it():
    from paddle_edo.nn import CharWordEmbedding
    model = paddle.nn.LayerDict({"text": CharWordEmbedding(100, 8, "gate", num_chars=30)})
    bind_table_optimizer(model, TableOptimizer("rowwise_adagrad", 0.1))
    (table,) = memory_report(model).tables
    assert table.optimizer == "rowwise_adagrad (fused)"
    assert table.optimizer_estimated_bytes == table.optimizer_held_bytes == (100 + 30) * 4  # words and characters


@pytest.mark.parametrize("tables", ["collection", "per_table", "dense_gradients"])
def test_a_steps_row_gradients_are_measured_and_bounded(synthetic_config, tables):
    from paddle_edo.engine import Engine

    config = synthetic_config(epochs=1)
    config["embedding"]["collection"] = tables == "collection"
    config["embedding"]["sparse"] = tables != "dense_gradients"
    engine = Engine(config)
    arrays = next(iter(engine.train_batches))
    engine._train_step({name: paddle.to_tensor(values) for name, values in arrays.items()})
    for name, field in engine.table_fields.items():
        dim = 8 if name.startswith("embeddings") else 1
        rows = 500 if tables == "dense_gradients" else len(np.unique(arrays[field]))  # no id 0 in these data
        per_row = dim * 4 if tables == "dense_gradients" else dim * 4 + 8  # values, and int64 row numbers
        assert engine.gradient_peaks.peaks[name] == rows * per_row, name
    report = engine.memory_report()
    for table in report.tables:
        per_row = table.dim * 4 + (0 if tables == "dense_gradients" else 8)
        bound = table.rows * per_row if tables == "dense_gradients" else min(256, table.rows) * per_row
        assert table.gradient_estimated_bytes == bound
        assert 0 < table.gradient_held_bytes <= table.gradient_estimated_bytes
    assert "gradient bound" in str(report) and "gradient peak" in str(report)
