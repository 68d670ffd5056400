"""Planning for training memory (``tools/plan.py --for training``, ``embedding.budget_for: training``): what
a table holds while it trains is its training format (fp32, a low_precision table packed from the start, or
a row-sharing layer's fp32 parts), the optimizer state the table rule keeps for those rows, and a step's
row gradients. The plan chooses the table formats and one table rule's state format together: the state
formats of the config's rule from fp32 down (bf16, 8 bits, then the row-wise rule), each measured within
0.002 test AUC of fp32 Adam (docs/benchmarks.md, "Training memory"), are tried before any table is
compressed further."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..memory import PADDLE_STATES
from ..models.optimizers import OPTIMIZER_CLASSES
from ..nn.collection import fused_layer
from ..nn.registry import AUTO_OPTIONS
from ..optim import TableOptimizer
from ..schema import ConfigError
from .candidates import Candidate
from .choice import Option

PURPOSES = AUTO_OPTIONS["budget_for"].choices  # what a budget holds: the trained tables, or a training run's
TRAINING_FORMATS = ("fp16", "bf16", "int8")  # packed while they train (low_precision); narrower ones train fp32


def training_candidate(candidate: Candidate) -> Candidate | None:
    """The candidate as a training run holds it: packed formats that train packed become low_precision
    tables; those that train an fp32 master (int4 and narrower, quantization-aware), packed inner tables of
    row-sharing layers, and cached tables (planned against a device's memory, where no table rule runs: the
    rules' kernels are the CPU's) save nothing while training or cannot take the rule, so they are left out
    (None)."""
    section = candidate.section
    if candidate.method == "cached" or section.get("storage_format", "fp32") not in ("fp32", *TRAINING_FORMATS):
        return None
    if section["type"] == "quantized":
        return replace(candidate, label=f"{section['storage_format']} low_precision",
                       section={**section, "mode": "low_precision"})
    if section.get("storage_format", "fp32") != "fp32":
        return None
    return candidate


def trained_parts(layer: Any) -> tuple[tuple[int, int], ...]:
    """The [rows, dim] of each fp32 table a table rule trains in ``layer`` (itself, or a composite's
    parts); a packed layer's own rows (a low_precision table's) when it has none."""
    parts = tuple(tuple(part.weight.shape) for part in layer.sublayers(include_self=True) if fused_layer(part))
    return parts or ((layer.num_embeddings, layer.embedding_dim),)


def other_state_bytes(layer: Any, optimizer: str) -> int:
    """The state ``train.optimizer`` keeps for a layer's trained parameters outside its tables (a
    mixed-dimension layer's projections), by the memory report's formula."""
    tables = {id(part.weight) for part in layer.sublayers(include_self=True) if fused_layer(part)}
    per_value, single = PADDLE_STATES[OPTIMIZER_CLASSES[optimizer].__name__]
    return sum((per_value * int(p.size) + single) * p.element_size() for p in layer.parameters()
               if id(p) not in tables and not p.stop_gradient)


def with_state(options: dict[str, list[Option]], parts: dict[tuple[str, str], tuple[tuple[int, int], ...]],
               rule: TableOptimizer) -> dict[str, list[Option]]:
    """Each option's bytes while training under ``rule``: its table and the rule's state for its parts
    (``parts[table, candidate label]``)."""
    return {name: [Option(o.candidate, o.bytes + sum(rule.state_bytes(rows, dim)
                                                      for rows, dim in parts[name, o.candidate.label]), o.cost)
                   for o in table] for name, table in options.items()}


def state_rules(config: dict[str, Any]) -> list[TableOptimizer]:
    """The table rules a training plan may take, from the config's own (its rule and state format) to the
    smallest state: the same rule in bf16 and 8 bits, then its row-wise form (Adam's with 8-bit momentum,
    then without momentum; Adagrad's one fp32 a row). ConfigError when the config's tables do not train
    by a table rule."""
    train = config["train"]
    section = train["table_optimizer"]
    name = section["name"] or train["optimizer"]
    if name not in ("sgd", "adagrad", "adam", "rowwise_adagrad", "rowwise_adam"):
        raise ConfigError(f"a training plan counts the state of a table rule (train.table_optimizer.name, or "
                          f"train.optimizer sgd, adagrad or adam), not train.optimizer = {train['optimizer']!r}")
    rate = train["embedding_learning_rate"] or train["learning_rate"]

    def rule(rule_name: str, state_dtype: str = "float32", beta1: float = section["beta1"]) -> TableOptimizer:
        return TableOptimizer(rule_name, rate, beta1=beta1, beta2=section["beta2"],
                              weight_decay=section["weight_decay"], state_dtype=state_dtype)

    ladder = {"sgd": [rule("sgd")],
              "adagrad": [rule("adagrad"), rule("adagrad", "bfloat16"), rule("adagrad", "int8"),
                          rule("rowwise_adagrad")],
              "rowwise_adagrad": [rule("rowwise_adagrad")],
              "adam": [rule("adam"), rule("adam", "bfloat16"), rule("adam", "int8"), rule("rowwise_adam", "int8"),
                       rule("rowwise_adam", beta1=0.0)],
              "rowwise_adam": [rule("rowwise_adam"), rule("rowwise_adam", "bfloat16"), rule("rowwise_adam", "int8"),
                               rule("rowwise_adam", beta1=0.0)]}[name]
    own = rule(name, section["state_dtype"])
    start = next((i for i, r in enumerate(ladder) if r == own), None)
    return ladder[start:] if start is not None else [own, *ladder]


def rule_section(rule: TableOptimizer) -> dict[str, Any]:
    """The ``train.table_optimizer`` section that applies ``rule``."""
    return {"name": rule.name, "beta1": rule.beta1, "beta2": rule.beta2, "weight_decay": rule.weight_decay,
            "state_dtype": rule.state_dtype}


def rule_label(rule: TableOptimizer) -> str:
    """A rule as people read it: its name, state format, and no first moment where beta1 is 0."""
    return rule.name + ("" if rule.state_dtype == "float32" else f", {rule.state_dtype} state") + \
        (", beta1 0" if rule.name == "rowwise_adam" and rule.beta1 == 0 else "")
