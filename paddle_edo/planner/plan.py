"""The planner: for a config and a memory budget, one compression per table (a section under
``embedding.tables``) whose trained tables fit the budget at the least estimated quality cost.

1. A short fp32 run (a quarter of the config's training) gives trained rows and a reference model.
2. Every table's candidates are built from those rows as each layer would hold them (packed formats and
   clustering exactly; shared rows by a least-squares fit) and measured: the bytes the layer holds, and
   the divergence (Bernoulli KL) of the model's validation predictions with that table swapped in.
3. A multiple-choice knapsack over the tables picks, at each step, the saving that costs least per byte,
   low-risk methods first on ties, until the tables fit; what is left of the budget goes back to the
   costliest choices.
4. Row-sharing layers train from scratch, and quantization-aware training recovers part of what packing
   costs, so the costs are estimates: short runs (a tenth of the training each) of the plan, of the best
   plan on the other side of that doubt (without row-sharing layers, or trusting them more) and of every
   table in the least risky packed format that fits check which validates better (on a tie, the plan of
   fewest distinct choices).
"""
from __future__ import annotations

import contextlib
import copy
import gc
import logging
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import paddle
import yaml

from ..budget import device_budget, parse_bytes
from ..config import validate
from ..data import CTRTable, Splits, count_frequencies, load_dataset
from ..engine import Engine
from ..memory import format_bytes, held_bytes, text_table
from ..nn import TableSpec
from ..nn.base import EmbeddingBase, embedding_layers
from ..nn.registry import AUTO
from ..optim import TableOptimizer
from ..quant.codecs import FLOAT_MAX
from ..schema import ConfigError
from .candidates import HASH_FRACTIONS, PACKED_FORMATS, Candidate, check_methods, table_candidates
from .choice import Option, choose
from .divergence import Probe
from .surrogates import fitted_table
from .training import (PURPOSES, other_state_bytes, rule_label, rule_section, state_rules, trained_parts,
                       training_candidate, with_state)

logger = logging.getLogger("paddle_edo")

PROBE_SHARE = 1 / 4        # of the config's training that the probe run takes
CHECK_SHARE = 1 / 10       # and each of the (at most three) check runs: planning aims at one training run
CACHE_COST = 1e-9          # a cached table's cost per missed lookup share: exact rows, only slower
ESTIMATE_DISCOUNT = 0.05   # the alternative plan's view of row-sharing layers: training recovers nearly all
CHECK_TIE = 0.001          # validation AUCs of check runs this close are a tie: far below what a tenth of the
                           # training can separate (MovieLens, 1/4: 0.7203 against 0.7197, tested 0.7868 and 0.7873)


@dataclass(frozen=True)
class Choice:
    """What the plan does with one table: its name, rows and width, the chosen method's label and the
    embedding section that builds it, the bytes in fp32 and as chosen, and its cost (the Bernoulli KL of
    the validation predictions with this table alone changed; ``estimated`` when fit, not trained)."""

    table: str
    rows: int
    dim: int
    label: str
    section: dict[str, Any]
    fp32_bytes: int
    bytes: int
    cost: float        # Bernoulli KL of the validation predictions with this table alone changed
    estimated: bool    # the cost of a layer trained from scratch, estimated by a fit


@dataclass
class Plan:
    """A plan for ``budget`` bytes: a choice per table, the config that trains it, and what was checked."""

    budget: int
    choices: list[Choice]
    smallest_bytes: int
    config: dict[str, Any]
    checks: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    rule: TableOptimizer | None = None  # a training plan's table rule (its state is in each choice's bytes)
    gradient_bytes: int = 0             # and the row gradients a step may hold, outside the choices

    @property
    def bytes(self) -> int:
        return sum(c.bytes for c in self.choices)

    @property
    def fp32_bytes(self) -> int:
        return sum(c.fp32_bytes for c in self.choices)

    @property
    def cost(self) -> float:
        return sum(c.cost for c in self.choices)

    def table(self) -> str:
        """The plan as a table: table, rows, choice, bytes before and after, estimated cost."""
        header = ("table", "rows", "choice", "fp32", "planned", "est. cost (KL)")
        rows = [(c.table, str(c.rows), c.label + (" *" if c.estimated else ""), format_bytes(c.fp32_bytes),
                 format_bytes(c.bytes), f"{c.cost:.2e}") for c in self.choices]
        rows.append(("total", "", "", format_bytes(self.fp32_bytes), format_bytes(self.bytes), f"{self.cost:.2e}"))
        lines = text_table(header, rows, left=(0, 1, 2))
        if self.rule is not None:
            lines.append(f"training: each table (fp32 and planned) with the optimizer state of the table rule "
                         f"{rule_label(self.rule)}; besides, {format_bytes(self.gradient_bytes)} of row gradients a "
                         f"step at most")
        lines.append(f"budget {format_bytes(self.budget)}: the plan holds {self.bytes / self.fp32_bytes:.1%} of the "
                     f"fp32 bytes ({self.fp32_bytes / self.bytes:.1f}x fewer); the smallest reachable is "
                     f"{format_bytes(self.smallest_bytes)}; planned in {self.seconds:.1f} s")
        if any(c.estimated for c in self.choices):
            lines.append("* trained from scratch: its cost is estimated from a least-squares fit of the probe's rows")
        lines.extend(f"check: {c['plan']}: valid auc {c['valid_auc']:.4f} ({format_bytes(c['bytes'])})"
                     + (" <- chosen" if c.get("chosen") else "") for c in self.checks)
        return "\n".join(lines)

    def write(self, path: str | Path) -> Path:
        """The planned config as YAML (written to a temporary name, then renamed): tools/train.py runs it."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(path.name + ".tmp")
        header = "".join(f"# {line}\n" for line in self.table().splitlines())
        temporary.write_text(header + yaml.safe_dump(self.config, sort_keys=False, allow_unicode=True), encoding="utf-8")
        os.replace(temporary, path)
        return path


def budget_of(embedding: dict[str, Any]) -> tuple[int, bool]:
    """(bytes, whether they are a device's) from an auto embedding section's budget or device memory."""
    if embedding.get("budget") is not None:
        return parse_bytes(embedding["budget"], "embedding.budget"), False
    return device_budget(embedding["device_memory"], embedding["reserve"],
                         ("embedding.device_memory", "embedding.reserve")), True


def plan_tables(config: dict[str, Any], budget: int | str | None = None, *, device_memory: int | str | None = None,
                reserve: float | str = 0.3, methods: list[str] | None = None, checks: bool = True,
                sample_rows: int = 1024, splits: Splits | None = None, purpose: str | None = None,
                progress: Callable[[str], None] = logger.info) -> Plan:
    """Plan the tables of a validated ``config`` for ``budget`` bytes (or a ``device_memory`` less its
    ``reserve``; both default to the config's own ``embedding.type: auto`` section). With ``purpose``
    "serving" (the default, or the config's ``embedding.budget_for``) the budget holds the tables as trained
    and packed, as the memory report counts them; with "training" it holds what training holds: each table
    in its training format, the table rule's optimizer state and a step's row gradients (planner/training.py;
    the plan sets ``train.table_optimizer``). With ``device_memory`` the host may keep cached tables' rows.
    Raises ConfigError when no plan fits, saying the smallest reachable size."""
    started = time.perf_counter()
    embedding = config["embedding"]
    purpose = purpose or embedding.get("budget_for") or "serving"
    if purpose not in PURPOSES:
        raise ConfigError(f"plan_tables: purpose = {purpose!r}; expected one of {', '.join(PURPOSES)}")
    if budget is None and device_memory is None:
        if embedding["type"] != AUTO:
            raise ConfigError("plan_tables needs a budget or a device_memory (or a config with embedding.type: auto)")
        limit, device = budget_of(embedding)
    elif budget is not None:
        limit, device = parse_bytes(budget, "budget"), False
    else:
        limit, device = device_budget(device_memory, reserve), True
    allowed = check_methods(methods if methods is not None else embedding.get("methods"))
    splits = splits or load_dataset(config["data"], Path(config["train"]["output_dir"]) / "data")
    progress(f"plan: a probe run of fp32 tables ({PROBE_SHARE:.0%} of the training)")
    with tempfile.TemporaryDirectory() as scratch, _collecting_only_new_objects():
        probe = Engine(_short_run(config, _fp32_embedding(embedding), f"{scratch}/probe", PROBE_SHARE),
                       splits=_short_splits(config, splits, PROBE_SHARE), checkpoints=False)
        probe.train_epochs(validate=False)   # the probe's own sample measures it
        parts: dict = {} if purpose == "training" else None
        options = measure_options(probe, allowed, device, sample_rows, progress, parts)
        rule, gradients = None, 0
        if purpose == "training":
            gradients = sum(probe.gradient_peaks.bound(name, layer) for name, layer in embedding_layers(probe.model))
            rule, options = _training_rule(options, parts, state_rules(config), limit - gradients)
            config = {**config, "train": {**config["train"], "table_optimizer": rule_section(rule)}}
        chosen = choose(options, limit - gradients)
        smallest = sum(min(o.bytes for o in table) for table in options.values()) + gradients
        if chosen is None:
            raise ConfigError(f"budget {limit} bytes ({format_bytes(limit)}) is below the smallest plan these tables "
                              f"reach, {smallest} bytes ({format_bytes(smallest)}"
                              f"{f', training with {rule_label(rule)}' if rule else ''}); allowed methods: "
                              f"{', '.join(allowed)}")
        shapes = {name: (layer.num_embeddings, layer.embedding_dim) for name, layer in embedding_layers(probe.model)}
        del probe
        _free_finished_runs()
        plans = [("plan", chosen)]
        if checks:
            plans += _alternatives(options, chosen, {name: rows for name, (rows, _) in shapes.items()}, limit - gradients)
        check_results = []
        if len(plans) > 1:
            for index, (label, picked) in enumerate(plans):
                progress(f"plan: check run {index + 1} of {len(plans)} ({label})")
                engine = Engine(_short_run(config, _planned_embedding(embedding, picked), f"{scratch}/check{index}",
                                           CHECK_SHARE), splits=_short_splits(config, splits, CHECK_SHARE),
                                checkpoints=False)
                # the plans' packing costs are measured exactly; a check compares what training recovers
                check_results.append({"plan": label, "valid_auc": engine.train_epochs()[-1]["valid_auc"],
                                      "bytes": sum(o.bytes for o in picked.values())})
                del engine
                _free_finished_runs()
            best = _preferred_check(plans, check_results)
            check_results[best]["chosen"] = True
            chosen = plans[best][1]
    choices = [Choice(name, *shapes[name], o.candidate.label, o.candidate.section, options[name][0].bytes, o.bytes,
                      o.cost, o.candidate.estimated) for name, o in chosen.items()]
    planned = {**config, "embedding": _planned_embedding(embedding, chosen)}
    plan = Plan(limit, choices, smallest, _plain(planned), check_results, rule=rule, gradient_bytes=gradients)
    plan.seconds = time.perf_counter() - started
    return plan


def _training_rule(options: dict[str, list[Option]], parts: dict, rules: list[TableOptimizer], limit: int
                   ) -> tuple[TableOptimizer, dict[str, list[Option]]]:
    """The table rule of a training plan, with the options' bytes under it: the first (largest state) with
    which every table fits in fp32; else the one whose plan costs least, the larger state on a tie; the
    smallest when none fits (the caller reports it)."""
    best = None
    for rule in rules:
        priced = with_state(options, parts, rule)
        chosen = choose(priced, limit)
        if chosen is None:
            continue
        cost = sum(o.cost for o in chosen.values())
        if cost == 0:
            return rule, priced
        if best is None or cost < best[0]:
            best = (cost, rule, priced)
    if best is None:
        return rules[-1], with_state(options, parts, rules[-1])
    return best[1], best[2]


def measure_options(probe: Engine, methods: tuple[str, ...], device: bool, sample_rows: int,
                    progress: Callable[[str], None], parts: dict | None = None) -> dict[str, list[Option]]:
    """Each table's candidates of the probe's model with their bytes and cost (the fp32 option first).
    Given ``parts`` (a training plan), the candidates are those a training run holds
    (training_candidate), and ``parts[table, candidate label]`` records the [rows, dim] its table rule trains."""
    reference = Probe(probe, sample_rows)
    optimizer = probe.config["train"]["optimizer"]
    frequencies = count_frequencies(probe.splits.train)
    fields = probe.model.table_fields()
    tables = dict(embedding_layers(probe.model))
    options = {}
    for name, table in tables.items():
        weight = table.weight.numpy()   # one table's copy at a time: the probe's tables may be large
        counts = np.asarray(frequencies[fields[name]], dtype=np.float64)
        rows, sample = reference.compact(fields[name])
        # the field's tables cut to the rows the sample reads (gathered, not copied whole): where packed
        # candidates are measured
        compacted = {other: fitted_table({"type": "dense"}, paddle.gather(tables[other].weight,
                                                                          paddle.to_tensor(rows)).numpy(), counts[rows])
                     for other, field in fields.items() if field == fields[name] and other != name}
        found, fits = [], {}
        within_fp16 = bool(np.abs(weight).max() < FLOAT_MAX["float16"]) if weight.size else True
        candidates = table_candidates(len(weight), weight.shape[1], methods, device, within_fp16)
        if parts is not None:
            candidates = [c for c in map(training_candidate, candidates) if c is not None]
        for candidate in candidates:
            if candidate.section["type"] == "quantized":   # packing is row by row, and so are its bytes
                layer = fitted_table(candidate.section, weight[rows], counts[rows])
                cost = reference.with_tables({**compacted, name: layer}, sample).kl
                found.append(Option(candidate, held_bytes(layer) // len(rows) * len(weight), max(cost, 0.0)))
                trained = ((len(weight), weight.shape[1]),)
            else:
                option, layer = _measure(candidate, weight, counts, name, reference, fits)
                if parts is not None and layer is not None:  # its projections' state, under train.optimizer
                    option = Option(candidate, option.bytes + other_state_bytes(layer, optimizer), option.cost)
                found.append(option)
                trained = ((len(weight), weight.shape[1]),) if layer is None else trained_parts(layer)
            if parts is not None:
                parts[name, candidate.label] = trained
        options[name] = found
        progress(f"plan: {name}: {len(found)} candidates measured")
    return options


def _measure(candidate: Candidate, weight: np.ndarray, counts: np.ndarray, name: str, reference: Probe,
             fits: dict) -> tuple[Option, EmbeddingBase | None]:
    """A candidate's option, and the layer measured for it (None for fp32, which is the probe's own)."""
    if candidate.method == "fp32":
        return Option(candidate, weight.size * 4, 0.0), None
    if candidate.method == "cached":
        layer = TableSpec.from_section({**candidate.section, "dim": weight.shape[1]}).build(len(weight), 0)
        hot = np.sort(counts)[::-1][:layer.cache_rows].sum() / max(counts.sum(), 1.0)
        return Option(candidate, layer.estimated_bytes(), CACHE_COST * (1.0 - hot)), layer
    layer = fitted_table(candidate.section, weight, counts, fits=fits)
    return Option(candidate, held_bytes(layer), max(reference.with_table(name, layer).kl, 0.0)), layer


def _alternatives(options: dict[str, list[Option]], chosen: dict[str, Option], rows: dict[str, int], limit: int
                  ) -> list[tuple[str, dict[str, Option]]]:
    """The plans to check the chosen one against: one from the other side of the estimate's doubt, and
    every table in the one packed format a user would try first, the least risky that fits (the
    knapsack's costs are those of packing trained rows, which quantization-aware training can beat:
    measured on MovieLens at 1/4 of the fp32 bytes, the knapsack's mix of int8 and int4 tested 0.0008
    under int4 QAT on every table). Each differs from the chosen plan and from the other."""
    found: list[tuple[str, dict[str, Option]]] = []
    for label, alternative in (_other_side_of_the_doubt(options, chosen, rows, limit),
                               _one_format_for_every_table(options, chosen, limit)):
        if alternative is None:
            continue
        picked = {name: next(o for o in options[name] if o.candidate == alternative[name].candidate)
                  for name in alternative}
        if all(_candidates(picked) != _candidates(other) for other in [chosen, *(plan for _, plan in found)]):
            found.append((label, picked))
    return found


def _preferred_check(plans: list[tuple[str, dict[str, Option]]], results: list[dict[str, Any]]) -> int:
    """The check run that validated best; among those within CHECK_TIE of it, the plan of fewest distinct
    choices (one format on every table, which a user tries first and serves with one kernel, over a mix the
    short runs cannot tell from it), then the better validated."""
    top = max(r["valid_auc"] for r in results)
    tied = [i for i, r in enumerate(results) if r["valid_auc"] >= top - CHECK_TIE]
    return min(tied, key=lambda i: (len({o.candidate.label for o in plans[i][1].values()}), -results[i]["valid_auc"]))


def _candidates(plan: dict[str, Option]) -> dict[str, Candidate]:
    return {name: option.candidate for name, option in plan.items()}


def _other_side_of_the_doubt(options: dict[str, list[Option]], chosen: dict[str, Option], rows: dict[str, int],
                             limit: int) -> tuple[str, dict[str, Option] | None]:
    """Without row-sharing layers when the chosen plan has them (and one fits); else one that trusts
    training to recover their cost, every table hashed to the budget (sharing rows can even help, where
    most ids are rare: the fit's divergence cannot see it, nor that more buckets train better); else, where
    hashing is not allowed, one that discounts the estimated costs."""
    alternative = None
    if any(o.candidate.estimated for o in chosen.values()):
        alternative = choose({name: [o for o in table if not o.candidate.estimated] for name, table in options.items()},
                             limit)
        label = "without row-sharing layers"
    if alternative is None:
        alternative, label = _hashed_to_the_budget(options, chosen, rows, limit)
    if alternative is None:
        discounted = {name: [Option(o.candidate, o.bytes, o.cost * (ESTIMATE_DISCOUNT if o.candidate.estimated else 1))
                             for o in table] for name, table in options.items()}
        alternative = choose(discounted, limit)
        label = f"row-sharing costs x {ESTIMATE_DISCOUNT:g}"
    return label, alternative


def _one_format_for_every_table(options: dict[str, list[Option]], chosen: dict[str, Option], limit: int
                                ) -> tuple[str, dict[str, Option] | None]:
    """Every table in the least risky packed format with which the tables fit (a table without that
    format, as one whose rows are too narrow for it, as chosen)."""
    for method in PACKED_FORMATS:
        plan = {name: next((o for o in table if o.candidate.method == method), chosen[name])
                for name, table in options.items()}
        label = next((o.candidate.label for o in plan.values() if o.candidate.method == method), None)
        if label is not None and sum(o.bytes for o in plan.values()) <= limit:
            return f"every table {label} where it has that format", plan
    return "", None


def _hashed_to_the_budget(options: dict[str, list[Option]], chosen: dict[str, Option], rows: dict[str, int],
                          limit: int) -> tuple[dict[str, Option] | None, str]:
    """Every table that may hash its ids hashed to the same share of its rows, the largest share (fp32
    inner tables first, then packed ones) with which the tables fit; the other tables as chosen."""
    for fraction in HASH_FRACTIONS:
        for level, inner in enumerate(("fp32", "packed")):
            plan = dict(chosen)
            for name, table in options.items():
                hashed = sorted((o for o in table if o.candidate.method == "hash"
                                 and o.candidate.section["num_buckets"] == math.ceil(rows[name] * fraction)),
                                key=lambda o: -o.bytes)
                if len(hashed) > level:
                    plan[name] = hashed[level]
            if plan != chosen and sum(o.bytes for o in plan.values()) <= limit:
                return plan, f"every table hashed to {fraction:g} of its rows, {inner} inner tables"
    return None, ""


def _free_finished_runs() -> None:
    """Free the tables and optimizer state of runs no longer referenced now (an Engine's references go
    round in cycles, so they would wait for the garbage collector): the next run reuses that memory
    instead of faulting fresh pages (measured: a check run's steps and validation 2.4 s, 0.66 s after)."""
    gc.collect()


@contextlib.contextmanager
def _collecting_only_new_objects() -> Iterator[None]:
    """Within, collections skip the objects that existed before (``gc.freeze``: a collection between the
    planner's runs took 0.12 s over Paddle's and the program's objects, 0.04 s with them frozen); unless
    the process had frozen objects of its own, which unfreezing would release."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _fp32_embedding(embedding: dict[str, Any]) -> dict[str, Any]:
    return {"type": "dense", "dim": embedding["dim"], "sparse": embedding["sparse"]}


def _planned_embedding(embedding: dict[str, Any], chosen: dict[str, Option]) -> dict[str, Any]:
    """The embedding section of a plan: fp32 by default, each changed table its own section."""
    tables = {name: dict(o.candidate.section) for name, o in chosen.items() if o.candidate.method != "fp32"}
    return {**_fp32_embedding(embedding), "tables": tables}


def _short_run(config: dict[str, Any], embedding: dict[str, Any], output_dir: str, share: float) -> dict[str, Any]:
    """The config of a probe or check run: ``share`` of the training (whole epochs here, the rest by
    _short_splits), quiet, no monitor, no checkpoint kept."""
    raw = copy.deepcopy(config)
    raw["embedding"] = embedding
    raw["train"].update(epochs=max(1, math.floor(config["train"]["epochs"] * share)), output_dir=output_dir,
                        log_every_steps=10 ** 9, resume=False, checkpoint_every_steps=0)
    raw["monitor"]["enable"] = False
    return validate(_plain(raw))


def _short_splits(config: dict[str, Any], splits: Splits, share: float) -> Splits:
    """The splits of a short run over ``share`` of the training: where whole epochs would be more, a seeded
    share of the training rows."""
    epochs = config["train"]["epochs"]
    share = epochs * share / max(1, math.floor(epochs * share))
    if share >= 1 or not isinstance(splits.train, CTRTable):
        return splits
    rows = np.sort(np.random.default_rng(config["train"]["seed"]).permutation(len(splits.train))
                   [:max(1, int(len(splits.train) * share))])
    return Splits(splits.train.take(rows), splits.valid, splits.test, splits.extra, splits.vocabularies, splits.plan)


def _plain(value: Any) -> Any:
    """A config as plain YAML types (tuples to lists), for dumping and validating again."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
