"""Side-by-side timing (paddle_edo/benchmark.py): round-robin rounds, and primed calls."""
from paddle_edo.benchmark import TimedElsewhere, side_by_side


def test_side_by_side_runs_round_robin_and_primes_each_timed_call_with_its_own():
    for primed in (False, True):
        calls = []
        ms = side_by_side({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=3, warmup=1,
                          primed=primed)
        assert set(ms) == {"a", "b"} and all(t >= 0 for t in ms.values())
        per_round = ["a", "a", "b", "b"] if primed else ["a", "b"]
        assert calls == ["a", "b"] + per_round * 3  # warm-up, then each round in turn


def test_a_candidate_timed_elsewhere_reports_its_own_milliseconds_in_the_same_rounds():
    calls = []
    reported = iter([5.0, 1.0, 3.0, 2.0])  # a warm-up call, then three rounds

    def elsewhere() -> float:
        calls.append("peer")
        return next(reported)
    ms = side_by_side({"local": lambda: calls.append("local"), "peer": TimedElsewhere(elsewhere)}, repeats=3,
                      warmup=1, primed=True)
    assert ms["peer"] == 2.0  # the median of the three rounds' own times, the warm-up's left out
    assert calls == ["local", "peer"] + ["local", "local", "peer"] * 3  # primed locally, not twice remotely
