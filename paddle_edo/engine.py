"""Dygraph training and evaluation: seeded, resumable from atomic checkpoints, with callbacks."""
from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle.base.unique_name import UniqueNameGenerator
from paddle.utils import unique_name

from . import runtime
from .callbacks import Callback
from .checkpoint import (CheckpointError, check_finite, checkpoint_difference, checkpoint_sections, load_checkpoint,
                         load_model_state, save_checkpoint)
from .config import dump_config
from .data import CTRBatches, CTRTable, Splits, count_frequencies, load_dataset
from .memory import GradientPeaks, memory_report
from .models import build_model
from .models.optimizers import check_tables_reached, collections_fuse, create_optimizer, fused_table_optimizer
from .monitor import monitors_from_config
from .nn.registry import table_classes
from .nn.base import pack_trained, unpacked_tables
from .nn.cached import bind_optimizer, cached_layers, uncache
from .nn.collection import bind_table_optimizer, load_table_optimizer_state, table_optimizer_state
from .nn.convert import row_updated_tables
from .nn.row_trainer import bind_row_trainer
from .nn.shards import row_shares
from .distributed.sharded import GradientSum, choose_exchange, shard_collections, sharded_parameters
from .distributed.sharded.batches import RankSlices, gather_slices, rank_slice
from .distributed.sharded.checkpoint import is_sharded_checkpoint, load_sharded, save_sharded, table_owners
from .keyed_random import step_randomness
from .progress import ProgressBar
from .schema import ConfigError
from .text import fit_composer, load_composed_chars, load_pretrained, read_word2vec

logger = logging.getLogger("paddle_edo")

# Config sections a checkpoint must agree with to be resumed: they fix the model's shape and the data.
EVAL_BATCH_SIZE = 8192


class Engine:
    """Builds data, model and optimizer from a validated config, then trains and evaluates. ``splits``:
    data already loaded for this config (the planner's short runs share one load); ``checkpoints``:
    whether training writes them (runs thrown away after, as the planner's, need none)."""

    def __init__(self, config: dict[str, Any], callbacks: Sequence[Callback] = (), splits: Splits | None = None,
                 checkpoints: bool = True) -> None:
        self.config = config
        self.checkpoints = checkpoints
        train = config["train"]
        self.output_dir = Path(train["output_dir"])
        self.rank, self.world_size = _parallel_env(config)  # collective and sharded modes: one process per rank
        self.sharded = config["distributed"]["mode"] == "sharded"
        monitors = monitors_from_config(config) if self.rank == 0 else []
        self.callbacks = list(callbacks) + monitors  # an unwritable logdir fails here
        self.device = runtime.select_device(train["device"])
        runtime.set_num_threads(train["num_threads"])
        runtime.seed_everything(train["seed"])
        # a user's files: rank 0 keeps the data plan (vocabularies, statistics) beside the run
        self.splits = splits or load_dataset(config["data"], self.output_dir / "data" if self.rank == 0 else None)
        self.fields = self.splits.fields
        # Parameter and optimizer-state names come from this engine's own generator, so they are the
        # same in every run of the experiment and a checkpoint's optimizer state loads by name.
        self._names = UniqueNameGenerator()
        frequencies = None
        if any(cls.needs_frequencies for cls in table_classes(config["embedding"])):
            frequencies = count_frequencies(self.splits.train)  # embedding.frequencies: train
        with unique_name.guard(self._names):
            with self._table_shares():
                self.model = build_model(self.fields, config, frequencies, self.splits.dense_features)
            self.exchange = None
            if self.sharded and self.world_size > 1:
                self.exchange = choose_exchange(config["distributed"]["exchange"], self.rank, self.world_size,
                                                self.device)
                for collection in shard_collections(self.model, self.exchange).values():
                    # monitors read the shares' own gradients: then the shares keep their autograd lookups
                    collection.train_owned_rows = not config["monitor"]["enable"]
                    collection.bag_pooling = config["distributed"]["bag_pooling"]
            # fp32 tables train outside Paddle's optimizer: a collection's in its backward pass, the others
            # (composites' parts, tables of unfused runs) from their sparse gradients after it
            self.table_optimizer = fused_table_optimizer(config, 1 if self.sharded else self.world_size, self.device)
            named = train["table_optimizer"]["name"] is not None  # low_precision and cached tables take a rule
            # named for them; else their own row update, or Paddle's optimizer bound to the cache
            if self.table_optimizer:
                check_tables_reached(self.model, self.table_optimizer, named)
            fused = bind_table_optimizer(self.model, self.table_optimizer) \
                if self.table_optimizer and collections_fuse(config) else []
            self.row_trainer = bind_row_trainer(self.model, self.table_optimizer, own_rules=named) \
                if self.table_optimizer else None
            apart = fused + (self.row_trainer.parameters() if self.row_trainer else [])
            self.optimizer = create_optimizer(train, self.model, apart)
            bind_optimizer(self.model, self.optimizer)  # cached tables no rule trains carry its row state
        self.table_fields = self.model.table_fields()  # table name -> field it looks up
        lengths = {f.name: f.max_len if f.multi_valued else 1 for f in self.fields}
        self.gradient_peaks = GradientPeaks({name: train["batch_size"] * lengths.get(field, 1)
                                             for name, field in self.table_fields.items()})
        self.prefetching = [(layer, self.table_fields[name]) for name, layer in cached_layers(self.model).items()
                            if layer.prefetcher is not None and name in self.table_fields]
        self._load_pretrained(config["model"].get("pretrained", {}))
        self.table_learning_rate = train["embedding_learning_rate"] or train["learning_rate"]
        self.row_tables = [table for table in row_updated_tables(self.model)  # those no RowTrainer trains
                           if getattr(table, "row_trainer", None) is None]
        for table in self.row_tables:
            table.configure_row_optimizer(train["optimizer"])
        amp = train["amp"]
        self.amp = runtime.amp_enabled(amp["enable"], self.device)
        self.amp_level, self.amp_dtype = amp["level"], amp["dtype"]
        self.scaler = None
        if self.amp:
            if self.amp_level == "O2":
                self.model, self.optimizer = paddle.amp.decorate(self.model, self.optimizer, level="O2",
                                                                 dtype=self.amp_dtype)
            if self.amp_dtype == "float16":
                self.scaler = paddle.amp.GradScaler()
        if train["to_static"]:  # converts the model in place: evaluation runs it converted too
            self.model = paddle.jit.to_static(self.model)
        self.train_model = paddle.DataParallel(self.model) if self.world_size > 1 and not self.sharded else self.model
        if self.sharded:  # every rank reads the global batches and trains its slice of each
            self.train_batches = RankSlices(CTRBatches(self.splits.train, train["batch_size"], shuffle=True,
                                                       seed=train["seed"]), self.rank, self.world_size)
        else:
            self.train_batches = CTRBatches(self.splits.train.shard(self.rank, self.world_size), train["batch_size"],
                                            shuffle=True, seed=train["seed"])
        sharded = sharded_parameters(self.model)
        self.gradient_sum = GradientSum([p for p in self.model.parameters() if id(p) not in sharded],
                                        self.world_size) if self.sharded else None
        self.current_arrays: dict[str, np.ndarray] = {}  # the batch being trained on, as the data gave it
        self.epoch = 0           # epochs finished
        self.step_in_epoch = 0   # steps finished in the current epoch
        self.global_step = 0
        self.trained = {"examples": 0, "steps": 0, "seconds": 0.0, "exchange_bytes": 0}  # by this process
        self.history: list[dict[str, float]] = []

    def _table_shares(self) -> contextlib.AbstractContextManager:
        """How tables are built in a sharded job: placed by ``distributed.placement`` (this rank's shares of
        their rows, or whole tables on one rank; in one process, all of them), the small ones whole on every
        rank with dense gradients, as every number of ranks builds them."""
        if not self.sharded:
            return contextlib.nullcontext()
        distributed = self.config["distributed"]
        return row_shares(self.rank, self.world_size, distributed["shard_min_rows"], distributed["placement"])

    def _load_pretrained(self, files: dict[str, Any]) -> None:
        """Copy a user's word2vec vectors into the tables of the fields they name (text models); with
        ``compose_chars``, the character table starts from a mean composer fit to the word vectors."""
        files = dict(files)
        compose_chars = files.pop("compose_chars", False)
        tables = {field: name for name, field in self.table_fields.items()}
        if compose_chars:
            if not files.get("words") or files.get("chars") or "chars" not in tables:
                raise ConfigError("model.pretrained.compose_chars = true needs model.pretrained.words (the vectors to "
                                  "compose), no model.pretrained.chars, and a model with a character table")
            tokens, vectors = read_word2vec(files["words"])
            fit = fit_composer(tokens, vectors, "mean", max_chars=self.config["data"]["text"]["max_chars_per_word"],
                               seed=self.config["train"]["seed"])
            table = dict(self.model.named_sublayers())[tables["chars"]]
            report = load_composed_chars(table.weight, self.splits.vocabularies["chars"], fit.composer)
            logger.info("character table from a mean composer of %s (fit cosine %.3f on %d words): %d of %d "
                        "characters", files["words"], fit.train_cosine, fit.train_words, report.hits,
                        report.hits + report.misses)
        for field, path in files.items():
            if not path:
                continue
            if field not in tables or field not in self.splits.vocabularies:
                raise ConfigError(f"model.pretrained.{field} = {path!r}: this model has no {field} table with a "
                                  f"vocabulary to match vectors against")
            table = dict(self.model.named_sublayers())[tables[field]]
            report = load_pretrained(table.weight, self.splits.vocabularies[field], path)
            logger.info("pretrained %s: %d of %d tokens found in %s (%d vectors); the rest keep their initial "
                        "values", field, report.hits, report.hits + report.misses, path, report.file_tokens)

    @property
    def checkpoint_path(self) -> Path:
        """The last checkpoint: one file, or for a sharded job the manifest of its ranks' files."""
        return self.output_dir / "checkpoints" / ("last.sharded.json" if self.sharded else "last.pdckpt")

    # ----------------------------------------------------------------- state
    def state(self) -> dict[str, Any]:
        with step_randomness(f"checkpoint {self.global_step}"):  # packed host rows round as they are flushed
            return self._state()

    def _state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "table_optimizer": table_optimizer_state(self.model),
                "table_rows": self.row_trainer.state_dict() if self.row_trainer else {},
                "table_rule": self.table_optimizer.describe() if self.table_optimizer else None, "epoch": self.epoch, "step_in_epoch": self.step_in_epoch, "global_step": self.global_step,
                "history": self.history,
                "config": checkpoint_sections(self.config)}

    def save(self, path: str | Path | None = None) -> Path:
        """Write a checkpoint (in collective mode rank 0 writes it, the ranks holding the same parameters; in
        a sharded job every rank writes its own, and rank 0 their manifest); training calls it at epoch ends (and every train.checkpoint_every_steps) unless checkpoints are off."""
        path = Path(path or self.checkpoint_path)
        if self.sharded:
            distributed = self.config["distributed"]
            return save_sharded(self.state(), path, self.rank, self.world_size, self.model,
                                distributed["shard_min_rows"], self._barrier, distributed["placement"])
        return save_checkpoint(self.state(), path) if self.rank == 0 else path

    def _barrier(self) -> None:
        if self.world_size > 1:
            paddle.distributed.barrier()

    def load(self, path: str | Path, table_optimizer: bool = True) -> None:
        """Restore model, optimizer and position from a checkpoint of the same experiment (randomness
        follows from (seed, step), see _train_step); ``table_optimizer``: the collections' fused optimizer
        state too (a resume needs it; serving does not, and a parameter-server job's checkpoint has none)."""
        if is_sharded_checkpoint(path):
            distributed = self.config["distributed"]
            state = load_sharded(path, self.rank, self.world_size, distributed["shard_min_rows"],
                                 self.optimizer.state_dict(), distributed["placement"], table_owners(self.model))
        else:
            state = load_checkpoint(path)
        diff = checkpoint_difference(state.get("config", {}), self.config)
        if diff is not None:
            raise CheckpointError(f"checkpoint {path} was made with another {diff.split('.')[0]} config ({diff}); "
                                  f"resume it with the config it was trained with")
        load_model_state(self.model, state["model"], str(path))
        self.optimizer.set_state_dict(state["optimizer"])
        if table_optimizer:
            self._check_table_rule(state.get("table_rule", "unrecorded"), path)
            load_table_optimizer_state(self.model, state.get("table_optimizer", {}), f"checkpoint {path}")
            rows = state.get("table_rows", {})
            if self.row_trainer is not None:
                self.row_trainer.load(rows, f"checkpoint {path}")
            elif rows:
                raise CheckpointError(f"checkpoint {path} holds the row state of tables this run does not train "
                                      f"by rows ({sorted(rows)[0]!r})")
        self.epoch, self.step_in_epoch = state["epoch"], state["step_in_epoch"]
        self.global_step, self.history = state["global_step"], list(state["history"])

    def _check_table_rule(self, saved: dict[str, Any] | None | str, path: str | Path) -> None:
        """Refuse a checkpoint whose tables trained with another fused rule or state format than this run's
        (a checkpoint from before rules were recorded is not checked)."""
        if saved == "unrecorded":
            return
        now = self.table_optimizer.describe() if self.table_optimizer else None
        for key in ("name", "state_dtype"):
            before, after = (saved or {}).get(key), (now or {}).get(key)
            if before != after:
                def shown(value: Any) -> str:
                    return repr(value) if value is not None else "none (Paddle's optimizer)"
                raise CheckpointError(f"checkpoint {path} trained its tables with train.table_optimizer.{key} "
                                      f"{shown(before)}, this run with {shown(after)}; resume it with the same "
                                      f"train.table_optimizer")

    def table_frequencies(self) -> dict[str, np.ndarray] | None:
        """Each table's id counts in the training split, by table name (None for streamed data, which would
        take a pass to count): they weight the packing error of quantized tables."""
        if not isinstance(self.splits.train, CTRTable):
            return None
        counts = count_frequencies(self.splits.train)
        return {name: counts[field] for name, field in self.table_fields.items() if field in counts}

    def load_for_serving(self, path: str | Path) -> list[str]:
        """Load a checkpoint, pack its QAT / PTQ tables as the end of training does, and turn cached
        tables into dense ones (export needs the whole table in the graph); returns the tables changed."""
        self.load(path, table_optimizer=False)
        return pack_trained(self.model) + uncache(self.model)

    # ----------------------------------------------------------------- train
    def fit(self) -> dict[str, float]:
        """Train for train.epochs (resuming if asked), pack the tables for serving, then evaluate on the test
        split."""
        with self._training_log():
            start = self._train_epochs()
            return self._finish(start)

    def train_epochs(self, validate: bool = True) -> list[dict[str, Any]]:
        """Train for train.epochs (resuming if asked) and stop there, tables unpacked and the test split
        unread (a short run that only compares validation scores): the epochs' logs, ``valid_auc`` among them
        unless ``validate`` is false (a run wanted for its trained tables alone)."""
        with self._training_log():
            self._train_epochs(validate)
        return self.history

    @contextlib.contextmanager
    def _training_log(self) -> Iterator[None]:
        self.output_dir.mkdir(parents=True, exist_ok=True)
        handler = _attach_log_file(self.output_dir / ("train.log" if self.rank == 0 else f"train.rank{self.rank}.log"))
        try:
            with unique_name.guard(self._names):
                yield
        finally:
            logger.removeHandler(handler)
            handler.close()

    def _train_epochs(self, validate: bool = True) -> float:
        """The epochs left to train, each scored on the validation split if ``validate``; returns when they
        started (perf_counter)."""
        train = self.config["train"]
        (self.output_dir / "config.yaml").write_text(dump_config(self.config), encoding="utf-8")
        self._maybe_resume(train["resume"])
        for cb in self.callbacks:
            cb.on_train_begin(self)
        start = time.perf_counter()
        while self.epoch < train["epochs"]:
            logs = self._train_epoch()
            if validate:
                logs.update({f"valid_{k}": v for k, v in self.evaluate("valid").items()})
            self.epoch += 1
            self.step_in_epoch = 0
            logs["epoch"] = self.epoch
            self.history.append(logs)
            scores = f"  valid auc {logs['valid_auc']:.4f}  valid logloss {logs['valid_logloss']:.4f}" if validate else ""
            logger.info("epoch %d/%d  loss %.4f%s", self.epoch, train["epochs"], logs["loss"], scores)
            for name, statistics in self.cache_statistics().items():
                logger.info("cache %s: hit rate %.3f, %d misses, %d evictions", name, statistics["hit_rate"],
                            statistics["misses"], statistics["evictions"])
            if self.checkpoints:
                self.save()
            for cb in self.callbacks:
                cb.on_epoch_end(self, self.epoch, logs)
        return start

    def _finish(self, start: float) -> dict[str, float]:
        """Pack for serving, evaluate on the test split (and extra subsets), tell the callbacks."""
        results = {}
        if unpacked_tables(self.model):
            results.update({f"test_{k}_before_packing": v for k, v in self.evaluate("test").items()})
            logger.info("packed tables for serving: %s", ", ".join(pack_trained(self.model, self.table_frequencies())))
        results.update({f"test_{k}": v for k, v in self.evaluate("test").items()})
        for subset in self.splits.extra:
            results.update({f"{subset}_{k}": v for k, v in self.evaluate(subset).items()})
            results[f"{subset}_rows"] = len(self.splits.extra[subset])
        results["train_seconds"] = time.perf_counter() - start
        results.update(self.throughput())
        for cb in self.callbacks:
            cb.on_train_end(self, results)
        return results

    def _maybe_resume(self, resume: bool | str) -> None:
        if resume is False or resume == "":
            return
        path = self.checkpoint_path if resume is True else Path(resume)
        if resume is True and not path.exists():
            logger.info("train.resume: no checkpoint at %s yet; starting from scratch", path)
            return
        self.load(path)
        logger.info("resumed from %s at epoch %d, step %d", path, self.epoch, self.step_in_epoch)

    def _train_epoch(self) -> dict[str, float]:
        train = self.config["train"]
        self.model.train()
        batches = self.train_batches
        batches.epoch, batches.skip_batches = self.epoch, self.step_in_epoch
        bar = ProgressBar(len(batches), desc=f"epoch {self.epoch + 1}/{train['epochs']}",
                          every=train["log_every_steps"])
        bar.steps = self.step_in_epoch
        losses = []
        start = time.perf_counter()
        arrays = iter(batches)
        following = next(arrays, None)
        while following is not None:
            self.current_arrays, following = following, next(arrays, None)
            loss = self._train_step({name: paddle.to_tensor(a) for name, a in self.current_arrays.items()}, following)
            losses.append(loss)
            self.step_in_epoch += 1
            self.global_step += 1
            self.trained["examples"] += len(self.current_arrays["label"])
            self.trained["steps"] += 1
            bar.update(len(self.current_arrays["label"]), loss=loss)
            logs = {"loss": loss}
            for cb in self.callbacks:
                cb.on_step_end(self, self.global_step, logs)
            every = train["checkpoint_every_steps"]
            if every and self.global_step % every == 0 and self.step_in_epoch < len(batches):
                check_finite(float(np.mean(losses)), f"training, epoch {self.epoch + 1} step {self.step_in_epoch}")
                self.save()
        loss = float(np.mean(losses)) if losses else float("nan")  # (no batches left to run: nothing diverged)
        if losses:
            check_finite(loss, f"training, epoch {self.epoch + 1}")
        seconds = time.perf_counter() - start
        self.trained["seconds"] += seconds
        return {"loss": loss, "seconds": seconds}

    def _train_step(self, batch: dict[str, paddle.Tensor], following: dict[str, np.ndarray] | None = None
                    ) -> float:
        # Randomness (dropout, stochastic rounding) is a function of (seed, step), so a resumed run draws
        # what the uninterrupted one drew: Paddle 2.6 cannot save its generator state (paddle.save keeps
        # only the seed of a GeneratorState).
        step_key = (self.config["train"]["seed"] * 1_000_003 + self.global_step) % 2**31
        paddle.seed(step_key)
        with step_randomness(step_key):  # tables round by their names and the step, whichever rank holds them
            return self._step(batch, following)

    def _step(self, batch: dict[str, paddle.Tensor], following: dict[str, np.ndarray] | None) -> float:
        exchanged = self.exchange.bytes_sent if self.exchange is not None else 0
        with paddle.amp.auto_cast(enable=self.amp, level=self.amp_level, dtype=self.amp_dtype):
            loss = self.model.create_loss(self.train_model(self.model.inputs(batch)), batch)
        if self.gradient_sum is not None:  # this rank's part of the global batch's mean loss
            loss = loss * self.train_batches.next_share()
        if following is not None:  # cached tables read the next batch's misses while this step runs
            for layer, field in self.prefetching:
                share = getattr(layer, "row_share", None)
                if getattr(layer, "table_share", None) is not None:  # its owner answers the whole next batch
                    layer.prefetch(self.train_batches.whole[field])
                elif share is None:
                    layer.prefetch(following[field])
                else:  # a share is asked for its rows of the whole next batch, by every rank
                    layer.prefetch(share.owned_local(self.train_batches.whole[field]))
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self._after_backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            if self.gradient_sum is not None:
                loss = self.gradient_sum(float(loss))
            self._after_backward()
            self.optimizer.step()
        if self.row_trainer is not None:
            self.row_trainer.step()
            self.row_trainer.clear_grad()
        for table in self.row_tables:
            table.apply_row_updates(self.table_learning_rate)
        self.optimizer.clear_grad()
        if self.exchange is not None:
            self.trained["exchange_bytes"] += self.exchange.bytes_sent - exchanged
        return float(loss)

    def throughput(self) -> dict[str, float]:
        """This process's training speed (examples of its batches, or slices, per second of training steps)
        and, in a sharded job, the bytes it sent per step: to other ranks' tables (ids, rows, row gradients)
        and in the replicated parameters' all-reduce."""
        steps = max(self.trained["steps"], 1)
        found = {"examples_per_second": self.trained["examples"] / max(self.trained["seconds"], 1e-9),
                 "steps_trained": self.trained["steps"]}
        if self.gradient_sum is not None:
            found["exchange_bytes_per_step"] = self.trained["exchange_bytes"] / steps
            found["allreduce_bytes_per_step"] = self.gradient_sum.bytes_sent / steps
        return found

    def _after_backward(self) -> None:
        self.gradient_peaks.observe(self.model)
        for cb in self.callbacks:
            cb.on_after_backward(self, self.global_step + 1)

    # ------------------------------------------------------------------ eval
    def predict(self, table: CTRTable) -> np.ndarray:
        """Click probabilities for every row of the table (or streamed split), in order."""
        return self.predict_all(table)[0]

    @paddle.no_grad()
    def predict_all(self, table: CTRTable) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Click probabilities, a multi-task model's regression outputs by target, and the split's
        labels and targets by name (``label``, ``rating``), all in row order."""
        self.model.eval()
        clicks, regressions = [], {target: [] for target in self.model.regression_targets}
        truths: dict[str, list[np.ndarray]] = {"label": [], **{target: [] for target in regressions}}
        for arrays in CTRBatches(table, EVAL_BATCH_SIZE, shuffle=False):
            part = rank_slice(arrays, self.rank, self.world_size) if self.sharded else arrays
            batch = {name: paddle.to_tensor(a) for name, a in part.items()}
            with paddle.amp.auto_cast(enable=self.amp, level=self.amp_level, dtype=self.amp_dtype):
                outputs = self.model(self.model.inputs(batch))
            outputs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
            outputs = [F.sigmoid(outputs[0].astype("float32"))] + [o.astype("float32") for o in outputs[1:]]
            if self.sharded:  # every rank scores its slice; all of them, in order, make the batch's scores
                outputs = [gather_slices(o, self.world_size) for o in outputs]
            clicks.append(outputs[0].numpy())
            for target, output in zip(regressions, outputs[1:] if regressions else ()):
                regressions[target].append(output.numpy())
            for name, values in truths.items():
                values.append(arrays[name])
        self.model.train()

        def joined(parts: list[np.ndarray]) -> np.ndarray:
            return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
        return (joined(clicks), {t: joined(v) for t, v in regressions.items()},
                {name: joined(v) for name, v in truths.items()})

    def evaluate(self, split: str = "test") -> dict[str, float]:
        """AUC, logloss and accuracy on ``train``, ``valid``, ``test`` or a named extra subset of the data
        (``test_oov`` of text data: test sentences with a word never seen in training); a multi-task
        model adds the RMSE of each regression target (``rating_rmse``)."""
        table = self.splits.extra[split] if split in self.splits.extra else getattr(self.splits, split)
        probabilities, regressions, truths = self.predict_all(table)
        labels = truths.pop("label")
        return self.model.create_metrics(labels, probabilities, regressions, truths)

    def memory_report(self):
        """The model's tables, with the optimizer state training keeps for them."""
        return memory_report(self.model, self.optimizer, self.gradient_peaks)

    def cache_statistics(self) -> dict[str, dict[str, float]]:
        """Counters of each cached table (hits, misses, evictions, bytes moved), by table name."""
        return {name: layer.statistics() for name, layer in cached_layers(self.model).items()}


def _parallel_env(config: dict[str, Any]) -> tuple[int, int]:
    """(rank, world size): (0, 1) unless distributed.mode is 'collective', which needs the launcher, or
    'sharded' under the launcher (without it: one process holding every row, as the tools read a job)."""
    mode = config["distributed"]["mode"]
    if mode not in ("collective", "sharded") or (mode == "sharded" and "PADDLE_TRAINER_ENDPOINTS" not in os.environ):
        return 0, 1
    if "PADDLE_TRAINER_ENDPOINTS" not in os.environ:
        raise ConfigError("distributed.mode = 'collective' runs under the launcher: python -m "
                          "paddle.distributed.launch --nproc_per_node 2 tools/train.py -c <config>")
    if not paddle.distributed.is_initialized():
        paddle.distributed.init_parallel_env()  # gloo on CPU, NCCL on GPU
    return paddle.distributed.get_rank(), paddle.distributed.get_world_size()


def _attach_log_file(path: Path) -> logging.Handler:
    """Log to the run's own train.log; console output is the application's choice (tools/ set it)."""
    log = logging.getLogger("paddle_edo")
    log.setLevel(logging.INFO)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    return handler
