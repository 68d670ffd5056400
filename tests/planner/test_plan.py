"""The planner end to end, as a user calls it: a budget in, a plan within it out, and the config it writes
training to exactly the planned bytes."""
import numpy as np
import pytest
import yaml

from conftest import small_synthetic_config
from paddle_edo import load_config
from paddle_edo.engine import Engine
from paddle_edo.planner import plan_tables
from paddle_edo.schema import ConfigError


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    config = small_synthetic_config(tmp_path_factory.mktemp("plan") / "run")
    fp32 = 4 * 500 * (8 + 1) * 4                           # 4 fields: vectors of 8 and first-order weights
    budget = fp32 // 10
    return config, budget, plan_tables(config, budget, progress=lambda line: None)


def test_a_plan_fits_its_budget_and_its_config_trains_to_exactly_the_planned_bytes(planned, tmp_path):
    config, budget, plan = planned
    assert plan.bytes <= budget < plan.fp32_bytes
    assert len(plan.choices) == 8 and {c.table for c in plan.choices} >= {"embeddings.f0", "first_order.f3"}
    assert any(c.label != "fp32" for c in plan.choices)
    path = plan.write(tmp_path / "plan.yaml")
    text = path.read_text()
    assert text.startswith("# table") and "budget" in text
    trained = load_config(path, [f"train.output_dir={tmp_path / 'trained'}", "train.epochs=1"])
    written = yaml.safe_load(text)["embedding"]["tables"]
    assert set(trained["embedding"]["tables"]) == set(written)          # each planned table, its keys validated
    for name, entry in written.items():
        assert entry.items() <= trained["embedding"]["tables"][name].items()
    engine = Engine(trained)
    results = engine.fit()
    report = engine.memory_report()
    assert report.held_bytes == plan.bytes
    assert {t.name: t.held_bytes for t in report.tables} == {c.table: c.bytes for c in plan.choices}
    assert results["test_auc"] > 0.6


def test_the_plan_table_says_what_each_table_becomes(planned):
    _, budget, plan = planned
    table = plan.table()
    for choice in plan.choices:
        assert choice.table in table and choice.label in table
    assert "smallest reachable" in table and f"{plan.fp32_bytes / plan.bytes:.1f}x fewer" in table


def test_a_budget_below_every_plan_is_refused_with_the_smallest_reachable_size(tmp_path):
    config = small_synthetic_config(tmp_path / "run", epochs=1)
    with pytest.raises(ConfigError, match=r"budget 10 bytes .* below the smallest plan these tables reach, 32000 bytes"):
        plan_tables(config, 10, methods=["int8"], progress=lambda line: None)


@pytest.mark.parametrize("budget,message", [(0, "at least one byte"), (-5, "at least one byte"),
                                            ("12 parsecs", "not a memory size"), ("", "not a memory size")])
def test_bad_budgets_name_the_value_and_the_units(tmp_path, budget, message):
    config = small_synthetic_config(tmp_path / "run")
    with pytest.raises(ConfigError, match=message):
        plan_tables(config, budget)


def test_a_reserve_as_large_as_the_device_is_refused(tmp_path):
    config = small_synthetic_config(tmp_path / "run")
    with pytest.raises(ConfigError, match="reserve = '2GiB' keeps"):
        plan_tables(config, device_memory="1GiB", reserve="2GiB")


def test_auto_tables_need_a_budget_and_cannot_be_built_unplanned(tmp_path):
    base = {"data": {"name": "synthetic"}, "embedding": {"type": "auto"}}
    with pytest.raises(ConfigError, match="needs one of embedding.budget"):
        load_config(base=base)
    with pytest.raises(ConfigError, match="embedding.budget = '1 XB' is not a memory size"):
        load_config(base={**base, "embedding": {"type": "auto", "budget": "1 XB"}})
    with pytest.raises(ConfigError, match="embedding.methods: 'zip' is not a method"):
        plan_tables(load_config(base={**base, "embedding": {"type": "auto", "budget": "1MB", "methods": ["zip"]}}))
    config = load_config(base={**base, "embedding": {"type": "auto", "budget": "2MiB"}})
    with pytest.raises(ConfigError, match="chosen table by table by the planner"):
        Engine(config)


def test_a_plan_without_row_sharing_is_checked_against_every_table_hashed_to_the_budget():
    from paddle_edo.planner import Candidate, Option
    from paddle_edo.planner.plan import _alternatives

    def hashed(rows, buckets, inner, cost):
        return Option(Candidate("hash", f"hash {buckets} {inner}", {"type": "hash", "num_buckets": buckets,
                                                                     "storage_format": inner}),
                      buckets * 8 * (4 if inner == "fp32" else 1) + 16, cost)

    fp32, int8 = (Option(Candidate(m, m, {"type": "dense"}), b, c) for m, b, c in (("fp32", 32000, 0.0),
                                                                                 ("int8", 12000, 1e-6)))
    small = Option(Candidate("fp32", "fp32", {"type": "dense"}), 1600, 0.0)
    options = {"a": [fp32, int8, hashed(1000, 250, "fp32", 1e-3), hashed(1000, 250, "int8", 1e-3),
                     hashed(1000, 100, "fp32", 1e-3), hashed(1000, 100, "int8", 1e-3)],
               "b": [small]}
    chosen = {"a": int8, "b": small}
    limit = 9600          # a's 250 fp32 rows (8016 B) and b's 1,600 B do not fit; its 250 int8 rows do
    [(label, alternative)] = _alternatives(options, chosen, {"a": 1000, "b": 50}, limit)
    assert label == "every table hashed to 0.25 of its rows, packed inner tables"
    assert alternative == {"a": options["a"][3], "b": small}
    assert _alternatives(options, chosen, {"a": 1000, "b": 50}, 1000) == []   # nothing else fits


def test_a_plan_is_also_checked_against_the_least_risky_format_on_every_table_that_fits():
    from paddle_edo.planner import Candidate, Option, choose
    from paddle_edo.planner.plan import _alternatives

    def packed(method, label, nbytes, cost):
        return Option(Candidate(method, label, {"type": "quantized", "storage_format": method}), nbytes, cost)

    fp32 = Option(Candidate("fp32", "fp32", {"type": "dense"}), 32000, 0.0)
    weights = Option(Candidate("fp32", "fp32", {"type": "dense"}), 4000, 0.0)   # rows too narrow for int8 or int4
    options = {"a": [fp32, packed("fp16", "fp16 ptq", 16000, 1e-9), packed("int8", "int8 ptq", 10000, 1e-7),
                     packed("int4", "int4 qat", 6000, 1e-6)],
               "b": [fp32, packed("fp16", "fp16 ptq", 16000, 1e-9), packed("int8", "int8 ptq", 10000, 1e-7),
                     packed("int4", "int4 qat", 6000, 2e-6)],
               "w": [weights, packed("fp16", "fp16 ptq", 2000, 1e-12)]}
    chosen = choose(options, 18000)
    assert chosen == {"a": options["a"][3], "b": options["b"][2], "w": options["w"][1]}   # the knapsack's mix
    [(label, alternative)] = _alternatives(options, chosen, {"a": 50, "b": 50, "w": 50}, 18000)
    assert label == "every table int4 qat where it has that format"   # fp16 (34,000 B) and int8 (22,000 B) do not fit
    assert alternative == {"a": options["a"][3], "b": options["b"][3], "w": options["w"][1]}
    rechecked = _alternatives(options, alternative, {"a": 50, "b": 50, "w": 50}, 18000)
    assert all(other != label for other, _ in rechecked)   # a plan in that format is not checked against itself


def test_checks_within_a_tie_go_to_the_plan_of_fewest_distinct_choices():
    from paddle_edo.planner import Candidate, Option
    from paddle_edo.planner.plan import CHECK_TIE, _preferred_check

    def option(label):
        return Option(Candidate(label.split()[0], label, {"type": "quantized"}), 100, 0.0)

    mix = ("plan", {"a": option("int8 ptq"), "b": option("int4 qat"), "w": option("fp16 ptq")})
    uniform = ("every table int4 qat where it has that format",
               {"a": option("int4 qat"), "b": option("int4 qat"), "w": option("fp16 ptq")})
    plans = [mix, uniform]
    assert _preferred_check(plans, [{"valid_auc": 0.7203}, {"valid_auc": 0.7197}]) == 1   # a tie: fewer choices
    assert _preferred_check(plans, [{"valid_auc": 0.7203 + CHECK_TIE}, {"valid_auc": 0.7197}]) == 0
    assert _preferred_check(plans, [{"valid_auc": 0.7190}, {"valid_auc": 0.7197}]) == 1
    assert _preferred_check([mix, mix], [{"valid_auc": 0.7190}, {"valid_auc": 0.7195}]) == 1   # same: the better
