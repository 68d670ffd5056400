import json

import pytest

from tools import bench_capacity


@pytest.fixture
def machine(monkeypatch):
    """A machine that trains tables of up to ``machine.capacity`` rows; the sizes tried, in order."""
    class Machine:
        capacity = 0
        tried: list[int] = []

    def run_trial(kind, rows, *settings):
        Machine.tried.append(rows)
        ok = rows <= Machine.capacity
        return {"rows": rows, "ok": ok, "why": None if ok else "killed", "peak_rss_anon_bytes": 0, "wall_seconds": 0}

    monkeypatch.setattr(bench_capacity, "run_trial", run_trial)
    Machine.tried = []
    return Machine


def search(bracket, start=64):
    return bench_capacity.largest("dense", 64, "uniform", 1, 1, 1, None, 1, start, 0.1, 1, lambda line: None, bracket)


@pytest.mark.parametrize("capacity, tried, largest", [
    (105, [100, 110], 100),                                # the bracket holds: two trials
    (300, [100, 110, 220, 440, 330, 275, 302], 275),  # larger: doubling from its top, then bisection
    (50, [100, 50, 75, 62, 56, 53], 50),              # smaller: halving from its bottom, then bisection
])
def test_a_search_starts_from_an_earlier_searchs_bracket(machine, capacity, tried, largest):
    machine.capacity = capacity
    found = search((100, 110))
    assert machine.tried == tried and found["largest_rows"] == largest
    assert found["smallest_failing_rows"] / found["largest_rows"] <= 1.1


def test_without_a_bracket_the_search_doubles_from_its_start(machine):
    machine.capacity = 300
    assert search(None)["largest_rows"] == 288 and machine.tried[:4] == [64, 128, 256, 512]


def test_brackets_come_from_a_reports_finished_searches(tmp_path):
    report = tmp_path / "capacity.json"
    report.write_text(json.dumps({"searches": {"zipf": {
        "a": {"largest_rows": 100, "smallest_failing_rows": 110},
        "stopped by hand": {"largest_rows": 100, "smallest_failing_rows": None},
        "given sizes": {"largest_rows": 100, "smallest_failing_rows": 200, "searched": False}}}}))
    assert bench_capacity.brackets_of(report) == {"a": (100, 110)}
