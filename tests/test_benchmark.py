"""Side-by-side timing (paddle_edo/benchmark.py): round-robin rounds, primed calls, candidates timed
elsewhere, and the pause before their turns."""
import time

import pytest

from paddle_edo import benchmark
from paddle_edo.benchmark import TimedElsewhere, side_by_side


@pytest.fixture
def one_priming_call(monkeypatch):
    monkeypatch.setattr(benchmark, "PRIMING_S", 0.0)


def test_side_by_side_runs_round_robin_and_primes_each_timed_call_with_its_own(one_priming_call):
    for primed in (False, True):
        calls = []
        ms = side_by_side({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=3, warmup=1,
                          primed=primed)
        assert set(ms) == {"a", "b"} and all(t >= 0 for t in ms.values())
        per_round = ["a", "a", "b", "b"] if primed else ["a", "b"]
        assert calls == ["a", "b"] + per_round * 3  # warm-up, then each round in turn


def test_a_primed_call_follows_untimed_calls_for_at_least_the_priming_time(monkeypatch):
    monkeypatch.setattr(benchmark, "PRIMING_S", 0.02)
    calls = []

    def five_ms():
        calls.append(time.perf_counter())
        time.sleep(0.005)
    side_by_side({"a": five_ms}, repeats=1, warmup=0, primed=True)
    assert len(calls) >= 5  # 0.02 s of 5 ms calls, then the timed one
    assert calls[-1] - calls[0] >= 0.02


def test_a_candidate_timed_elsewhere_reports_its_own_milliseconds_in_the_same_rounds(one_priming_call):
    calls = []
    reported = iter([5.0, 1.0, 3.0, 2.0])  # a warm-up call, then three rounds

    def elsewhere() -> float:
        calls.append("peer")
        return next(reported)
    ms = side_by_side({"local": lambda: calls.append("local"), "peer": TimedElsewhere(elsewhere)}, repeats=3,
                      warmup=1, primed=True)
    assert ms["peer"] == 2.0  # the median of the three rounds' own times, the warm-up's left out
    assert calls == ["local", "peer"] + ["local", "local", "peer"] * 3  # primed locally, not twice remotely


def test_each_turn_of_a_candidate_timed_elsewhere_starts_with_the_pause(one_priming_call, monkeypatch):
    events = []
    monkeypatch.setattr(benchmark.time, "sleep", lambda s: events.append(("pause", s)))
    side_by_side({"local": lambda: events.append("local"),
                  "peer": TimedElsewhere(lambda: events.append("peer") or 1.0, settle_s=0.25)},
                 repeats=2, warmup=0, primed=True)
    assert events == ["local", "local", ("pause", 0.25), "peer"] * 2
