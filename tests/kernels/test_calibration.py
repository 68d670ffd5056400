"""The first lookup of each class times the native kernel against Paddle's composite ops and the faster
serves from then on, recorded beside the extension per machine; both paths give the same values."""
import json
import subprocess
import sys

import numpy as np
import paddle
import paddle.nn.functional as F
import pytest

from paddle_edo.errors import EdoIndexError, EdoValueError
from paddle_edo import kernels
from paddle_edo.kernels import calibration, fused_ops, kernel_isa
from paddle_edo.nn import DenseEmbedding, EmbeddingBag, QuantizedEmbedding
from paddle_edo.runtime import processor_name

pytestmark = pytest.mark.skipif(fused_ops() is None, reason="the native kernels cannot be built here")


@pytest.fixture
def timings(tmp_path, monkeypatch):
    """Calibration on, its records in a file of the test's own, nothing known yet; counts the timings."""
    monkeypatch.setenv(calibration.SETTING, "calibrate")
    path = tmp_path / calibration.RECORDS
    monkeypatch.setattr(calibration, "records_file", lambda: path)
    monkeypatch.setattr(calibration, "_records", {})
    monkeypatch.setattr(calibration, "_served", calibration.Counter())
    timed = []
    real = calibration._record

    def counted(key, record):
        timed.append(key)
        return real(key, record)

    monkeypatch.setattr(calibration, "_record", counted)
    return path, timed


def _forget_in_process(monkeypatch):
    """As a new process finds it: nothing read yet."""
    monkeypatch.setattr(calibration, "_records", {})


def _table(rows=2048, dim=16, **options):
    paddle.seed(0)
    table = DenseEmbedding(rows, dim, init_std=1.0, **options)
    table.eval()
    return table


def _ids(rows, shape, seed=0):
    return paddle.to_tensor(np.random.default_rng(seed).integers(0, rows, shape))


def test_the_first_lookup_of_a_class_times_both_paths_and_the_faster_serves_after(timings):
    path, timed = timings
    table, ids = _table(), _ids(2048, (64, 8))
    with paddle.no_grad():
        first, second = table(ids), table(ids)
    expected = F.embedding(ids, table.weight).numpy()
    np.testing.assert_array_equal(first.numpy(), expected)
    np.testing.assert_array_equal(second.numpy(), expected)
    key = calibration.LookupClass("gather", "float32", 16, 2048 * 16 * 4, 512).key
    assert timed == [key]  # once, for two calls
    record = json.loads(path.read_text())[calibration.machine()][key]
    assert record["path"] == ("fused" if record["fused_ms"] <= record["composite_ms"] else "composite")
    assert calibration.served()[key]["calls"] == {record["path"]: 2}
    assert calibration.served()[key]["fused_ms"] == record["fused_ms"]


def test_the_class_goes_by_powers_of_two_of_ids_and_table_bytes(timings):
    _, timed = timings
    table = _table()
    with paddle.no_grad():
        table(_ids(2048, (500,)))
        table(_ids(2048, (520,), seed=1))    # 2^9 ids either way: no new timing
        table(_ids(2048, (4000,), seed=2))   # 2^12: timed
    assert len(timed) == 2
    assert {calibration.LookupClass("gather", "float32", 16, 131072, n).key for n in (500, 520, 4000)} \
        == set(calibration.served())


def test_a_new_process_takes_the_recorded_path_without_timing(timings, monkeypatch):
    path, timed = timings
    table, ids = _table(), _ids(2048, (300,))
    with paddle.no_grad():
        table(ids)
    _forget_in_process(monkeypatch)
    with paddle.no_grad():
        table(ids)
    assert len(timed) == 1
    assert calibration.records() == json.loads(path.read_text())[calibration.machine()]


def _record(path, key, chosen, machine=None):
    everything = json.loads(path.read_text()) if path.exists() else {}
    everything.setdefault(machine or calibration.machine(), {})[key] = {
        "path": chosen, "fused_ms": 2.0 if chosen == "composite" else 1.0, "composite_ms": 1.5}
    path.write_text(json.dumps(everything))


def test_where_paddles_ops_were_faster_they_serve_and_still_refuse_bad_ids(timings):
    path, timed = timings
    table = _table(padding_idx=5)
    ids = _ids(2048, (40, 10))
    ids[0, 0] = 5
    _record(path, calibration.LookupClass("gather", "float32", 16, 131072, 400).key, "composite")
    with paddle.no_grad():
        rows = table(ids)
        np.testing.assert_array_equal(rows.numpy(), F.embedding(ids, table.weight, padding_idx=5).numpy())
        assert not rows.numpy()[0, 0].any()
        for bad in (-1, 2048):
            wrong = ids.clone()
            wrong[3, 3] = bad
            with pytest.raises(EdoIndexError, match=rf"{table.full_name()}: id {bad} is out of range \[0, 2048\)"):
                table(wrong)
    assert timed == []
    assert set(calibration.served().popitem()[1]["calls"]) == {"composite"}


def _serve_the_other_path(path, key):
    """Record for ``key`` the path that did not serve, as a process that timed otherwise would have."""
    _record(path, key, "composite" if calibration.records()[key]["path"] == "fused" else "fused")
    calibration._records.clear()


@pytest.mark.parametrize("storage", ["int8", "int4", "fp16"])
def test_a_packed_tables_lookups_are_the_same_on_either_path(timings, storage):
    path, timed = timings
    paddle.seed(1)
    packed = QuantizedEmbedding.from_embedding(paddle.nn.Embedding(3000, 24), storage)
    packed.eval()
    ids = _ids(3000, (64, 4))
    with paddle.no_grad():
        first = packed(ids).numpy()
        (key,) = calibration.served()
        _serve_the_other_path(path, key)
        other = packed(ids).numpy()
        with pytest.raises(EdoIndexError, match="id -3 is out of range"):
            packed(paddle.to_tensor([[1, -3, 2, 0]]))
    np.testing.assert_array_equal(first, other)
    assert len(timed) == 1
    assert set(calibration.served()[key]["calls"]) == {"fused", "composite"}


def test_bags_pool_the_same_on_either_path(timings):
    path, _ = timings
    paddle.seed(2)
    bag = EmbeddingBag(1000, 8, "sum", padding_idx=0)
    bag.eval()
    ids = _ids(1000, (50, 6))
    weights = paddle.rand([50, 6])
    with paddle.no_grad():
        first = bag(ids, per_sample_weights=weights).numpy()
        key = next(key for key in calibration.served() if key.startswith("bag"))
        _serve_the_other_path(path, key)
        other = bag(ids, per_sample_weights=weights).numpy()
    np.testing.assert_array_equal(first, other)
    assert set(calibration.served()[key]["calls"]) == {"fused", "composite"}


def test_a_bag_in_training_pools_natively_untimed(timings):
    _, timed = timings
    bag = EmbeddingBag(1000, 8, "mean")
    bag.train()
    bag(_ids(1000, (32, 5))).sum().backward()
    assert timed == [] and calibration.served() == {}
    assert bag.table.weight.grad is not None


def test_another_machines_records_are_not_taken(timings):
    path, timed = timings
    key = calibration.LookupClass("gather", "float32", 16, 131072, 256).key
    _record(path, key, "composite", machine="another processor; avx2 kernels; 2 threads")
    with paddle.no_grad():
        _table()(_ids(2048, (256,)))
    assert len(timed) == 1
    everything = json.loads(path.read_text())
    assert everything["another processor; avx2 kernels; 2 threads"][key]["path"] == "composite"  # kept
    assert key in everything[calibration.machine()]


def test_another_thread_count_is_timed_apart(timings):
    from paddle_edo.runtime import set_num_threads

    _, timed = timings
    table, ids = _table(), _ids(2048, (256,))
    threads = calibration.c_function("edo_openmp_threads")()
    try:
        for count in (1, 2, 1):
            set_num_threads(count)
            with paddle.no_grad():
                table(ids)
    finally:
        set_num_threads(threads)
    assert len(timed) == 2  # one a thread count, whose records each machine key keeps
    assert {"1 threads", "2 threads"} == {key.rsplit("; ", 1)[1] for key in calibration._records}


def test_a_file_cut_short_is_timed_again_and_rewritten(timings):
    path, timed = timings
    path.write_text('{"half a rec')
    with paddle.no_grad():
        _table()(_ids(2048, (256,)))
    assert len(timed) == 1 and calibration.machine() in json.loads(path.read_text())


def test_a_cache_that_cannot_be_written_keeps_the_timing_for_the_process(timings, monkeypatch, caplog):
    _, timed = timings
    monkeypatch.setattr(calibration, "records_file", lambda: calibration.Path("/proc/no/such/kernel_paths.json"))
    table, ids = _table(), _ids(2048, (256,))
    with paddle.no_grad():
        table(ids)
        table(ids)
    assert len(timed) == 1
    assert "could not be written" in caplog.text


def test_forget_drops_this_machines_records_only(timings):
    path, _ = timings
    _record(path, "elsewhere", "fused", machine="another processor")
    with paddle.no_grad():
        _table()(_ids(2048, (256,)))
    assert calibration.forget() == 1
    assert calibration.records() == {}
    assert json.loads(path.read_text()) == {"another processor": {"elsewhere": {
        "path": "fused", "fused_ms": 1.0, "composite_ms": 1.5}}}


def test_every_thread_count_of_this_processor_is_listed_and_forgotten(timings):
    path, _ = timings
    here = calibration.machine().rsplit("; ", 1)[0]
    elsewhere = "another processor; avx2 kernels; 2 threads"
    for key, machine in (("a", f"{here}; 1 threads"), ("b", f"{here}; 3 threads"), ("c", f"{here}; 3 threads"),
                         ("d", elsewhere)):
        _record(path, key, "fused", machine=machine)
    assert {machine: set(mine) for machine, mine in calibration.timed_here().items()} == {
        f"{here}; 1 threads": {"a"}, f"{here}; 3 threads": {"b", "c"}}
    assert calibration.forget() == 3
    assert list(json.loads(path.read_text())) == [elsewhere]


def test_with_paths_fused_the_kernels_serve_untimed(timings, monkeypatch):
    _, timed = timings
    monkeypatch.setenv(calibration.SETTING, "fused")
    with paddle.no_grad():
        _table()(_ids(2048, (256,)))
    assert timed == []
    assert set(calibration.served().popitem()[1]["calls"]) == {"fused"}


def test_an_unknown_setting_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv(calibration.SETTING, "fastest")
    with pytest.raises(EdoValueError, match="PADDLE_EDO_KERNEL_PATHS='fastest': expected one of calibrate, fused"):
        with paddle.no_grad():
            _table()(_ids(2048, (8,)))


def test_a_program_traced_to_take_the_kernels_takes_them_untimed(timings, tmp_path):
    _, timed = timings
    paddle.seed(3)
    packed = QuantizedEmbedding.from_embedding(paddle.nn.Embedding(500, 8), "int8")
    packed.eval()
    ids = _ids(500, (16, 3))
    with paddle.no_grad():
        eager = packed(ids).numpy()
    timed.clear()
    spec = [paddle.static.InputSpec([None, 3], "int64")]
    with kernels.fused_static_programs():
        static = paddle.jit.to_static(packed, input_spec=spec, full_graph=True)
        np.testing.assert_array_equal(static(ids).numpy(), eager)
    assert timed == []
    assert "decode int8 -> float32, dim 8, table ~2^13 bytes, in static programs" in calibration.served()


def test_the_module_lists_the_timed_classes():
    listed = subprocess.run([sys.executable, "-m", "paddle_edo.kernels"], capture_output=True, text=True,
                            check=True).stdout
    assert f"native kernels: ready ({kernel_isa()} path); {processor_name()}; {kernel_isa()} kernels\n" in listed
    assert "timed classes of lookup" in listed
