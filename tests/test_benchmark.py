"""Side-by-side timing (paddle_edo/benchmark.py): round-robin rounds, and primed calls."""
from paddle_edo.benchmark import side_by_side


def test_side_by_side_runs_round_robin_and_primes_each_timed_call_with_its_own():
    for primed in (False, True):
        calls = []
        ms = side_by_side({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=3, warmup=1,
                          primed=primed)
        assert set(ms) == {"a", "b"} and all(t >= 0 for t in ms.values())
        per_round = ["a", "a", "b", "b"] if primed else ["a", "b"]
        assert calls == ["a", "b"] + per_round * 3  # warm-up, then each round in turn
