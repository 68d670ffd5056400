"""Optimizers of embedding tables that are applied to the rows a batch touched, outside Paddle's optimizer:
the rules, their hyper-parameters and the state each keeps per table (``rules.py``)."""
from .rules import FUSED_RULES, STATE_DTYPES, TableOptimizer

__all__ = ["FUSED_RULES", "STATE_DTYPES", "TableOptimizer"]
