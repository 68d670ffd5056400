"""SparseGradMonitor: sparse-gradient health of every embedding table, written to VisualDL.

Per table: rows touched per step, coverage (share of rows ever updated), rows never updated and their
share of lookups in evaluation data, row-gradient L2 norms (mean, max, p99, histogram), NaN/Inf rows,
update-to-weight ratio; alerts for NaN/Inf, norm spikes, dense gradients and stalled coverage.
"""
from __future__ import annotations

import collections
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import paddle

from ..callbacks import Callback
from ..memory import embedding_layers
from ..nn.base import table_settings
from .row_gradients import RowGradients, read_row_gradients

logger = logging.getLogger("paddle_edo")


@dataclass
class AlertSettings:
    nan: bool = True                 # NaN / Inf in row gradients
    norm_factor: float = 10.0        # a max row-gradient norm above factor x its running median
    dense_gradient: bool = True      # a table that received a dense gradient
    coverage_patience: int = 2000    # steps without a newly updated row (while coverage < 100%)
    norm_window: int = 50            # logged steps the running median looks back over


@dataclass
class _Table:
    name: str
    layer: paddle.nn.Layer
    seen: np.ndarray
    padding_idx: int | None
    norm_history: collections.deque
    last_growth_step: int = 0
    alerted: set = field(default_factory=set)
    pending: RowGradients | None = None
    weights_before: paddle.Tensor | None = None


def table_rows(layer: paddle.nn.Layer, rows: np.ndarray) -> paddle.Tensor:
    """Current fp32 values of some rows of a table."""
    index = paddle.to_tensor(rows)
    if getattr(layer, "decode_rows", None) is not None and getattr(layer, "packed", False):
        return layer.decode_rows(index)
    return paddle.gather(layer.weight.detach(), index)


def percentile_of_sorted(ordered: np.ndarray, q: float) -> float:
    """np.percentile's default (linear) for an already sorted array, without its per-call overhead."""
    position = (len(ordered) - 1) * q / 100.0
    low = int(np.floor(position))
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (position - low))


class SparseGradMonitor(Callback):
    """Engine callback (or by hand: ``step(model, step)`` after backward, ``step_end(model, step)``
    after the optimizer step) that logs every ``every_n_steps`` steps and tracks coverage on every step."""

    def __init__(self, writer: Any, every_n_steps: int = 10, alerts: AlertSettings | None = None,
                 histogram_every_n_steps: int = 100) -> None:
        for name, value in (("every_n_steps", every_n_steps), ("histogram_every_n_steps", histogram_every_n_steps)):
            if value < 0 or (name == "every_n_steps" and value < 1):
                raise ValueError(f"SparseGradMonitor: {name} = {value} must be >= 1 (histograms: 0 turns them off)")
        self.writer = writer
        self.every_n_steps = every_n_steps
        self.alerts = alerts or AlertSettings()
        self.histogram_every_n_steps = histogram_every_n_steps
        self.tables: dict[str, _Table] = {}
        self.lookup_ids: dict[str, np.ndarray] = {}
        self.alert_log: list[tuple[int, str, str]] = []
        self.table_fields: dict[str, str] = {}
        self._model_id: int | None = None

    # ------------------------------------------------------------ attach
    def attach(self, model: paddle.nn.Layer, lookup_ids: dict[str, np.ndarray] | None = None) -> None:
        """Find the model's tables; ``lookup_ids`` (table name -> ids of evaluation data) enables the
        share-of-lookups figure for rows never updated."""
        self._model_id = id(model)
        self.tables = {}
        for name, layer in embedding_layers(model):
            rows = getattr(layer, "num_embeddings", None) or layer.weight.shape[0]
            padding, _ = table_settings(layer)
            self.tables[name] = _Table(name, layer, np.zeros(rows, dtype=bool), padding,
                                       collections.deque(maxlen=self.alerts.norm_window))
        if not self.tables:
            logger.warning("SparseGradMonitor: the model has no embedding layers; nothing to monitor")
        self.lookup_ids = dict(lookup_ids or {})

    def on_train_begin(self, engine) -> None:
        model = engine.model
        self.table_fields = model.table_fields() if hasattr(model, "table_fields") else {}
        valid = engine.splits.valid
        self.attach(model, {table: valid.ids[f] for table, f in self.table_fields.items()})

    # ------------------------------------------------------------- steps
    def on_after_backward(self, engine, step: int) -> None:
        batch = engine.current_batch
        fields = {f for f in self.table_fields.values()}
        ids = {f: batch[f].numpy() for f in fields}
        self.step(engine.model, step, {table: ids[f] for table, f in self.table_fields.items()})

    def on_step_end(self, engine, step: int, logs: dict[str, float]) -> None:
        self.step_end(engine.model, step)

    def on_epoch_end(self, engine, epoch: int, logs: dict[str, float]) -> None:
        self.log_never_updated(engine.global_step)

    def on_train_end(self, engine, logs: dict[str, float]) -> None:
        self.writer.flush()

    def step(self, model: paddle.nn.Layer, step: int, lookups: dict[str, np.ndarray] | None = None) -> None:
        """Read this step's row gradients (call after backward, before the optimizer step).

        Coverage is tracked on every step: from ``lookups`` (table name -> the ids it looked up this
        step, which the engine passes: the cheapest way) or else from the touched row ids. Gradient
        values are read every ``every_n_steps`` steps."""
        if self._model_id != id(model):
            self.attach(model)
        lookups = lookups or {}
        log_now = step % self.every_n_steps == 0
        for table in self.tables.values():
            ids = lookups.get(table.name)
            if ids is not None:
                self._track_coverage(table, ids.ravel(), step)
                if not log_now:
                    continue
            grads = read_row_gradients(table.layer, with_values=log_now)
            if grads is not None and table.padding_idx is not None:
                grads = grads.without(table.padding_idx)  # padding lookups are not updates
            if grads is None:
                continue
            if ids is None:
                self._track_coverage(table, grads.rows, step)
            if not grads.sparse:
                self._alert(table, step, "dense_gradient",
                            f"{table.name}: the gradient is dense ([{table.seen.size}, D]) where a sparse row "
                            f"gradient was expected; build the table with sparse=True", self.alerts.dense_gradient)
            if not log_now:
                continue
            norms = np.linalg.norm(grads.grads, axis=1)
            bad = ~np.isfinite(norms)
            if bad.any():
                rows = grads.rows[bad][:10].tolist()
                self._alert(table, step, "nan_inf", f"{table.name}: {int(bad.sum())} rows have NaN/Inf "
                            f"gradients at step {step} (rows {rows})", self.alerts.nan)
            finite = norms[~bad]
            if finite.size:
                self._check_spike(table, step, float(finite.max()))
            self._log_step(table, grads, norms, step)
            table.pending = grads
            table.weights_before = table_rows(table.layer, grads.rows)

    def step_end(self, model: paddle.nn.Layer, step: int) -> None:
        """After the optimizer step: log the update-to-weight ratio of the rows read in ``step``."""
        for table in self.tables.values():
            if table.pending is None:
                continue
            after = table_rows(table.layer, table.pending.rows)
            weight = float(table.weights_before.norm())
            update = float((after - table.weights_before).norm())
            self.writer.add_scalar(f"sparse/{table.name}/update_to_weight", update / weight if weight > 0 else 0.0,
                                   step)
            table.pending = table.weights_before = None

    # ----------------------------------------------------------- figures
    def _track_coverage(self, table: _Table, rows: np.ndarray, step: int) -> None:
        if table.padding_idx is not None:
            rows = rows[rows != table.padding_idx]
        grew = not table.seen[rows].all()
        table.seen[rows] = True
        if grew:
            table.last_growth_step = step
        elif (step - table.last_growth_step >= self.alerts.coverage_patience
              and self.coverage(table.name) < 100.0):
            self._alert(table, step, "coverage_stalled",
                        f"{table.name}: no new row updated for {step - table.last_growth_step} steps; coverage "
                        f"stays at {self.coverage(table.name):.2f}%", True)

    def coverage(self, name: str) -> float:
        """Share of the table's rows (padding excluded) updated at least once, in percent."""
        table = self.tables[name]
        total = table.seen.size - (table.padding_idx is not None)
        return 100.0 * int(table.seen.sum()) / max(total, 1)

    def never_updated(self, name: str) -> tuple[int, float | None]:
        """(rows never updated, their share of the evaluation lookups in percent, if known)."""
        table = self.tables[name]
        cold = ~table.seen
        if table.padding_idx is not None:
            cold[table.padding_idx] = False
        share = None
        ids = self.lookup_ids.get(name)
        if ids is not None:
            ids = ids.ravel()
            if table.padding_idx is not None:
                ids = ids[ids != table.padding_idx]
            share = 100.0 * float(cold[ids].mean()) if ids.size else 0.0
        return int(cold.sum()), share

    def log_never_updated(self, step: int) -> None:
        for name in self.tables:
            count, share = self.never_updated(name)
            self.writer.add_scalar(f"sparse/{name}/never_updated_rows", count, step)
            if share is not None:
                self.writer.add_scalar(f"sparse/{name}/never_updated_lookup_share_pct", share, step)

    def _log_step(self, table: _Table, grads: RowGradients, norms: np.ndarray, step: int) -> None:
        tag = f"sparse/{table.name}"
        finite = norms[np.isfinite(norms)]
        self.writer.add_scalar(f"{tag}/rows_touched", len(grads.rows), step)
        self.writer.add_scalar(f"{tag}/coverage_pct", self.coverage(table.name), step)
        self.writer.add_scalar(f"{tag}/nan_inf_rows", int(norms.size - finite.size), step)
        if finite.size:
            ordered = np.sort(finite)
            self.writer.add_scalar(f"{tag}/grad_norm_mean", float(ordered.mean()), step)
            self.writer.add_scalar(f"{tag}/grad_norm_max", float(ordered[-1]), step)
            self.writer.add_scalar(f"{tag}/grad_norm_p99", percentile_of_sorted(ordered, 99.0), step)
            every = self.histogram_every_n_steps
            if every and step % every == 0:
                self.writer.add_histogram(f"{tag}/grad_norm", ordered, step, buckets=30)

    def _check_spike(self, table: _Table, step: int, max_norm: float) -> None:
        history = table.norm_history
        if len(history) >= 5:
            median = float(np.median(history))
            if median > 0 and max_norm > self.alerts.norm_factor * median:
                self._alert(table, step, "norm_spike",
                            f"{table.name}: max row-gradient norm {max_norm:.4g} at step {step} is "
                            f"{max_norm / median:.1f}x its running median {median:.4g}", True, once=False)
        history.append(max_norm)

    def _alert(self, table: _Table, step: int, kind: str, message: str, enabled: bool, once: bool = True) -> None:
        if not enabled or (once and kind in table.alerted):
            return
        self.alert_log.append((step, kind, message))
        self.writer.add_text(f"alerts/{table.name}", f"[{kind}] {message}", step)
        if kind not in table.alerted:
            logger.warning("monitor alert: %s", message)  # printed once per table and kind
        table.alerted.add(kind)
