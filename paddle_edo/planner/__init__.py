"""Per-table compression chosen for a memory budget (``tools/plan.py``, ``embedding.type: auto``), and the
measured cost of a compression: the divergence it causes in a trained model's predictions."""
from .candidates import METHODS, Candidate, table_candidates
from .choice import Option, choose
from .divergence import Divergence, Probe, bernoulli_kl
from .plan import Choice, Plan, plan_tables
from .surrogates import fitted_table

__all__ = ["METHODS", "Candidate", "Choice", "Divergence", "Option", "Plan", "Probe", "bernoulli_kl", "choose",
           "fitted_table", "plan_tables", "table_candidates"]
