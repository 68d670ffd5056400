"""paddle_edo: embedding tables that cost less memory, for PaddlePaddle.

Names load on first use, so parts that need no Paddle (``paddle_edo.serving``'s table store, the data
plan's vocabularies) import without it."""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {"ConfigError": "schema", "load_config": "config", "memory_report": "memory",
            "dequantize_model": "nn.convert", "quantize": "nn.convert", "export_tables": "serving.export",
            "plan_tables": "planner.plan"}

__all__ = [*_EXPORTS, "nn", "__version__"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    if name == "nn":
        return importlib.import_module(".nn", __name__)
    raise AttributeError(f"module 'paddle_edo' has no attribute {name!r}")
