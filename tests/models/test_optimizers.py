import numpy as np
import paddle
import pytest

from paddle_edo.models.optimizers import create_optimizer, fused_table_optimizer
from paddle_edo.nn import DenseEmbedding
from paddle_edo.nn.collection import collections_of
from paddle_edo.optim import TableOptimizer
from paddle_edo.schema import ConfigError


def test_lazy_adam_leaves_rows_outside_the_batch_untouched(synthetic_config):
    config = synthetic_config()
    layer = DenseEmbedding(20, 4)
    optimizer = create_optimizer(config["train"], layer)
    for ids in ([1, 2], [3]):  # after the first step rows 1, 2 have non-zero moments
        before = layer.weight.numpy().copy()
        layer(paddle.to_tensor(ids)).sum().backward()
        optimizer.step()
        optimizer.clear_grad()
        changed = np.flatnonzero((layer.weight.numpy() != before).any(1)).tolist()
        assert changed == ids


def test_embedding_learning_rate_scales_only_the_tables(synthetic_config):
    config = synthetic_config(optimizer="sgd", learning_rate=0.1, embedding_learning_rate=0.05)
    model = paddle.nn.Sequential(DenseEmbedding(5, 2), paddle.nn.Linear(2, 1))
    optimizer = create_optimizer(config["train"], model)
    table, linear = model[0].weight, model[1].weight
    assert table.optimize_attr["learning_rate"] == 0.5 and linear.optimize_attr["learning_rate"] == 1.0
    w0 = table.numpy().copy()
    model[1](model[0](paddle.to_tensor([1]))).sum().backward()
    grad = np.zeros_like(w0)
    grad[1] = (model[1].weight.numpy().ravel())
    optimizer.step()
    # atol: where the step nearly cancels the row, float32 rounding of operands ~1e-2 is ~1e-9 (a wrong
    # learning rate moves the rows by ~1e-3)
    np.testing.assert_allclose(table.numpy(), w0 - 0.05 * grad, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("rule,learning_rate", [("rowwise_adagrad", 0.05), ("rowwise_adam", 0.01)])
def test_a_row_wise_table_rule_trains_the_tables_with_one_float_per_row(synthetic_config, rule, learning_rate):
    from paddle_edo.data import make_synthetic_ctr
    from paddle_edo.engine import Engine
    from paddle_edo.metrics import auc
    config = synthetic_config(table_optimizer={"name": rule, "beta1": 0.0, "beta2": 0.999, "weight_decay": 0.0},
                              learning_rate=learning_rate)
    engine = Engine(config)
    assert engine.table_optimizer == TableOptimizer(rule, learning_rate, beta1=0.0)
    results = engine.fit()
    table, logit = make_synthetic_ctr(**config["data"]["synthetic"], return_logit=True)
    assert results["test_auc"] > 0.5 + 0.6 * (auc(table.labels, logit) - 0.5)  # as the engine's own test asks
    counts = 8 if rule == "rowwise_adam" else 0  # its two step counts
    for table in engine.memory_report().tables:
        assert table.optimizer == f"{rule} (fused)"
        assert table.optimizer_estimated_bytes == table.optimizer_held_bytes == table.rows * 4 + counts


def test_a_table_rule_the_run_cannot_apply_is_refused(synthetic_config):
    from paddle_edo.engine import Engine
    config = synthetic_config(table_optimizer={"name": "rowwise_adagrad"})
    config["train"]["amp"]["enable"] = True
    with pytest.raises(ConfigError, match="train.table_optimizer.name = 'rowwise_adagrad' trains tables with "
                                          "paddle_edo's native kernels, which this run cannot use: "
                                          "train.amp.enable is true"):
        Engine(config)
    assert fused_table_optimizer(synthetic_config()) == TableOptimizer("adam", 0.01)  # train.optimizer, fused


@pytest.mark.parametrize("unfused", [{"monitor": True}, {"collection": False}])
def test_where_collections_cannot_fuse_tables_train_by_rows_with_the_same_rule(synthetic_config, unfused):
    from paddle_edo.engine import Engine
    config = synthetic_config(table_optimizer={"name": "rowwise_adam", "beta1": 0.0, "state_dtype": "int8"},
                              epochs=1)
    config["monitor"]["enable"] = unfused.get("monitor", False)
    config["embedding"]["collection"] = unfused.get("collection", True)
    engine = Engine(config)
    assert engine.row_trainer is not None
    assert not any(c.trained_tables() for c in collections_of(engine.model).values())
    trained = set(engine.row_trainer.trained_tables())
    assert {f"embeddings.{f.name}" for f in engine.fields} <= trained
    assert not any(p is q for p in engine.row_trainer.parameters() for group in engine.optimizer._param_groups
                   for q in (group["params"] if isinstance(group, dict) else [group]))
    start = {name: table.weight.numpy().copy() for name, table in engine.row_trainer.tables.items()}
    engine.train_epochs(validate=False)
    assert all(not np.array_equal(table.weight.numpy(), start[name]) for name, table in engine.row_trainer.tables.items())
    report = engine.memory_report()
    for table in report.tables:
        assert table.optimizer == "rowwise_adam (by rows)"
        assert table.optimizer_estimated_bytes == table.optimizer_held_bytes == 4 * table.rows + 16


@pytest.mark.parametrize("table,key,value", [({"type": "cached", "cache_ratio": 0.5}, "state_dtype", "int8"),
                                             ({"type": "quantized", "mode": "low_precision"}, "state_dtype", "int8")])
def test_a_table_rule_is_refused_naming_a_table_it_cannot_train(synthetic_config, table, key, value):
    from paddle_edo.engine import Engine
    config = synthetic_config(table_optimizer={key: value})
    config["embedding"].update(table)
    why = "a cached table" if table["type"] == "cached" else "a low_precision table"
    with pytest.raises(ConfigError, match=rf"train.table_optimizer.{key} = '{value}' cannot train table "
                                          rf"'embeddings.f0' \({why}"):
        Engine(config)


def test_a_table_rule_is_refused_on_parameter_servers():
    from paddle_edo.config import load_config
    with pytest.raises(ConfigError, match="train.table_optimizer.state_dtype = 'int8' cannot apply with "
                                          "distributed.mode = 'ps': the servers hold the tables"):
        load_config(base={"distributed": {"mode": "ps"}, "train": {"table_optimizer": {"state_dtype": "int8"}}})


def test_low_precision_tables_take_a_named_table_rule_and_resume_it(synthetic_config):
    """With train.table_optimizer.name set (here 8-bit Adam, which train.optimizer's row rules lack), a
    low_precision table trains by rows with it: its state is counted as held and estimated, checkpointed,
    and a resume restores it exactly."""
    from paddle_edo.engine import Engine
    config = synthetic_config(table_optimizer={"name": "adam", "state_dtype": "int8"}, epochs=1)
    config["embedding"].update({"type": "quantized", "mode": "low_precision", "storage_format": "int8"})
    engine = Engine(config)
    assert engine.row_tables == []
    tables = engine.row_trainer.tables
    assert {f"embeddings.{f.name}" for f in engine.fields} <= set(tables)
    start = {name: table.codes.numpy().copy() for name, table in tables.items()}
    engine.train_epochs(validate=False)
    assert all(not np.array_equal(table.codes.numpy(), start[name]) for name, table in tables.items())
    for table in engine.memory_report().tables:
        assert table.optimizer == "adam (by rows)"
        per_row = table.dim + 4 if table.dim > 1 else 4  # 8-bit codes and a scale; a single value in fp32
        assert table.optimizer_estimated_bytes == table.optimizer_held_bytes == table.rows * per_row * 2 + 16
    state = engine.row_trainer.state_dict()
    path = engine.save()
    resumed = Engine(config)
    resumed.load(path)
    assert sorted(resumed.row_trainer.state_dict()) == sorted(state)
    for key, value in state.items():
        np.testing.assert_array_equal(resumed.row_trainer.state_dict()[key], value, err_msg=key)


@pytest.mark.parametrize("host, host_format", [("memory", "float32"), ("mmap", "float32"), ("mmap", "int8")])
def test_cached_tables_take_a_named_table_rule_and_resume_it(synthetic_config, host, host_format, tmp_path):
    """With train.table_optimizer.name set, a cached table trains by rows with the rule (row-wise Adagrad:
    one fp32 a row, for every row, in host RAM) and any train.optimizer for the other layers: its host rows
    (fp32, or int8 records) move, its state is counted as held and estimated, and a resume restores rows and
    state exactly."""
    from paddle_edo.engine import Engine
    config = synthetic_config(table_optimizer={"name": "rowwise_adagrad"}, epochs=1)
    config["train"]["optimizer"] = "momentum"  # the dense layers'; a cache alone carries only sgd/adagrad/adam
    config["embedding"].update({"type": "cached", "cache_ratio": 0.3, "min_cache_rows": 8, "host": host,
                                "host_format": host_format, "path": str(tmp_path / "tables") if host == "mmap" else None})
    engine = Engine(config)
    tables = engine.row_trainer.tables
    assert {f"embeddings.{f.name}" for f in engine.fields} <= set(tables)
    assert all(table.optimizer is None and table.host.state_names == [] for table in tables.values())
    for table in tables.values():
        row_bytes = {"float32": 4 * table.embedding_dim, "int8": table.embedding_dim + 4}[host_format]
        assert table.host.nbytes == table.num_embeddings * row_bytes
    start = {name: table.host.column("weight").copy() for name, table in tables.items()}
    engine.train_epochs(validate=False)
    for name, table in tables.items():
        table.flush()
        assert not np.array_equal(table.host.column("weight"), start[name])
    for table in engine.memory_report().tables:
        assert table.optimizer == "rowwise_adagrad (by rows)"
        assert table.optimizer_estimated_bytes == table.optimizer_held_bytes == 4 * table.rows
    state = engine.row_trainer.state_dict()
    weights = {name: table.host.column("weight").copy() for name, table in tables.items()}
    path = engine.save()
    resumed = Engine(config)
    resumed.load(path)
    for key, value in state.items():
        np.testing.assert_array_equal(resumed.row_trainer.state_dict()[key], value, err_msg=key)
    for name, table in resumed.row_trainer.tables.items():
        np.testing.assert_array_equal(table.host.column("weight"), weights[name], err_msg=name)
