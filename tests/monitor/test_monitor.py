"""Monitors read back from the VisualDL logs equal what was planted."""
import os
from pathlib import Path

import numpy as np
import paddle
import pytest
from visualdl import LogReader

from paddle_edo.engine import Engine
from paddle_edo.monitor import AlertSettings, MemoryMonitor, MonitorError, SparseGradMonitor, open_log_writer
from paddle_edo.nn import DenseEmbedding, QuantizedEmbedding

from conftest import small_synthetic_config


def read(logdir):
    (path,) = [p for p in Path(logdir).iterdir() if p.name.startswith("vdlrecords")]
    reader = LogReader(file_path=str(path))
    tags = reader.get_tags()

    def series(kind, tag):
        return {r.id: r for r in reader.get_data(kind, tag)} if tag in tags.get(kind, []) else {}
    return tags, series


class Model(paddle.nn.Layer):
    def __init__(self, dim=4, sparse=True, deduplicate=False):
        super().__init__()
        self.users = DenseEmbedding(100, dim, padding_idx=0, sparse=sparse, init_std=0.1, deduplicate=deduplicate)

    def forward(self, ids, weights):
        return (self.users(ids) * weights).sum()


def planted_run(tmp_path, steps=12, sparse=True, plant=None, every=1, factor=10.0, lookups=None, background=False,
                deduplicate=False):
    """SGD on rows 1..49 only; returns (model, monitor, logdir). Row gradient of row r at a step is
    weight x (lookups of r) in every dimension. ``lookups(ids)``: the ids passed to the monitor as the
    table's lookups, as the engine passes a batch's ids."""
    paddle.seed(0)
    model = Model(sparse=sparse, deduplicate=deduplicate)
    optimizer = paddle.optimizer.SGD(0.1, parameters=model.parameters())
    logdir = tmp_path / "vdl"
    writer = open_log_writer(logdir)
    monitor = SparseGradMonitor(writer, every_n_steps=every, alerts=AlertSettings(norm_factor=factor),
                                histogram_every_n_steps=4, background=background)
    rng = np.random.default_rng(0)
    history = []
    for step in range(1, steps + 1):
        ids = rng.integers(1, 50, (8, 3))
        ids[0, 0] = 0  # padding lookups are never updates
        weights = np.ones((8, 3, 4), np.float32)
        if plant:
            plant(step, ids, weights)
        before = model.users.weight.numpy().copy()
        model(paddle.to_tensor(ids), paddle.to_tensor(weights)).backward()
        monitor.step(model, step, None if lookups is None else {"users": lookups(ids)})
        optimizer.step()
        monitor.step_end(model, step)
        optimizer.clear_grad()
        history.append((ids, weights, before, model.users.weight.numpy().copy()))
    monitor.lookup_ids = {"users": np.arange(100)}  # every row once, padding excluded by the monitor
    monitor.log_never_updated(steps)
    monitor.wait()
    writer.close()
    return model, monitor, logdir, history


def expected_norms(ids, weights):
    grads = {}
    for (i, j), row in np.ndenumerate(ids):
        if row != 0:
            grads[row] = grads.get(row, 0) + weights[i, j]
    return np.array([np.linalg.norm(g) for g in grads.values()])


@pytest.mark.parametrize("lookups, rows_are_lookups, background, native, deduplicate", [
    (None, None, False, True, False), (lambda ids: ids, True, False, True, False),
    (lambda ids: ids[::-1].copy(), False, False, True, False), (lambda ids: ids, True, True, True, False),
    (lambda ids: ids, True, False, False, False), (lambda ids: ids, False, False, True, True)],
    ids=["rows read", "rows known from the lookups", "lookups in another order", "on the worker thread",
         "without the native kernels", "deduplicated lookups"])
def test_logged_values_equal_the_planted_gradients(tmp_path, monkeypatch, lookups, rows_are_lookups, background,
                                                   native, deduplicate):
    from paddle_edo import kernels

    if not native:
        for name in kernels._C_FUNCTIONS:
            monkeypatch.setitem(kernels._functions, name, None)
    _, monitor, logdir, history = planted_run(tmp_path, lookups=lookups, background=background,
                                              deduplicate=deduplicate)
    # the gradient's rows are read back once; the lookups stand in for them only if they were equal (never
    # for a deduplicated table: its rows are read)
    assert monitor.tables[0].read.rows_are_lookups is rows_are_lookups
    tags, series = read(logdir)
    assert "sparse/users/grad_norm_max" in tags["scalar"] and "sparse/users/grad_norm" in tags["histogram"]
    for step, (ids, weights, before, after) in enumerate(history, start=1):
        norms = expected_norms(ids, weights)
        assert series("scalar", "sparse/users/rows_touched")[step].value == len(norms)
        assert series("scalar", "sparse/users/grad_norm_max")[step].value == pytest.approx(norms.max(), rel=1e-5)
        assert series("scalar", "sparse/users/grad_norm_mean")[step].value == pytest.approx(norms.mean(), rel=1e-5)
        assert series("scalar", "sparse/users/grad_norm_p99")[step].value == pytest.approx(
            np.percentile(norms, 99), rel=1e-5)
        rows = sorted(set(ids.ravel()) - {0})
        ratio = np.linalg.norm(after[rows] - before[rows]) / np.linalg.norm(before[rows])
        assert series("scalar", "sparse/users/update_to_weight")[step].value == pytest.approx(ratio, rel=1e-4)
    histograms = series("histogram", "sparse/users/grad_norm")
    assert sorted(histograms) == [4, 8, 12]
    assert sum(histograms[12].histogram.hist) == len(expected_norms(*history[-1][:2]))


def test_planted_cold_rows_coverage_and_lookup_share(tmp_path):
    _, monitor, logdir, history = planted_run(tmp_path)
    seen = set()
    for ids, *_ in history:
        seen |= set(ids.ravel()) - {0}
    assert seen <= set(range(1, 50))
    _, series = read(logdir)
    coverage = series("scalar", "sparse/users/coverage_pct")[12].value
    assert coverage == pytest.approx(100.0 * len(seen) / 99, rel=1e-6)  # rows 50..99 are planted cold
    cold = 99 - len(seen)
    assert series("scalar", "sparse/users/never_updated_rows")[12].value == cold
    assert series("scalar", "sparse/users/never_updated_lookup_share_pct")[12].value == pytest.approx(
        100.0 * cold / 99, rel=1e-6)


@pytest.mark.parametrize("background", [False, True], ids=["inline", "on the worker thread"])
def test_planted_nan_and_exploding_rows_raise_alerts(tmp_path, background):
    def plant(step, ids, weights):
        if step == 4:
            ids[1, 1] = 7
            weights[1, 1, 2] = np.nan
        if step == 9:
            ids[2, 0] = 11
            weights[2, 0] = 500.0

    _, monitor, logdir, _ = planted_run(tmp_path, plant=plant, background=background)
    kinds = [(step, kind) for step, kind, _ in monitor.alert_log]
    assert (4, "nan_inf") in kinds and (9, "norm_spike") in kinds
    assert all(kind != "norm_spike" or step == 9 for step, kind in kinds)
    _, series = read(logdir)
    assert series("scalar", "sparse/users/nan_inf_rows")[4].value == 1
    assert series("scalar", "sparse/users/nan_inf_rows")[5].value == 0
    texts = series("text", "alerts/users")
    assert "[nan_inf]" in texts[4].text.encoded_text_string and "rows [7]" in texts[4].text.encoded_text_string
    assert "[norm_spike]" in texts[9].text.encoded_text_string


def test_a_dense_gradient_is_flagged_once(tmp_path, caplog):
    _, monitor, _, _ = planted_run(tmp_path, steps=3, sparse=False)
    assert [kind for _, kind, _ in monitor.alert_log] == ["dense_gradient"]
    assert sum("where a sparse row gradient was expected" in r.getMessage() for r in caplog.records) == 1


def test_logging_every_n_steps_still_counts_coverage_every_step(tmp_path):
    _, monitor, logdir, history = planted_run(tmp_path, every=5)
    _, series = read(logdir)
    assert sorted(series("scalar", "sparse/users/rows_touched")) == [5, 10]
    seen = set().union(*(set(ids.ravel()) - {0} for ids, *_ in history))
    assert monitor.coverage("users") == pytest.approx(100.0 * len(seen) / 99)


def test_steps_logged_without_step_end_are_still_written(tmp_path):
    model = Model()
    writer = open_log_writer(tmp_path / "vdl")
    monitor = SparseGradMonitor(writer, every_n_steps=1)
    for step in (1, 2):  # by hand, with no step_end (so no update-to-weight ratio)
        model(paddle.to_tensor([[step, 3]]), paddle.ones([1, 2, 4])).backward()
        monitor.step(model, step)
        model.clear_gradients()
    monitor.wait()
    writer.close()
    tags, series = read(tmp_path / "vdl")
    assert {step: r.value for step, r in series("scalar", "sparse/users/rows_touched").items()} == {1: 2, 2: 2}
    assert "sparse/users/update_to_weight" not in tags["scalar"]


def test_low_precision_tables_are_monitored_through_their_row_gradients(tmp_path):
    table = QuantizedEmbedding(30, 4, "int8", mode="low_precision", padding_idx=0)
    table.configure_row_optimizer("sgd")
    writer = open_log_writer(tmp_path / "vdl")
    monitor = SparseGradMonitor(writer, every_n_steps=1)
    model = paddle.nn.Sequential(table)
    (model(paddle.to_tensor([3, 3, 5])) * 2.0).sum().backward()
    monitor.step(model, 1)
    table.apply_row_updates(0.1)
    monitor.step_end(model, 1)
    writer.close()
    _, series = read(tmp_path / "vdl")
    assert series("scalar", "sparse/0/rows_touched")[1].value == 2
    assert series("scalar", "sparse/0/grad_norm_max")[1].value == pytest.approx(4.0 * 2.0)  # 2 lookups x 2 x sqrt(4)


def test_memory_monitor_logs_the_memory_report(tmp_path):
    writer = open_log_writer(tmp_path / "vdl")
    model = paddle.nn.Sequential(DenseEmbedding(10, 4), QuantizedEmbedding.from_embedding(DenseEmbedding(20, 8), "int4"))
    MemoryMonitor(writer).log(model, 0)
    writer.close()
    tags, series = read(tmp_path / "vdl")
    assert series("scalar", "table_bytes/0/held")[0].value == 160
    assert series("scalar", "table_bytes/1/held")[0].value == 20 * (4 + 4)
    assert series("scalar", "table_bytes/total/estimated")[0].value == 160 + 160
    assert series("scalar", "quantization_error/1")[0].value == pytest.approx(model[1].packing_error, rel=1e-6)
    assert "quantization_error/0" not in tags["scalar"] and series("scalar", "process/resident_bytes")[0].value > 0


def test_tables_packed_after_training_log_their_frequency_weighted_error(tmp_path):
    config = small_synthetic_config(tmp_path / "run", epochs=1)
    config["embedding"].update(type="quantized", storage_format="int4", mode="ptq")
    config["monitor"].update(enable=True, every_n_steps=1000)
    engine = Engine(config)
    weighted = engine.table_frequencies()["embeddings.f0"]
    master = engine.model.embeddings["f0"].weight
    engine.fit()
    trained = paddle.to_tensor(master.numpy())  # the master table as trained (packing dropped it from the layer)
    table = engine.model.embeddings["f0"]
    _, series = read(tmp_path / "run" / "vdl")
    logged = series("scalar", "quantization_error/embeddings.f0")
    assert list(logged.values())[-1].value == pytest.approx(table.packing_error, rel=1e-6)
    assert table.packing_error == pytest.approx(table.row_error(trained, weighted), rel=1e-6)
    assert table.packing_error != pytest.approx(table.row_error(trained), rel=1e-3)   # the weights count


def test_unwritable_logdir_fails_at_start(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(MonitorError, match="monitor.logdir = .*cannot be written"):
        open_log_writer(blocker / "vdl")
    config = small_synthetic_config(tmp_path / "run")
    config["monitor"].update(enable=True, logdir=str(blocker / "vdl"))
    with pytest.raises(MonitorError, match="is a file"):
        Engine(config)  # before any training
    config["monitor"]["logdir"] = str(tmp_path / "later" / "vdl")
    Engine(config)
    assert not (tmp_path / "later").exists()  # made at the first write, not before
    if os.geteuid() != 0:  # root writes anywhere; the blocked path above covers it
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(MonitorError):
            open_log_writer(locked / "vdl")


def test_a_model_without_embeddings_warns_and_goes_on(tmp_path, caplog):
    writer = open_log_writer(tmp_path / "vdl")
    monitor = SparseGradMonitor(writer)
    model = paddle.nn.Linear(3, 1)
    model(paddle.ones([2, 3])).sum().backward()
    monitor.step(model, 1)
    monitor.step_end(model, 1)
    assert "no embedding layers" in caplog.text


def test_engine_runs_with_monitoring_from_config(tmp_path):
    config = small_synthetic_config(tmp_path / "run", epochs=1)
    config["monitor"].update(enable=True, every_n_steps=5)
    engine = Engine(config)
    results = engine.fit()
    tags, series = read(tmp_path / "run" / "vdl")
    steps = len(engine.train_batches)
    assert sorted(series("scalar", "sparse/embeddings.f0/rows_touched")) == list(range(5, steps + 1, 5))
    assert "sparse/first_order.f2/never_updated_lookup_share_pct" in tags["scalar"]
    assert "table_bytes/total/held" in tags["scalar"]
    assert 0 < series("scalar", "sparse/embeddings.f0/coverage_pct")[35].value <= 100
    assert np.isfinite(results["test_auc"])


def test_configs_use_a_worker_thread_when_a_core_is_free_beside_paddles_threads(tmp_path, monkeypatch):
    from paddle_edo.monitor import monitors_from_config

    config = small_synthetic_config(tmp_path, epochs=1)
    config["monitor"]["enable"] = True
    config["train"]["num_threads"] = 2
    for cores, expected in [(2, False), (3, True)]:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cores: set(range(n)))
        assert monitors_from_config(config)[0].background is expected
    config["monitor"]["background"] = True  # said outright: as said
    assert monitors_from_config(config)[0].background is True


def test_screenshot_tool_copies_only_the_tags_asked_for(tmp_path):
    import importlib.util

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location("vdl_screenshot", ROOT / "tools" / "vdl_screenshot.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    _, monitor, logdir, _ = planted_run(tmp_path, steps=4)
    out = tool.filtered_copy(logdir, r"^sparse/users/(coverage_pct|grad_norm_max)$", tmp_path / "shown")
    tags, series = read(out)
    assert sorted(tags["scalar"]) == ["sparse/users/coverage_pct", "sparse/users/grad_norm_max"]
    _, original = read(logdir)
    assert {k: r.value for k, r in series("scalar", "sparse/users/grad_norm_max").items()} == \
        {k: r.value for k, r in original("scalar", "sparse/users/grad_norm_max").items()}


def test_cached_tables_are_monitored_by_table_id_and_log_their_counters(tmp_path):
    coverage = {}
    for kind in ("dense", "cached"):
        config = small_synthetic_config(tmp_path / kind, epochs=1)
        config["embedding"].update(type=kind, **({"cache_ratio": 0.6} if kind == "cached" else {}))
        config["monitor"].update(enable=True, every_n_steps=5)
        Engine(config).fit()
        tags, series = read(tmp_path / kind / "vdl")
        coverage[kind] = [r.value for _, r in sorted(series("scalar", "sparse/embeddings.f0/coverage_pct").items())]
    # coverage counts table ids, not cache slots: the same as the resident table's, above the cache's 60%
    assert coverage["cached"] == coverage["dense"] and coverage["cached"][-1] > 60
    hit_rates = [r.value for _, r in sorted(series("scalar", "cache/embeddings.f0/hit_rate").items())]
    assert "cache/first_order.f3/evictions" in tags["scalar"] and 0 < hit_rates[-1] < 1


def test_composite_layers_are_monitored_through_their_inner_tables(tmp_path):
    from paddle_edo.nn import HashEmbedding, QREmbedding

    class Composite(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.hashed = HashEmbedding(13, 4, 13, num_hashes=2)
            self.qr = QREmbedding(100, 4, num_collisions=10, operation="add")

        def forward(self, ids):
            return self.hashed(ids).sum() + self.qr(ids).sum()

    model = Composite()
    ids = np.array([[5, 5, 907], [42, 5, 61]])  # 907: any id for the hashed layer, not for QR
    writer = open_log_writer(tmp_path / "vdl")
    monitor = SparseGradMonitor(writer, every_n_steps=1)
    monitor.attach(model, id_spaces={"hashed": 1000})
    qr_ids = ids % 100
    loss = model.hashed(paddle.to_tensor(ids)).sum() + model.qr(paddle.to_tensor(qr_ids)).sum()
    loss.backward()
    monitor.step(model, 1, {"hashed": ids, "qr": qr_ids})
    monitor.step_end(model, 1)
    writer.close()
    tags, series = read(tmp_path / "vdl")
    # d loss / d row = (number of lookups landing on the row) x ones(4): norm 2 x count
    buckets = model.hashed.bucket_ids(paddle.to_tensor(ids)).numpy().ravel()
    counts = np.bincount(buckets)
    assert series("scalar", "sparse/hashed.table/rows_touched")[1].value == np.count_nonzero(counts)
    assert series("scalar", "sparse/hashed.table/grad_norm_max")[1].value == pytest.approx(2.0 * counts.max())
    quotients = np.bincount(qr_ids.ravel() // 10)
    assert series("scalar", "sparse/qr.quotient/grad_norm_max")[1].value == pytest.approx(2.0 * quotients.max())
    assert "sparse/qr.remainder/update_to_weight" in tags["scalar"]
    # coverage counts ids: 4 distinct of the 1000 given for the hashed layer, of QR's own 100
    assert series("scalar", "sparse/hashed/coverage_pct")[1].value == pytest.approx(100.0 * 4 / 1000)
    assert series("scalar", "sparse/qr/coverage_pct")[1].value == pytest.approx(100.0 * 4 / 100)


def test_engine_monitors_hashed_fields(tmp_path):
    config = small_synthetic_config(tmp_path / "run", epochs=1)
    config["embedding"] = {"type": "hash", "dim": 8, "num_buckets": 50}
    config["monitor"].update(enable=True, every_n_steps=5)
    engine = Engine(config)
    engine.fit()
    tags, series = read(tmp_path / "run" / "vdl")
    assert "sparse/embeddings.f0.table/grad_norm_max" in tags["scalar"]
    assert "sparse/embeddings.f0/coverage_pct" in tags["scalar"]
    (monitor,) = [cb for cb in engine.callbacks if isinstance(cb, SparseGradMonitor)]
    padding = engine.model.embeddings["f0"].padding_idx
    seen = {int(i) for i in np.unique(engine.splits.train.ids["f0"])} - {padding}
    assert monitor.coverage("embeddings.f0") == pytest.approx(100.0 * len(seen) / (500 - (padding is not None)))


def test_coverage_is_shared_by_tables_given_the_same_ids_until_they_differ(tmp_path):
    model = paddle.nn.Sequential(DenseEmbedding(10, 2), DenseEmbedding(10, 2))
    writer = open_log_writer(tmp_path / "vdl")
    monitor = SparseGradMonitor(writer, every_n_steps=1)
    same = np.array([1, 2, 3])
    for step, lookups in enumerate([{"0": same, "1": same}, {"0": np.array([4]), "1": np.array([7, 8])}], 1):
        loss = model[0](paddle.to_tensor(lookups["0"])).sum() + model[1](paddle.to_tensor(lookups["1"])).sum()
        loss.backward()
        monitor.step(model, step, lookups)
        model.clear_gradients()
    assert monitor.coverage("0") == pytest.approx(40.0) and monitor.coverage("1") == pytest.approx(50.0)
    assert monitor.coverage_tracker.names == ["0", "1"]  # one shared row set at first, then its own


@pytest.mark.parametrize("native", [True, False], ids=["native", "numpy"])
def test_coverage_batches_steps_and_keeps_growth_steps_and_range_errors(monkeypatch, native):
    from paddle_edo import kernels
    from paddle_edo.monitor.coverage import Coverage

    assert kernels.c_function("edo_mark_rows") is not None  # built by `make test`
    if not native:
        monkeypatch.setitem(kernels._functions, "edo_mark_rows", None)
    coverage = Coverage()
    coverage.add("a", 6, padding_idx=0)
    coverage.add("b", 4)
    for step, (a, b) in enumerate([([0, 1], [3]), ([1, 2], [3]), ([0, 0], [3]), ([5], [0, 1])], 1):
        coverage.update(step, [("a", np.array(a)), ("b", np.array(b))])
    assert coverage._pending  # not marked yet: gathered
    assert coverage.percent("a") == pytest.approx(60.0) and coverage.percent("b") == pytest.approx(75.0)
    assert coverage.last_growth_of("a") == 4 and coverage.last_growth_of("b") == 4
    assert coverage.never_updated("a", np.array([0, 3, 4, 5, 1])) == (2, 50.0)  # padding lookups left out
    assert coverage.stalled(20, patience=10) == ["a", "b"] and coverage.stalled(20, patience=17) == []
    coverage.update(21, [("a", np.array([2])), ("b", np.array([-1]))])
    with pytest.raises(IndexError, match="b got row -1 at step 21, outside \\[0, 4\\)"):
        coverage.flush()
    coverage._pending.clear()
    coverage.update(22, [("b", np.array([2]))])
    assert coverage.percent("b") == 100.0 and coverage.last_growth_of("b") == 22
    coverage.update(23, [("b", np.array([0, 1])), ("a", np.array([4]))])
    assert [indices for _, indices, *_ in coverage._pending] == [(0,)]  # a full table is not marked again
    assert coverage.percent("a") == pytest.approx(80.0) and coverage.stalled(40, patience=10) == ["a"]


def test_scalar_records_are_the_bytes_visualdl_writes():
    import struct

    from visualdl.component.base_component import scalar

    from paddle_edo.monitor.writer import ScalarRecords

    cases = [("sparse/users/rows_touched", 17, 3, 1764480000123), ("a", 0.0, 0, 0), ("", -2.25, -1, 5),
             ("nan", float("nan"), 2**40, 1), ("big", 1e39, 7, 9), ("négatif/ü", -1e39, 1, 2),
             ("sparse/users/rows_touched", 3.4028235e38, 2**40, 1764480000123)]  # a tag again, a longer step
    encoder = ScalarRecords()
    for tag, value, step, walltime in cases:
        data = scalar(tag, value, step, walltime).SerializeToString()
        assert encoder.encode([(tag, value)], step, walltime) == struct.pack("<Q", len(data)) + data, tag
    tags = [tag for tag, *_ in cases]
    for step, walltime, values in [(4, 8, [1.5] * 7), (5, 9, [case[1] for case in cases]), (300, 8, [-3.0] * 7)]:
        # the same tags again (a kept template), with other steps, times and values
        records = [scalar(tag, value, step, walltime).SerializeToString() for tag, value in zip(tags, values)]
        expected = b"".join(struct.pack("<Q", len(data)) + data for data in records)
        assert encoder.encode(list(zip(tags, values)), step, walltime) == expected, step


def test_kept_scalars_are_written_before_later_records_and_on_flush(tmp_path):
    writer = open_log_writer(tmp_path / "vdl")
    for step in (1, 2, 3):
        writer.add_scalars_of_step([("a", step * 0.5), ("b", -step)], step)
    assert writer._pending  # kept, not yet encoded
    writer.add_text("alerts/x", "later", 3)
    writer.add_scalars_of_step([("a", 9.0)], 4)
    writer.flush()
    assert not writer._pending
    _, series = read(tmp_path / "vdl")
    assert {step: r.value for step, r in series("scalar", "a").items()} == {1: 0.5, 2: 1.0, 3: 1.5, 4: 9.0}
    assert {step: r.value for step, r in series("scalar", "b").items()} == {1: -1.0, 2: -2.0, 3: -3.0}
    with open(next((tmp_path / "vdl").glob("vdlrecords.*.log")), "rb") as f:
        data = f.read()
    assert data.index(b"later") > data.rindex(b"\x12\x01b")  # the text after the scalars before it


def test_kept_scalars_reach_the_file_when_a_run_ends_without_flushing(tmp_path):
    import subprocess
    import sys

    script = ("from paddle_edo.monitor.writer import open_log_writer\n"
              f"writer = open_log_writer({str(tmp_path / 'vdl')!r})\n"
              "for step in (1, 2, 3):\n"
              "    writer.add_scalars_of_step([('loss', step / 4)], step)\n"
              "raise SystemExit('the run failed')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 1 and "the run failed" in done.stderr
    _, series = read(tmp_path / "vdl")
    assert {step: r.value for step, r in series("scalar", "loss").items()} == {1: 0.25, 2: 0.5, 3: 0.75}


def test_memory_monitor_logs_the_optimizer_state_it_is_given(tmp_path):
    writer = open_log_writer(tmp_path / "vdl")
    model = paddle.nn.Sequential(DenseEmbedding(10, 4))
    optimizer = paddle.optimizer.Adagrad(0.1, parameters=model.parameters())
    model(paddle.to_tensor([1, 2])).sum().backward()
    optimizer.step()
    MemoryMonitor(writer).log(model, 0, optimizer)
    writer.close()
    _, series = read(tmp_path / "vdl")
    assert series("scalar", "optimizer_state_bytes/0/held")[0].value == 10 * 4 * 4  # one accumulator per value
    assert series("scalar", "optimizer_state_bytes/total/held")[0].value == 160
