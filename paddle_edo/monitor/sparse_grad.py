"""SparseGradMonitor: sparse-gradient health of every embedding table, written to VisualDL.

Per table: rows touched per step, coverage (share of rows ever updated), rows never updated and their
share of lookups in evaluation data, row-gradient L2 norms (mean, max, p99, histogram), NaN/Inf rows,
update-to-weight ratio; alerts for NaN/Inf, norm spikes, dense gradients and stalled coverage.

Two kinds of table are watched. Gradient figures belong to the tables that hold trainable rows (a
composite layer's inner tables: ``embeddings.user.table`` of a hashed field). Coverage belongs to what
the model looks up: a field's ids when the ids are known (the engine passes each batch's ids, which
costs nothing on device), else the rows of the gradient tables.

With ``background=True`` (what configs use when a core is free beside Paddle's threads) the training
thread only copies what a logged step needs (gradient rows, and the rows before and after the optimizer
step); merging, figures, alerts and writing run on one worker thread, in step order, while training
goes on.
"""
from __future__ import annotations

import logging
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import paddle

from ..callbacks import Callback
from ..errors import EdoValueError
from ..nn.base import EmbeddingBase, table_settings
from .alerts import AlertSettings, Alerts
from .coverage import Coverage
from .gradient_tables import GradientTable, gradient_tables, is_table
from .row_gradients import GradientSummary, RowGradients, summarize
from .update_ratio import SavedRows

logger = logging.getLogger("paddle_edo")

MONITORED_VALID_ROWS = 1_000_000  # validation rows whose ids say which rows serving will read
JOBS_IN_FLIGHT = 4              # logged steps the worker may fall behind before training waits for it


class SparseGradMonitor(Callback):
    """Engine callback (or by hand: ``step(model, step)`` after backward, ``step_end(model, step)``
    after the optimizer step) that logs every ``every_n_steps`` steps and tracks coverage on every step."""

    def __init__(self, writer: Any, every_n_steps: int = 10, alerts: AlertSettings | None = None,
                 histogram_every_n_steps: int = 100, background: bool = False) -> None:
        for name, value in (("every_n_steps", every_n_steps), ("histogram_every_n_steps", histogram_every_n_steps)):
            if value < 0 or (name == "every_n_steps" and value < 1):
                raise EdoValueError(f"SparseGradMonitor: {name} = {value} must be >= 1 (histograms: 0 turns them off)")
        self.writer = writer
        self.every_n_steps = every_n_steps
        self.alerts = Alerts(alerts or AlertSettings(), writer)
        self.histogram_every_n_steps = histogram_every_n_steps
        self.background = background
        self.tables: list[GradientTable] = []
        self.layers: dict[str, paddle.nn.Layer] = {}
        self.coverage_tracker = Coverage()
        self.id_spaces: dict[str, int] = {}
        self.lookup_ids: dict[str, np.ndarray] = {}
        self.table_fields: dict[str, str] = {}
        self._twins: dict[str, str] = {}    # table -> the table whose coverage rows it shares
        self._plans: dict[tuple[str, ...], tuple] = {}  # lookup names -> parts, covered, twins, uncovered
        self._model_id: int | None = None
        self._saved: SavedRows | None = None        # rows before the optimizer step, for step_end
        self._step_figures: tuple[int, list[tuple[str, float]]] | None = None  # inline: written at step_end
        self._tags: dict[tuple[str, str], str] = {}
        self._rows_read: dict[int, np.ndarray] = {}  # each table's distinct rows at the logged step
        self._worker: ThreadPoolExecutor | None = None
        self._jobs: deque[Future] = deque()

    # ------------------------------------------------------------ attach
    def attach(self, model: paddle.nn.Layer, lookup_ids: dict[str, np.ndarray] | None = None,
               id_spaces: dict[str, int] | None = None) -> None:
        """Find the model's tables. ``lookup_ids`` (table name -> ids of evaluation data) enables the
        share-of-lookups figure for rows never updated; ``id_spaces`` (table name -> number of ids) lets
        coverage count the ids of a layer that takes any id (hashing), which has no vocabulary itself."""
        self.wait()
        self._model_id = id(model)
        self.tables = gradient_tables(model)
        self.layers = {name: layer for name, layer in model.named_sublayers(include_self=True) if is_table(layer)}
        if not self.layers:
            logger.warning("SparseGradMonitor: the model has no embedding layers; nothing to monitor")
        self.coverage_tracker = Coverage()
        self.id_spaces = dict(id_spaces or {})
        self.lookup_ids = dict(lookup_ids or {})
        self._twins, self._plans, self._saved, self._rows_read = {}, {}, None, {}
        self.alerts.reset(len(self.tables))

    def on_train_begin(self, engine) -> None:
        model = engine.model
        self.table_fields = model.table_fields() if hasattr(model, "table_fields") else {}
        sizes = {field.name: field.vocab_size for field in engine.fields}
        valid = engine.splits.valid.head(MONITORED_VALID_ROWS)  # (a streamed split: its first rows)
        self.attach(model, {table: valid.ids[f] for table, f in self.table_fields.items()},
                    {table: sizes[f] for table, f in self.table_fields.items() if f in sizes})

    # ------------------------------------------------------------- steps
    def on_after_backward(self, engine, step: int) -> None:
        batch = engine.current_arrays
        self.step(engine.model, step, {table: batch[f] for table, f in self.table_fields.items()})

    def on_step_end(self, engine, step: int, logs: dict[str, float]) -> None:
        self.step_end(engine.model, step)

    def on_epoch_end(self, engine, epoch: int, logs: dict[str, float]) -> None:
        self.log_never_updated(engine.global_step)

    def on_train_end(self, engine, logs: dict[str, float]) -> None:
        self.wait()
        self.writer.flush()

    # ------------------------------------------------------------ worker
    def _run(self, job, *args) -> None:
        """Run a job now, or queue it for the worker thread (jobs run in the order given)."""
        if not self.background:
            job(*args)
            return
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="SparseGradMonitor")
        while self._jobs and (self._jobs[0].done() or len(self._jobs) >= JOBS_IN_FLIGHT):
            self._jobs.popleft().result()  # raises here what failed on the worker
        self._jobs.append(self._worker.submit(job, *args))

    def wait(self) -> None:
        """Block until every queued figure is computed and written; raises what failed on the worker."""
        self._write_figures()
        while self._jobs:
            self._jobs.popleft().result()

    def step(self, model: paddle.nn.Layer, step: int, lookups: dict[str, np.ndarray] | None = None,
             gradients: dict[str, RowGradients] | None = None) -> None:
        """Read this step's row gradients (call after backward, before the optimizer step).

        Coverage is tracked on every step: from ``lookups`` (table name -> the ids it looked up this
        step, which the engine passes: the cheapest way) or else from the touched rows. Gradient values
        are read every ``every_n_steps`` steps, from the layers or from ``gradients`` (table name -> its
        row gradients: what a static-graph trainer fetched for tables whose rows live on servers)."""
        if self._model_id != id(model):
            self.attach(model)
        self._write_figures()
        lookups = lookups or {}
        parts, covered, uncovered = self._lookup_parts(lookups)
        log_now = step % self.every_n_steps == 0
        read: list[tuple[int, RowGradients]] = []
        flat: dict[int, np.ndarray] = {}  # twins given the same ids share one flat array (a copy for the worker)
        for index in range(len(self.tables)) if log_now else uncovered:
            table = self.tables[index]
            ids = lookups.get(table.name) if log_now and table.plain else None
            if ids is not None:
                copied = flat.get(id(ids))
                if copied is None:  # (setdefault would copy the twin's ids again before looking)
                    copied = flat[id(ids)] = ids.ravel().copy() if self.background else ids.ravel()
                ids = copied
            grads = gradients[table.name] if gradients and table.name in gradients else \
                table.read(with_values=log_now, lookups=ids, copy=self.background)
            if grads is None:
                continue
            if index in uncovered:
                self._coverage_space(table.name, table.rows, table.padding_idx)
                parts.append((table.name, grads.rows))
            if not grads.sparse:
                self._run(self.alerts.raise_, table.name, step, "dense_gradient",
                          f"{table.name}: the gradient is dense ([{table.rows}, D]) where a sparse row "
                          f"gradient was expected; build the table with sparse=True", self.alerts.settings.dense_gradient)
            if log_now:
                read.append((index, grads))
        self.coverage_tracker.update(step, parts)
        if not log_now:
            return
        stalled = [(name, step - self.coverage_tracker.last_growth_of(name), self.coverage(name))
                   for name in self.coverage_tracker.stalled(step, self.alerts.settings.coverage_patience)]
        coverage = [(self._tag(name, "coverage_pct"), percent) for name, percent in self.coverage_tracker.percents()]
        local = [(index, self.tables[index], grads) for index, grads in read if not self.tables[index].remote]
        if self.background:  # save now, for every lookup, what the worker compares after the optimizer step
            self._saved = SavedRows([(index, table, grads.rows) for index, table, grads in local], distinct=False)
            self._run(self._log_figures, step, read, coverage, stalled)
            return
        self._rows_read.clear()  # the figures first: then the distinct rows are known
        self._step_figures = (step, self._figures(step, read, coverage, stalled))  # written with the ratios
        self._saved = SavedRows([(index, table, self._rows_read[index]) for index, table, _ in local
                                 if index in self._rows_read], distinct=True)  # (rows on servers: no ratio)

    def _figures(self, step: int, read: list[tuple[int, RowGradients]], coverage: list[tuple[str, float]],
                 stalled: list[tuple[str, int, float]]) -> list[tuple[str, float]]:
        """A logged step's scalars, from the rows read (on the worker, if any); alerts and histograms are
        written here."""
        for name, idle, percent in stalled:
            self.alerts.raise_(name, step, "coverage_stalled",
                        f"{name}: no new row updated for {idle} steps; coverage stays at {percent:.2f}%", True)
        summaries = summarize([(grads, self.tables[index].padding_idx) for index, grads in read])
        self.alerts.check_spikes(step, [(index, s) for (index, _), s in zip(read, summaries) if s is not None],
                                 [table.name for table in self.tables])
        scalars = coverage
        for (index, _), summary in zip(read, summaries):
            if summary is not None:
                scalars += self._table_figures(self.tables[index], summary, step)
                self._rows_read[index] = summary.rows
        return scalars

    def _log_figures(self, step: int, *read_coverage_stalled) -> None:
        self._write(self._figures(step, *read_coverage_stalled), step)

    def _write_figures(self) -> None:
        """Write the figures of an inline logged step that no ``step_end`` wrote with its ratios."""
        if self._step_figures is not None:
            (step, scalars), self._step_figures = self._step_figures, None
            self._write(scalars, step)

    def step_end(self, model: paddle.nn.Layer, step: int) -> None:
        """After the optimizer step: log the update-to-weight ratio of the rows read in ``step``."""
        saved, self._saved = self._saved, None
        if saved is not None:
            self._run(self._log_update_ratios, step, saved, saved.after())
        self._write_figures()

    def _log_update_ratios(self, step: int, saved: SavedRows, after: tuple) -> None:
        """The update-to-weight ratio of each table over the rows it updated (padding left out), written
        with the step's other figures when they wait (inline: one write a logged step)."""
        rows_read, self._rows_read = self._rows_read, {}
        scalars = [(self._tag(self.tables[index].name, "update_to_weight"), ratio)
                   for index, ratio in saved.ratios(after, rows_read)]
        if self._step_figures is not None and self._step_figures[0] == step:
            scalars = self._step_figures[1] + scalars
            self._step_figures = None
        self._write(scalars, step)

    def _write(self, scalars: list[tuple[str, float]], step: int) -> None:
        """One write for the step's scalars when the writer can (BufferedLogWriter), else one by one."""
        at_once = getattr(self.writer, "add_scalars_of_step", None)
        if at_once is not None:
            at_once(scalars, step)
            return
        for tag, value in scalars:
            self.writer.add_scalar(tag, value, step)

    # ----------------------------------------------------------- figures
    def _lookup_parts(self, lookups: dict[str, np.ndarray]
                      ) -> tuple[list[tuple[str, np.ndarray]], set[str], tuple[int, ...]]:
        """(table, ids) pairs for coverage, the tables they cover, and the gradient tables left to count
        coverage from their own rows. Tables given the very same ids array (a field's embedding and
        first-order tables, from the engine) share their rows, which are then marked once. The answer for
        a set of table names is kept: the engine asks the same every step."""
        plan = self._plans.get(tuple(lookups))
        if plan is not None and all(lookups[name] is lookups[twin] for name, twin in plan[2]):
            return [(name, lookups[name]) for name in plan[0]], plan[1], plan[3]
        parts, covered = self._plan_parts(lookups)
        uncovered = tuple(i for i, t in enumerate(self.tables) if t.name not in covered and t.outer not in covered)
        twins = [(name, self._twins[name]) for name in lookups if name in self._twins]
        self._plans[tuple(lookups)] = ([name for name, _ in parts], covered, twins, uncovered)
        return parts, covered, uncovered

    def _plan_parts(self, lookups: dict[str, np.ndarray]) -> tuple[list[tuple[str, np.ndarray]], set[str]]:
        parts, covered, owner_of = [], set(), {}
        for name, ids in lookups.items():
            twin = self._twins.get(name)
            if twin is not None:
                if lookups.get(twin) is ids:
                    covered.add(name)
                    continue
                self.coverage_tracker.separate(name)  # no longer the same ids: own rows from now on
                del self._twins[name]
            if name not in self.coverage_tracker:
                earlier = owner_of.get(id(ids))
                if earlier is not None and self._id_space(name) == self._id_space(earlier):
                    self.coverage_tracker.share(name, earlier)
                    self._twins[name] = earlier
                    covered.add(name)
                    continue
                if not self._coverage_space(name):
                    continue
            owner_of.setdefault(id(ids), name)
            parts.append((name, ids))
            covered.add(name)
        return parts, covered

    def _id_space(self, name: str) -> tuple[int, int | None] | None:
        """(ids, padding id) that coverage counts for a looked-up table; None when unknown (a hashed
        layer's ids without ``id_spaces``)."""
        layer = self.layers.get(name)
        if layer is None:
            return None
        padding_idx = table_settings(layer)[0]
        if name in self.id_spaces:
            return self.id_spaces[name], padding_idx
        if isinstance(layer, EmbeddingBase):
            return None if layer.takes_any_id else (layer.num_embeddings, padding_idx)
        return layer.weight.shape[0], padding_idx

    def _coverage_space(self, name: str, rows: int | None = None, padding_idx: int | None = None) -> bool:
        """Make sure coverage tracks ``name``; False when its id space is unknown (a hashed layer's ids,
        without ``id_spaces``)."""
        if name in self.coverage_tracker:
            return True
        if rows is None:
            space = self._id_space(name)
            if space is None:
                return False
            rows, padding_idx = space
        self.coverage_tracker.add(name, rows, padding_idx)
        return True

    def coverage(self, name: str) -> float:
        """Share of the table's rows (padding excluded) updated at least once, in percent."""
        return self.coverage_tracker.percent(name)

    def never_updated(self, name: str) -> tuple[int, float | None]:
        """(rows never updated, their share of the evaluation lookups in percent, if known)."""
        return self.coverage_tracker.never_updated(name, self.lookup_ids.get(name))

    def log_never_updated(self, step: int) -> None:
        scalars = []
        for name in self.coverage_tracker.tracked:
            count, share = self.never_updated(name)
            scalars.append((self._tag(name, "never_updated_rows"), count))
            if share is not None:
                scalars.append((self._tag(name, "never_updated_lookup_share_pct"), share))
        self._write(scalars, step)

    def _table_figures(self, table: GradientTable, summary: GradientSummary, step: int) -> list[tuple[str, float]]:
        """One table's scalars of a logged step (its histogram and alerts are written here)."""
        name, tag = table.name, self._tag
        bad = summary.bad_rows
        if bad.size:
            self.alerts.raise_(name, step, "nan_inf", f"{name}: {bad.size} rows have NaN/Inf gradients at "
                        f"step {step} (rows {bad[:10].tolist()})", self.alerts.settings.nan)
        scalars = [(tag(name, "rows_touched"), len(summary.rows)), (tag(name, "nan_inf_rows"), bad.size)]
        if summary.norms.size:
            scalars += [(tag(name, "grad_norm_mean"), summary.mean), (tag(name, "grad_norm_max"), summary.max),
                        (tag(name, "grad_norm_p99"), summary.p99)]
            every = self.histogram_every_n_steps
            if every and step % every == 0:
                self.writer.add_histogram(tag(name, "grad_norm"), summary.norms, step, buckets=30)
        return scalars

    def _tag(self, name: str, figure: str) -> str:
        """"sparse/<name>/<figure>", made once: a logged step writes the same tags every time."""
        tag = self._tags.get((name, figure))
        if tag is None:
            tag = self._tags[(name, figure)] = f"sparse/{name}/{figure}"
        return tag

    @property
    def alert_log(self) -> list[tuple[int, str, str]]:
        """(step, kind, message) of every alert raised."""
        return self.alerts.log
