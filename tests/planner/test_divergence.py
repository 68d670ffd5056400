"""The reference a table's replacement is measured against: a trained model's predictions on a validation
sample, and the sample renumbered to the rows it reads, on which row-wise changes cost what they cost on
the whole table."""
import numpy as np
import paddle
import pytest

from conftest import small_synthetic_config
from paddle_edo.data import count_frequencies
from paddle_edo.engine import Engine
from paddle_edo.memory import held_bytes
from paddle_edo.planner import fitted_table
from paddle_edo.planner.divergence import Probe
from paddle_edo.planner.plan import measure_options

SAMPLE_ROWS = 64


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    engine = Engine(small_synthetic_config(tmp_path_factory.mktemp("probe") / "run", epochs=1))
    engine.fit()
    return engine


def test_a_table_of_the_rows_the_sample_reads_predicts_it_as_the_whole_table_does(trained):
    probe = Probe(trained, SAMPLE_ROWS)
    rows, sample = probe.compact("f1")
    assert rows[0] == 0 and np.all(np.diff(rows) > 0) and len(rows) < 500
    np.testing.assert_array_equal(rows[sample.ids["f1"]], probe.sample.ids["f1"])
    compacted = {}
    for name in ("embeddings.f1", "first_order.f1"):    # both tables of the field read the renumbered ids
        full = dict(trained.model.named_sublayers())[name]
        compacted[name] = paddle.nn.Embedding(len(rows), full.embedding_dim, padding_idx=0)
        compacted[name].weight.set_value(full.weight.numpy()[rows])
    divergence = probe.with_tables(compacted, sample)
    assert divergence.kl == 0.0 and divergence.auc_delta == 0.0
    assert probe.with_tables({"embeddings.f1": compacted["embeddings.f1"]}, sample).kl > 0   # one alone: not
    np.testing.assert_array_equal(trained.predict(probe.sample), probe.reference)   # its own table is back


def test_packed_candidates_cost_and_hold_what_the_whole_packed_table_does(trained):
    options = measure_options(trained, ("fp32", "fp16", "int8", "int4", "binary"), False, SAMPLE_ROWS,
                              lambda line: None)
    probe = Probe(trained, SAMPLE_ROWS)
    counts = np.asarray(count_frequencies(trained.splits.train)["f2"], dtype=np.float64)
    for name, methods in (("embeddings.f2", {"fp16", "int8", "int4", "binary"}), ("first_order.f2", {"fp16", "binary"})):
        weight = dict(trained.model.named_sublayers())[name].weight.numpy()
        packed = [o for o in options[name] if o.candidate.section["type"] == "quantized"]
        assert {o.candidate.method for o in packed} == methods
        for option in packed:
            whole = fitted_table(option.candidate.section, weight, counts)
            assert option.bytes == held_bytes(whole)
            assert option.cost == pytest.approx(max(probe.with_table(name, whole).kl, 0.0), rel=1e-5, abs=1e-12)
