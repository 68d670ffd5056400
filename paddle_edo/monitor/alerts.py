"""The monitor's alerts: NaN/Inf row gradients, norm spikes against a running median, dense gradients
and stalled coverage; each written to VisualDL's text tab and logged once per table and kind."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..kernels import address, c_function
from .row_gradients import GradientSummary

logger = logging.getLogger("paddle_edo")


@dataclass
class AlertSettings:
    """When a monitor raises an alert (``monitor.alerts`` in a config): NaN or Inf in a table's row
    gradients (``nan``); a largest row-gradient norm above ``norm_factor`` times its running median over
    the last ``norm_window`` logged steps; a table that received a dense gradient (``dense_gradient``); no
    newly updated row for ``coverage_patience`` steps while some rows were never updated."""

    nan: bool = True                 # NaN / Inf in row gradients
    norm_factor: float = 10.0        # a max row-gradient norm above factor x its running median
    dense_gradient: bool = True      # a table that received a dense gradient
    coverage_patience: int = 2000    # steps without a newly updated row (while coverage < 100%)
    norm_window: int = 50            # logged steps the running median looks back over


class Alerts:
    """The alerts of one monitor over its tables, written to ``writer``; ``log`` keeps (step, kind,
    message) of every alert raised."""

    def __init__(self, settings: AlertSettings, writer: Any) -> None:
        self.settings, self.writer = settings, writer
        self.log: list[tuple[int, str, str]] = []
        self.reset(0)

    def reset(self, num_tables: int) -> None:
        """Forget what was alerted and the running medians, for ``num_tables`` gradient tables."""
        self._alerted: dict[str, set] = {}
        self._norm_history = np.full((num_tables, self.settings.norm_window), np.inf)
        self._norm_count = np.zeros(num_tables, dtype=np.int64)

    def raise_(self, name: str, step: int, kind: str, message: str, enabled: bool, once: bool = True) -> None:
        """Record and write an alert of ``kind`` for table ``name`` (``once``: only its first)."""
        alerted = self._alerted.setdefault(name, set())
        if not enabled or (once and kind in alerted):
            return
        self.log.append((step, kind, message))
        self.writer.add_text(f"alerts/{name}", f"[{kind}] {message}", step)
        if kind not in alerted:
            logger.warning("monitor alert: %s", message)  # printed once per table and kind
        alerted.add(kind)

    def check_spikes(self, step: int, found: list[tuple[int, GradientSummary]], names: list[str]) -> None:
        """Alert on a max row norm above ``norm_factor`` x the median of that table's last maxima
        (``found``: (table index, summary) of the tables read at this step)."""
        found = [(index, s.max) for index, s in found if s.norms.size]
        if not found:
            return
        medians = running_medians(np.array([index for index, _ in found], dtype=np.int64),
                                  np.array([value for _, value in found], dtype=np.float64),
                                  self._norm_history, self._norm_count)
        for (index, value), median in zip(found, medians.tolist()):
            if median > 0 and value > self.settings.norm_factor * median:
                name = names[index]
                self.raise_(name, step, "norm_spike", f"{name}: max row-gradient norm {value:.4g} at step "
                            f"{step} is {value / median:.1f}x its running median {median:.4g}", True, once=False)


def running_medians(tables: np.ndarray, maxima: np.ndarray, history: np.ndarray, counts: np.ndarray,
                    least: int = 5) -> np.ndarray:
    """The median of each table's last maxima (``history[table]``, a ring of the window's length whose
    empty places are +inf; NaN before ``least`` maxima), before this step's ``maxima`` join the rings and
    ``counts`` grow. Native when the kernels are at hand; numpy is the reference."""
    medians = np.empty(len(tables))
    kernel = c_function("edo_running_medians")
    if kernel is not None:
        kernel(len(tables), address(tables), address(maxima), history.shape[1], least, address(history),
               address(counts), address(medians))
        return medians
    window = history.shape[1]
    ordered = np.sort(history[tables], axis=1)   # empty places last
    filled = np.minimum(counts[tables], window)
    lines = np.arange(len(tables))
    medians = (ordered[lines, np.maximum(filled - 1, 0) // 2] + ordered[lines, filled // 2]) / 2
    medians[counts[tables] < least] = np.nan
    history[tables, counts[tables] % window] = maxima
    counts[tables] += 1
    return medians
