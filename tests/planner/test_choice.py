"""The knapsack over tables: within the budget, the cheapest saving per byte first, slack spent back."""
import itertools

import numpy as np
import pytest

from paddle_edo.planner import Candidate, Option, choose
from paddle_edo.planner.choice import convex_hull


def option(method, bytes_, cost):
    return Option(Candidate(method, f"{method} {bytes_}", {"type": "dense"}), bytes_, cost)


def random_tables(rng, tables=4, per_table=5):
    found = {}
    for t in range(tables):
        size = int(rng.integers(1000, 10000))
        options = [option("fp32", size, 0.0)]
        for k in range(per_table):
            options.append(option(["int8", "int4", "hash", "qr", "binary"][k], int(size * rng.uniform(0.02, 0.9)),
                                  float(rng.uniform(0, 1))))
        found[f"t{t}"] = options
    return found


def brute_force(tables, budget):
    best = None
    for combination in itertools.product(*tables.values()):
        if sum(o.bytes for o in combination) <= budget:
            cost = sum(o.cost for o in combination)
            best = cost if best is None else min(best, cost)
    return best


def test_the_hull_keeps_only_savings_that_no_smaller_cheaper_option_beats():
    options = [option("fp32", 100, 0.0), option("int8", 60, 0.1), option("int4", 50, 0.5), option("hash", 40, 0.2),
               option("qr", 10, 1.0)]
    hull = convex_hull(options)
    assert [o.bytes for o in hull] == [100, 60, 40, 10]   # int4 costs more than hash, which is smaller


def test_plans_fit_the_budget_and_come_close_to_the_best_possible():
    rng = np.random.default_rng(0)
    gaps = []
    for _ in range(30):
        tables = random_tables(rng)
        full = sum(t[0].bytes for t in tables.values())
        budget = int(full * rng.uniform(0.1, 0.6))
        chosen = choose(tables, budget)
        optimum = brute_force(tables, budget)
        if optimum is None:
            assert chosen is None
            continue
        assert sum(o.bytes for o in chosen.values()) <= budget
        gaps.append(sum(o.cost for o in chosen.values()) - optimum)
    assert min(gaps) >= -1e-12                      # never better than the optimum: the accounting is honest
    assert np.median(gaps) <= 0.05                  # and usually at it


def test_a_budget_the_smallest_options_miss_gives_none():
    tables = {"a": [option("fp32", 100, 0.0), option("int8", 30, 0.1)], "b": [option("fp32", 50, 0.0)]}
    assert choose(tables, 79) is None
    assert {n: o.bytes for n, o in choose(tables, 80).items()} == {"a": 30, "b": 50}


def test_free_savings_come_first_and_ties_go_to_the_less_risky_method():
    tables = {"a": [option("fp32", 100, 0.0), option("hash", 50, 0.0), option("fp16", 50, 0.0)],
              "b": [option("fp32", 100, 0.0), option("int4", 30, 0.3)]}
    chosen = choose(tables, 150)
    assert chosen["a"].candidate.method == "fp16" and chosen["b"].candidate.method == "fp32"


def test_what_the_budget_leaves_goes_back_to_the_costliest_choice():
    # binary saves more per unit of cost than int8, so the hull skips int8; once binary fits with room to
    # spare, the room takes int8 back
    tables = {"a": [option("fp32", 100, 0.0), option("int8", 50, 0.05), option("binary", 5, 0.06)],
              "b": [option("fp32", 30, 0.0)]}
    assert [o.bytes for o in convex_hull(tables["a"])] == [100, 5]
    assert choose(tables, 85)["a"].candidate.method == "int8"
    assert choose(tables, 70)["a"].candidate.method == "binary"
