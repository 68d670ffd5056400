"""Plans for training memory: the budget holds each table as it trains, the table rule's optimizer state and
a step's row gradients; state formats are given up before table precision, and the planned config trains to
exactly the planned bytes."""
import pytest

from conftest import small_synthetic_config
from paddle_edo import load_config
from paddle_edo.engine import Engine
from paddle_edo.optim import TableOptimizer
from paddle_edo.planner import plan_tables
from paddle_edo.planner.training import state_rules
from paddle_edo.schema import ConfigError

# the small config: 4 fields of 500 ids, vectors of 8 and first-order weights, batches of 256, lazy Adam
TABLES = 4 * 500 * (8 + 1) * 4
GRADIENTS = 4 * 256 * (8 * 4 + 8) + 4 * 256 * (1 * 4 + 8)   # a row a lookup: values and the row's id
ADAM_BF16 = TABLES + TABLES // 2 * 2 + 8 * 16                # two 16-bit moments, step counts of 8 tables


def trains_to_the_plan(plan, tmp_path, budget):
    """Train the planned config: each table's bytes and its state's are the plan's, and with the row
    gradients' bound they fit the budget."""
    path = plan.write(tmp_path / "plan.yaml")
    engine = Engine(load_config(path, [f"train.output_dir={tmp_path / 'trained'}"]))
    results = engine.fit()
    report = engine.memory_report()
    planned = {c.table: c.bytes for c in plan.choices}
    assert {t.name: t.held_bytes + t.optimizer_held_bytes for t in report.tables} == planned
    assert report.gradient_estimated_bytes <= plan.gradient_bytes
    assert sum(planned.values()) + plan.gradient_bytes <= budget
    assert results["test_auc"] > 0.6
    return engine


def test_state_is_compressed_before_any_table_when_that_fits(tmp_path):
    config = small_synthetic_config(tmp_path / "run", epochs=1)
    budget = ADAM_BF16 + GRADIENTS + 1000   # fp32 tables with Adam's fp32 moments would take 3x the tables
    plan = plan_tables(config, budget, purpose="training", progress=lambda line: None)
    assert plan.rule == TableOptimizer("adam", 0.01, state_dtype="bfloat16")
    assert plan.gradient_bytes == GRADIENTS
    assert all(choice.label == "fp32" for choice in plan.choices)
    assert plan.config["train"]["table_optimizer"]["state_dtype"] == "bfloat16"
    assert "the table rule adam, bfloat16 state" in plan.table()
    engine = trains_to_the_plan(plan, tmp_path, budget)
    assert all(t.optimizer == "adam (fused)" for t in engine.memory_report().tables)


def test_a_tighter_budget_packs_tables_that_train_packed(tmp_path):
    config = small_synthetic_config(tmp_path / "run", epochs=1)
    budget = TABLES + GRADIENTS + 8000   # no state format alone makes fp32 tables fit
    plan = plan_tables(config, budget, purpose="training", checks=False, progress=lambda line: None)
    assert plan.rule in state_rules(config)
    packed = [c for c in plan.choices if c.label != "fp32"]
    assert packed and all("low_precision" in c.label or c.section["type"] in ("hash", "qr", "mixed_dim", "clustered")
                          for c in packed)
    trains_to_the_plan(plan, tmp_path, budget)


def test_a_training_budget_below_every_plan_names_the_smallest_and_its_rule(tmp_path):
    config = small_synthetic_config(tmp_path / "run", epochs=1)
    with pytest.raises(ConfigError, match=r"below the smallest plan these tables reach, \d+ bytes .*training with "
                                          r"rowwise_adam, beta1 0"):
        plan_tables(config, 60_000, purpose="training", methods=["int8"], progress=lambda line: None)


def test_the_rules_a_training_plan_may_take_start_at_the_configs_own(tmp_path):
    adam = small_synthetic_config(tmp_path / "a")
    assert [(r.name, r.state_dtype, r.beta1) for r in state_rules(adam)] == [
        ("adam", "float32", 0.9), ("adam", "bfloat16", 0.9), ("adam", "int8", 0.9), ("rowwise_adam", "int8", 0.9),
        ("rowwise_adam", "float32", 0.0)]
    eight_bit = small_synthetic_config(tmp_path / "b", table_optimizer={"name": "adam", "state_dtype": "int8"})
    assert [r.name for r in state_rules(eight_bit)] == ["adam", "rowwise_adam", "rowwise_adam"]
    with pytest.raises(ConfigError, match="not train.optimizer = 'momentum'"):
        state_rules(small_synthetic_config(tmp_path / "c", optimizer="momentum"))
    with pytest.raises(ConfigError, match="purpose = 'inference'; expected one of serving, training"):
        plan_tables(adam, 10**6, purpose="inference")


def test_auto_tables_plan_for_training_when_the_config_says_so(tmp_path):
    base = {"data": {"name": "synthetic"}, "embedding": {"type": "auto", "budget": "1MB", "budget_for": "training"}}
    assert load_config(base=base)["embedding"]["budget_for"] == "training"
    with pytest.raises(ConfigError, match="embedding.budget_for"):
        load_config(base={**base, "embedding": {**base["embedding"], "budget_for": "inference"}})


def test_row_sharing_layers_count_their_parts_state_and_their_projections(tmp_path):
    """A plan of mixed-dimension and hashed tables: each table's bytes in training are its parts, the
    table rule's state for them and train.optimizer's for a mixed-dimension layer's projections."""
    config = small_synthetic_config(tmp_path / "run", epochs=1)
    for methods, budget in ((["mixed_dim"], 110_000), (["hash"], TABLES // 2 + GRADIENTS)):
        plan = plan_tables(config, budget, purpose="training", methods=methods, checks=False,
                           progress=lambda line: None)
        assert {c.section["type"] for c in plan.choices} == {methods[0], "dense"}
        trains_to_the_plan(plan, tmp_path / methods[0], budget)
