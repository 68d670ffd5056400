"""Choosing one option per table under a byte budget at the least summed cost (a multiple-choice
knapsack): walk every table's lower convex hull of (bytes, cost), always taking the step that gives up the
least cost per byte saved, until the tables fit; then spend what is left of the budget on the tables
whose choice costs most."""
from __future__ import annotations

from dataclasses import dataclass

from .candidates import Candidate


@dataclass(frozen=True)
class Option:
    """A candidate for one table, measured: the bytes it would hold and its estimated cost."""

    candidate: Candidate
    bytes: int
    cost: float


def convex_hull(options: list[Option]) -> list[Option]:
    """From the largest option down, the options on the lower convex hull of (bytes, cost): each next step
    saves bytes at the lowest cost per byte, and no option off the hull is both smaller and cheaper."""
    ordered = sorted(options, key=lambda o: (-o.bytes, o.cost, o.candidate.risk))
    hull = [ordered[0]]
    while True:
        last = hull[-1]
        smaller = [o for o in ordered if o.bytes < last.bytes]
        if not smaller:
            return hull
        hull.append(min(smaller, key=lambda o: (slope(last, o), o.candidate.risk, -o.bytes)))


def slope(larger: Option, smaller: Option) -> float:
    """Cost given up per byte saved, going from ``larger`` to ``smaller``."""
    return (smaller.cost - larger.cost) / (larger.bytes - smaller.bytes)


def choose(options: dict[str, list[Option]], budget: int) -> dict[str, Option] | None:
    """The option of each table (keys of ``options``) whose bytes sum to at most ``budget`` at a low summed
    cost; None when even the smallest options do not fit."""
    if sum(min(o.bytes for o in table) for table in options.values()) > budget:
        return None
    hulls = {name: convex_hull(table) for name, table in options.items()}
    position = {name: 0 for name in options}
    total = sum(hull[0].bytes for hull in hulls.values())
    while total > budget:
        steps = [(slope(hull[position[name]], hull[position[name] + 1]), hull[position[name] + 1].candidate.risk, name)
                 for name, hull in hulls.items() if position[name] + 1 < len(hull)]
        _, _, name = min(steps)
        total -= hulls[name][position[name]].bytes - hulls[name][position[name] + 1].bytes
        position[name] += 1
    chosen = {name: hulls[name][position[name]] for name in options}
    return spend_slack(chosen, options, budget)


def spend_slack(chosen: dict[str, Option], options: dict[str, list[Option]], budget: int) -> dict[str, Option]:
    """Upgrade tables, costliest choice first, to their cheapest option that still fits the budget."""
    chosen = dict(chosen)
    for name in sorted(chosen, key=lambda n: -chosen[n].cost):
        room = budget - sum(o.bytes for o in chosen.values()) + chosen[name].bytes
        fitting = [o for o in options[name] if o.bytes <= room]
        best = min(fitting, key=lambda o: (o.cost, o.candidate.risk, o.bytes))
        if best.cost < chosen[name].cost:
            chosen[name] = best
    return chosen
