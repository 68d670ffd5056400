"""The monitor's native kernels (kernels/row_norms.cc) against their numpy references, on random data:
coverage marking and the running medians of the norm-spike alert."""
import numpy as np
import pytest

from paddle_edo import kernels
from paddle_edo.monitor.coverage import Coverage
from paddle_edo.monitor.alerts import running_medians


def without_kernel(monkeypatch, name):
    assert kernels.c_function(name) is not None  # built by `make test` (a C++ compiler is at hand)
    monkeypatch.setitem(kernels._functions, name, None)


def test_native_coverage_marks_as_numpy_does(monkeypatch):
    rng = np.random.default_rng(7)
    sizes = {"a": 50, "b": 7, "c": 300}

    def run():
        coverage = Coverage()
        coverage.batch_steps = 5
        for name, size in sizes.items():
            coverage.add(name, size, padding_idx=0 if name == "a" else None)
        seen = []
        for step in range(1, 40):
            names = [n for n in sizes if rng.random() < 0.7]
            coverage.update(step, [(n, rng.integers(0, sizes[n], rng.integers(1, 20))) for n in names])
            if step % 7 == 0:  # a figure asked for between batches
                seen.append([coverage.percent(n) for n in sizes] + [coverage.last_growth_of(n) for n in sizes])
        coverage.flush()
        return coverage, seen

    state = rng.bit_generator.state
    native, native_seen = run()
    without_kernel(monkeypatch, "edo_mark_rows")
    rng.bit_generator.state = state
    reference, reference_seen = run()
    assert native_seen == reference_seen
    np.testing.assert_array_equal(native.flags, reference.flags)
    np.testing.assert_array_equal(native.counts, reference.counts)
    np.testing.assert_array_equal(native.last_growth, reference.last_growth)


@pytest.mark.parametrize("native", [True, False], ids=["native", "numpy"])
def test_running_medians_follow_each_tables_last_maxima(monkeypatch, native):
    if not native:
        without_kernel(monkeypatch, "edo_running_medians")
    rng = np.random.default_rng(3)
    window, tables = 4, 3
    history, counts = np.full((tables, window), np.inf), np.zeros(tables, dtype=np.int64)
    seen: list[list[float]] = [[] for _ in range(tables)]
    for _ in range(30):
        present = np.flatnonzero(rng.random(tables) < 0.8).astype(np.int64)
        maxima = rng.random(present.size) * 10
        medians = running_medians(present, maxima, history, counts, least=3)
        for table, value, median in zip(present, maxima, medians):
            last = seen[table][-window:]
            if len(seen[table]) < 3:
                assert np.isnan(median)
            else:
                assert median == pytest.approx(np.median(last), rel=1e-12)
            seen[table].append(value)
    assert counts.tolist() == [len(values) for values in seen]
