"""The architecture as a rule: each package of paddle_edo (or top-level module) sits on a layer and
imports only from layers below it, function-level imports included, so no two import each other,
directly or round a circle."""
import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "paddle_edo"
LAYERS = [  # lowest first; units on one layer do not import each other
    {"errors"},
    # runtime: where computation runs (device, threads, Paddle's OpenMP runtime, MKL's code path): the kernels link
    # its runtime; benchmark: side-by-side timing, which the kernels' calibration takes too
    {"runtime", "benchmark"},
    {"compat", "schema", "kernels", "kmeans", "metrics", "callbacks", "progress", "host_memory"},
    # optim: the table rules, and their states updated by the kernels; keyed_random: draws the kernels make too
    {"budget", "optim", "keyed_random"},
    {"quant", "cache"},
    {"nn"},
    {"memory", "text"},
    {"data"},
    {"export"},
    {"serving"},
    {"models", "monitor"},
    {"checkpoint"},
    {"distributed"},
    {"config"},
    {"engine"},
    {"planner"},
    {"__init__"},  # the package's own namespace
]


def unit_of(path: Path) -> str:
    """'nn' for paddle_edo/nn/*.py, 'config' for paddle_edo/config.py, '__init__' for the package root."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return parts[0]


def imported_units(path: Path) -> set[str]:
    """The paddle_edo units a file imports, anywhere in it."""
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            targets = [prefix] if node.module else [f"{prefix}.{alias.name}" for alias in node.names]
        for target in targets:
            parts = target.split(".")
            if parts[0] == "paddle_edo":
                found.add(parts[1] if len(parts) > 1 else "__init__")
    return found


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        unit = unit_of(path)
        edges.setdefault(unit, set()).update(imported_units(path) - {unit})
    return edges


def test_every_unit_has_a_layer():
    placed = set().union(*LAYERS)
    assert set(graph()) - placed == set(), "add the new package or module to LAYERS"


def test_every_import_goes_to_a_lower_layer():
    level = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
    upward = sorted(f"{unit} imports {other}" for unit, others in graph().items() for other in others
                    if level[other] >= level[unit])
    assert upward == []


def test_the_checker_sees_relative_imports():
    source = PACKAGE / "text" / "tokenizer.py"
    assert "runtime" in imported_units(source)
    assert {"errors", "runtime"} <= graph()["text"]
