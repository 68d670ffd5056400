"""Fleet parameter-server training: the CTR model built as a static program whose tables are PS sparse
tables, one process per server or trainer under ``python -m paddle.distributed.launch``.

Paddle 2.6.2 facts this relies on (measured on the CPU wheel, see the README):
- sync mode segfaults in SendBarrierOp on its first step, so it is refused; async and geo work;
- async trainers push dense gradients but never pull the updated dense parameters back: they are
  pulled here every ``pull_dense_every`` steps;
- ``run_server()`` never returns by itself: after a barrier, trainer 0 stops the servers;
- a trainer that exits without ``stop_worker()`` segfaults; every trainer must call the save.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import paddle
import paddle.nn.functional as F

from ..checkpoint import CheckpointError, check_finite, save_checkpoint
from ..config import checkpoint_difference, checkpoint_sections
from ..data import CTRBatches, load_dataset
from ..errors import EdoRuntimeError
from ..metrics import accuracy, auc, logloss
from ..models import build_model
from ..monitor import SparseGradMonitor, monitors_from_config
from ..monitor.row_gradients import RowGradients
from ..nn.ps_table import PSEmbedding
from ..schema import ConfigError
from .admission import RULES as ADMISSION_RULES
from .admission import FeatureAdmission, joined

logger = logging.getLogger("paddle_edo")

SGD_RULES = {"adam": ("SparseAdamSGDRule", "adam"), "adagrad": ("SparseAdaGradSGDRule", "adagrad"),
             "sgd": ("SparseNaiveSGDRule", "naive")}
EXPORT_CHUNK = 8192
PS_EMBEDDINGS = ("dense", "hash", "qr")


def check_ps_config(config: dict[str, Any]) -> None:
    distributed = config["distributed"]
    if distributed["ps_mode"] == "sync":
        raise ConfigError("distributed.ps_mode = 'sync' is refused: on Paddle 2.6.2 synchronous parameter-server "
                          "training segfaults in SendBarrierOp on its first step; use 'async' or 'geo', or "
                          "distributed.mode = 'collective' for synchronous data-parallel training")
    if distributed["entry"] in ADMISSION_RULES:  # applied by the trainers: the 2.6.2 servers ignore entries
        if config["embedding"]["type"] != "dense":
            raise ConfigError(f"distributed.entry = {distributed['entry']!r} needs embedding.type = 'dense', not "
                              f"{config['embedding']['type']!r}: with hash or qr, ids share rows anyway")
    if config["embedding"]["type"] not in PS_EMBEDDINGS:
        raise ConfigError(f"embedding.type = {config['embedding']['type']!r} cannot be used with distributed.mode = "
                          f"'ps'; expected one of {', '.join(map(repr, PS_EMBEDDINGS))} (the servers hold plain "
                          f"tables; hash and qr map ids to their rows before the lookup)")
    if config["train"]["optimizer"] not in SGD_RULES:
        raise ConfigError(f"train.optimizer = {config['train']['optimizer']!r} has no parameter-server rule; "
                          f"expected one of {', '.join(map(repr, SGD_RULES))}")
    if config["train"]["amp"]["enable"]:
        raise ConfigError("train.amp.enable = true is not supported with distributed.mode = 'ps'")
    if config["model"]["name"] != "deepfm":
        raise ConfigError(f"model.name = {config['model']['name']!r} is not supported with distributed.mode = "
                          f"'ps'; parameter-server jobs train 'deepfm'")
    core = paddle.base.core
    if not (core.is_compiled_with_distribute() and hasattr(core, "DistFleetWrapper")):
        raise ConfigError(f"distributed.mode = 'ps' needs a Paddle build with parameter-server support; this "
                          f"paddle {paddle.__version__} has none (the 3.x CPU wheels on PyPI lack it): install "
                          f"paddlepaddle==2.6.2")


def strategy_from_config(config: dict[str, Any], table_names: list[str]):
    """DistributedStrategy of the ``distributed`` section: async or geo, sparse rule and shards per table."""
    from paddle.distributed import fleet

    distributed, train = config["distributed"], config["train"]
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True
    if distributed["ps_mode"] == "geo":
        strategy.a_sync_configs = {"k_steps": distributed["k_steps"]}
    rule, field = SGD_RULES[train["optimizer"]]
    learning_rate = distributed["sparse_learning_rate"] or train["embedding_learning_rate"] or train["learning_rate"]
    tables = {}
    for name in table_names:
        prefix = f"table_parameters.{name}"
        tables[name] = {f"{prefix}.shard_num": distributed["shard_num"]}
        for part in ("embed_sgd_param", "embedx_sgd_param"):
            tables[name][f"{prefix}.accessor.{part}.name"] = rule
            tables[name][f"{prefix}.accessor.{part}.{field}.learning_rate"] = learning_rate
    strategy.sparse_table_configs = tables
    return strategy


class PSJob:
    """One process of a parameter-server job: a server, or a trainer that trains its share of the data."""

    def __init__(self, config: dict[str, Any]) -> None:
        from paddle.distributed import fleet

        check_ps_config(config)
        if "PADDLE_PSERVERS_IP_PORT_LIST" not in os.environ:
            raise ConfigError("distributed.mode = 'ps' runs under the launcher: python -m paddle.distributed.launch "
                              "--server_num=1 --trainer_num=2 tools/train.py -c <config>")
        self.config = config
        self.fleet = fleet
        self.output_dir = Path(config["train"]["output_dir"])
        paddle.enable_static()
        fleet.init(is_collective=False)
        self.role = "server" if fleet.is_server() else f"trainer {fleet.worker_index()}"
        # each trainer logs its own VisualDL run; an unwritable folder fails here, before any training
        self.monitor: SparseGradMonitor | None = None if fleet.is_server() else next(
            iter(monitors_from_config(config, run=f"trainer{fleet.worker_index()}", memory=False)), None)
        _exit_after(config["distributed"]["timeout_s"], f"{self.role} passed distributed.timeout_s = "
                    f"{config['distributed']['timeout_s']} s")
        paddle.seed(config["train"]["seed"])
        self.splits = load_dataset(config["data"])
        self.fields = self.splits.fields
        distributed = config["distributed"]
        # feature admission on this trainer's batches (single-valued fields: a multi-valued field's id 0 is
        # padding, which pooling leaves out, so serving could not treat a filtered id the same way)
        self.admission = None if fleet.is_server() or distributed["entry"] not in ADMISSION_RULES else \
            FeatureAdmission.from_config(config, {f.name: f.vocab_size for f in self.fields if not f.multi_valued},
                                         fleet.worker_index())
        self.served: dict[str, np.ndarray] | None = None  # ids some trainer admitted (trainer 0, at the end)
        self.geo = distributed["ps_mode"] == "geo"
        self._build()

    def _build(self) -> None:
        distributed = self.config["distributed"]
        # no entry for the servers: they ignore it (the trainers admit ids themselves)
        table_options = {"table_class": distributed["table_class"], "geo": self.geo}
        embedding = self.config["embedding"]
        if embedding["type"] == "dense":  # every table on the servers
            self.model = build_model(self.fields, {**self.config, "embedding": {
                "type": "ps_sparse", "dim": embedding["dim"], "sparse": True, **table_options}})
        else:  # id compression (hash, qr): the layers map ids to rows; their inner tables go to the servers
            self.model = build_model(self.fields, self.config)
            _tables_to_servers(self.model, table_options)
        self.inputs = [paddle.static.data(f.name, [None, f.max_len] if f.multi_valued else [None], "int64")
                       for f in self.fields]
        self.label = paddle.static.data("label", [None], "float32")
        self.logit = self.model(self.inputs)
        self.loss = F.binary_cross_entropy_with_logits(self.logit, self.label)
        self.tables = {name: layer for name, layer in self.model.named_sublayers() if isinstance(layer, PSEmbedding)}
        strategy = strategy_from_config(self.config, [f"ps_{t.full_name()}" for t in self.tables.values()])
        train = self.config["train"]
        optimizer = {"adam": paddle.optimizer.Adam, "adagrad": paddle.optimizer.Adagrad,
                     "sgd": paddle.optimizer.SGD}[train["optimizer"]](train["learning_rate"])
        # no program_guard: minimize switches the default programs to the rewritten ones
        self.fleet.distributed_optimizer(optimizer, strategy).minimize(self.loss)
        self.monitor_fetches: dict[str, tuple] = {}
        if self.monitor is not None:  # a logged step fetches each table's looked-up rows and output gradients:
            block = paddle.static.default_main_program().global_block()  # the sparse gradient the trainer pushes
            self.monitor_fetches = {name: (t.ids, block.var(t.output.name + "@GRAD")) for name, t in self.tables.items()}

    # ------------------------------------------------------------ run
    def run(self) -> dict[str, float] | None:
        if self.fleet.is_server():
            check_listenable(self.fleet.server_endpoints()[self.fleet.server_index()], self.role)
            self.fleet.init_server()
            logger.info("%s: serving", self.role)
            self.fleet.run_server()  # returns when trainer 0 stops the servers
            return None
        return self._train()

    def _train(self) -> dict[str, float]:
        from paddle.distributed.ps.utils.public import get_the_one_recv_context

        fleet, train = self.fleet, self.config["train"]
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(paddle.static.default_startup_program())
        rank, trainers = fleet.worker_index(), fleet.worker_num()
        resumed = self._checkpoint_to_resume()
        if resumed is not None and self.geo:  # before init_worker, which starts the servers from trainer 0's tables
            self._load_trainer_state(resumed[0])
        seconds = self.config["distributed"]["init_timeout_s"]
        stalled = _exit_after(seconds, f"{self.role}: fleet.init_worker() did not return within "
                                       f"distributed.init_timeout_s = {seconds} s (stalled in Paddle's start-up "
                                       f"barriers; start the job again)")
        fleet.init_worker()
        stalled.cancel()
        logger.info("%s: joined the servers", self.role)
        runtime = fleet.fleet._runtime_handle

        def pull_dense() -> None:  # async trainers do not receive dense updates by themselves
            runtime._worker.client_flush()
            runtime._pull_all_dense(runtime.scopes, runtime._send_ctx, get_the_one_recv_context(runtime.context))

        mine = self.splits.train.take(np.arange(rank, len(self.splits.train), trainers))
        batches = CTRBatches(mine, train["batch_size"], shuffle=True, seed=train["seed"] + rank)
        main = paddle.static.default_main_program()
        every = self.config["distributed"]["pull_dense_every"]
        first_epoch, history = 0, []
        if resumed is not None:
            first_epoch, history = self._resume(*resumed, pull_dense)
        step, start = 0, time.perf_counter()
        self._attach_monitor()
        for epoch in range(first_epoch, train["epochs"]):
            batches.epoch = epoch
            losses = []
            for batch in batches:
                step += 1
                watched = self.monitor is not None and step % self.monitor.every_n_steps == 0
                fetches = [v for pair in self.monitor_fetches.values() for v in pair] if watched else []
                feed = self._feed(batch, admit=True)
                loss, *fetched = exe.run(main, feed=feed, fetch_list=[self.loss, *fetches])
                losses.append(float(loss))
                if self.monitor is not None:
                    self._monitor_step(step, feed, fetched)
                if not self.geo and step % every == 0:
                    pull_dense()
            history.append(float(np.mean(losses)))
            logger.info("%s: epoch %d/%d  loss %.4f", self.role, epoch + 1, train["epochs"], history[-1])
            check_finite(history[-1], f"{self.role}, epoch {epoch + 1}")
            if self.monitor is not None:
                self.monitor.log_never_updated(step)
            self._save(exe, epoch + 1, history)
        if self.monitor is not None:
            self.monitor.writer.close()
        seconds = time.perf_counter() - start
        if self.geo:
            runtime._communicator.stop()  # sends the last deltas
        pull_dense()
        fleet.barrier_worker()
        results: dict[str, float] = {"train_seconds": seconds, "examples_per_second": step * train["batch_size"]
                                     / seconds, "loss_first_epoch": history[0], "loss_last_epoch": history[-1]}
        self.output_dir.mkdir(parents=True, exist_ok=True)
        if self.admission is not None:
            results["admitted_ids"] = self.admission.counts()
            self._admission_path(rank).parent.mkdir(exist_ok=True)
            self.admission.save(self._admission_path(rank))
        (self.output_dir / f"results.trainer{rank}.json").write_text(json.dumps(results, indent=2))
        fleet.barrier_worker()  # every trainer's admitted ids are saved
        if rank == 0:
            if self.admission is not None:
                self.served = joined([self._admission_path(r) for r in range(trainers)])
            results.update(self._finish(exe, history))
        fleet.barrier_worker()  # the others wait for trainer 0's evaluation and export
        if rank == 0:
            runtime._worker.stop_server()
        fleet.stop_worker()
        return results

    # ------------------------------------------------------------ monitoring
    def _attach_monitor(self) -> None:
        if self.monitor is None:
            return
        table_fields = self.model.table_fields()
        sizes = {f.name: f.vocab_size for f in self.fields}
        self.monitor.table_fields = table_fields
        self.monitor.attach(self.model, {t: self.splits.valid.ids[f] for t, f in table_fields.items()},
                            {t: sizes[f] for t, f in table_fields.items()})

    def _monitor_step(self, step: int, batch: dict[str, np.ndarray], fetched: list[np.ndarray]) -> None:
        """Coverage from the batch's ids every step; on logged steps, the fetched row gradients."""
        gradients = None
        if fetched:
            gradients = {name: RowGradients(rows.ravel(), grads.reshape(rows.size, -1), sparse=True)
                         for name, rows, grads in zip(self.monitor_fetches, fetched[0::2], fetched[1::2])}
        lookups = {t: batch[f] for t, f in self.monitor.table_fields.items()}
        self.monitor.step(self.model, step, lookups, gradients)

    # ------------------------------------------------------------ checkpoints
    @property
    def checkpoint_dir(self) -> Path:
        return self.output_dir / "ps_checkpoint"

    def _save(self, exe, epochs_done: int, history: list[float]) -> None:
        """After an epoch: the servers' tables (sparse and dense, with optimizer state; every trainer calls the
        save, a barrier is inside), and each trainer's own state (geo: its copies of the tables and dense
        parameters with its optimizer state; its admitted ids), into a fresh folder renamed over the last one."""
        rank = self.fleet.worker_index()
        fresh = self.checkpoint_dir.with_name(self.checkpoint_dir.name + ".tmp")
        self.fleet.save_persistables(exe, str(fresh))
        fresh.mkdir(parents=True, exist_ok=True)
        if self.geo:
            np.savez(fresh / f"trainer{rank}.npz", **self._trainer_state())
        if self.admission is not None:
            self.admission.save(fresh / f"admission.trainer{rank}.npz")
        self.fleet.barrier_worker()  # every trainer's files are written
        if rank == 0:
            state = {"epoch": epochs_done, "history": history, "config": checkpoint_sections(self.config),
                     "job": self._job_settings()}
            (fresh / "state.json").write_text(json.dumps(state))
            old = self.checkpoint_dir.with_name(self.checkpoint_dir.name + ".old")
            if self.checkpoint_dir.exists():
                os.replace(self.checkpoint_dir, old)
            os.replace(fresh, self.checkpoint_dir)
            if old.exists():
                shutil.rmtree(old)
        self.fleet.barrier_worker()

    def _job_settings(self) -> dict[str, Any]:
        """What a resumed job must share with the one that saved: its mode, trainers and admission rule."""
        distributed = self.config["distributed"]
        return {"ps_mode": distributed["ps_mode"], "trainers": self.fleet.worker_num(), "entry": distributed["entry"]}

    def _checkpoint_to_resume(self) -> tuple[Path, dict[str, Any]] | None:
        """With train.resume: the last epoch checkpoint's folder and state, checked against this job."""
        if self.config["train"]["resume"] is False:
            return None
        folder = self.checkpoint_dir
        if not (folder / "state.json").is_file() and (folder.with_name(folder.name + ".old") / "state.json").is_file():
            folder = folder.with_name(folder.name + ".old")  # interrupted between the two renames
        if not (folder / "state.json").is_file():
            logger.info("%s: train.resume: no parameter-server checkpoint in %s yet; starting afresh", self.role,
                        self.checkpoint_dir)
            return None
        state = json.loads((folder / "state.json").read_text())
        diff = checkpoint_difference(state["config"], self.config)
        if diff is not None:
            raise CheckpointError(f"{folder} was made with another {diff.split('.')[0]} config ({diff}); resume "
                                  f"it with the config it was trained with")
        saved = {"ps_mode": "async", "trainers": self.fleet.worker_num(), "entry": "none", **state.get("job", {})}
        for key, now in self._job_settings().items():  # checkpoints from before "job" existed: async, no entry
            if saved[key] != now:
                name = "the number of trainers" if key == "trainers" else f"distributed.{key}"
                raise CheckpointError(f"{folder} was made by a job whose {name} was {saved[key]!r}, now {now!r}; "
                                      f"resume it with the same setting")
        return folder, state

    def _resume(self, folder: Path, state: dict[str, Any], pull_dense) -> tuple[int, list[float]]:
        """Continue from an epoch checkpoint: async loads the servers' tables (geo trainers loaded their
        own state before init_worker); each trainer takes back its admitted ids. (first epoch, losses)"""
        if not self.geo:
            self.fleet.load_model(str(folder), mode=0)  # trainer 0 loads every table on the servers
            pull_dense()
        if self.admission is not None:
            self.admission.load(folder / f"admission.trainer{self.fleet.worker_index()}.npz")
        logger.info("%s: resumed from %s after epoch %d", self.role, folder, state["epoch"])
        return state["epoch"], list(state["history"])

    def _trainer_state(self) -> dict[str, np.ndarray]:
        """This trainer's persistable variables: in geo mode its copies of the tables and the dense
        parameters, with its optimizer's accumulators."""
        scope, state = paddle.static.global_scope(), {}
        for var in paddle.static.default_main_program().list_vars():
            found = scope.find_var(var.name) if var.persistable else None
            if found is not None and var.type == paddle.base.core.VarDesc.VarType.LOD_TENSOR \
                    and found.get_tensor()._is_initialized():
                state[var.name] = np.array(found.get_tensor())
        return state

    def _load_trainer_state(self, folder: Path) -> None:
        """Put this trainer's saved variables back into its scope. In geo mode init_worker then starts the
        servers from trainer 0's tables and dense parameters, and the other trainers take them from there,
        as at any geo start; each trainer keeps its own optimizer state."""
        scope = paddle.static.global_scope()
        with np.load(folder / f"trainer{self.fleet.worker_index()}.npz") as saved:
            for name in saved.files:
                scope.find_var(name).get_tensor().set(saved[name], paddle.CPUPlace())

    def _feed(self, batch: dict[str, Any], admit: bool = False) -> dict[str, np.ndarray]:
        """The batch as fed: with feature admission, training batches pass through this trainer's
        admission, and evaluation looks up ids no trainer admitted as id 0."""
        feed = {f.name: np.asarray(batch[f.name]) for f in self.fields}
        if admit and self.admission is not None:
            clicks = np.asarray(batch["label"], dtype=np.float64)
            feed.update({name: self.admission(name, feed[name], clicks) for name in self.admission.admitted})
        elif self.served is not None:
            feed.update({name: np.where(flags[feed[name]], feed[name], 0) for name, flags in self.served.items()})
        feed["label"] = np.asarray(batch["label"], dtype=np.float32)
        return feed

    def _admission_path(self, rank: int) -> Path:
        return self.output_dir / "admission" / f"trainer{rank}.npz"

    # ------------------------------------------------------------ trainer 0
    def _finish(self, exe, history: list[float]) -> dict[str, float]:
        """Evaluate on the test split and write a paddle_edo checkpoint with every table pulled from
        the servers, so tools/eval.py, export_model.py and infer.py serve the PS-trained model."""
        forward = paddle.static.default_main_program()._prune(targets=[self.logit])
        test = self.splits.test
        logits = np.concatenate([exe.run(forward, feed=self._feed(b), fetch_list=[self.logit])[0]
                                 for b in CTRBatches(test, 8192, shuffle=False)])
        probabilities = 1.0 / (1.0 + np.exp(-logits))
        results = {"test_auc": auc(test.labels, probabilities), "test_logloss": logloss(test.labels, probabilities),
                   "test_accuracy": accuracy(test.labels, probabilities)}
        state = {**self._dense_state(exe), **self._pulled_tables(exe)}
        save_checkpoint({"model": state, "optimizer": {},
                         "epoch": self.config["train"]["epochs"], "step_in_epoch": 0, "global_step": 0,
                         "history": [{"loss": loss} for loss in history],
                         "config": checkpoint_sections(self.config)},
                        self.output_dir / "checkpoints" / "last.pdckpt")
        (self.output_dir / "results.json").write_text(json.dumps(results, indent=2))
        return results

    def _dense_state(self, exe) -> dict[str, np.ndarray]:
        """Dense parameters from the scope (pulled from the servers) and the layers' constants (hash
        coefficients), computed by the program."""
        scope = paddle.static.global_scope()
        state = {key: np.array(scope.find_var(var.name).get_tensor()) for key, var in self.model.state_dict().items()}
        main = paddle.static.default_main_program()
        for layer_name, layer in self.model.named_sublayers():
            for name, var in layer.__dict__.get("static_constants", {}).items():
                state[f"{layer_name}.{name}"] = exe.run(main._prune(targets=[var]), feed={}, fetch_list=[var])[0]
        return state

    def _pulled_tables(self, exe) -> dict[str, np.ndarray]:
        """Every row of every table, looked up through the servers by feeding row ids straight to each
        table's lookup (ids no trainer ever looked up come back as zeros, as the servers serve them)."""
        out = {}
        main = paddle.static.default_main_program()
        fields = [f.name for f in self.fields]
        for name, table in self.tables.items():
            # the servers' lookups are fused into one op that reads every table's ids: the fields get
            # padding, this table its row ids
            program = main._prune_with_input([*fields, table.ids.name], [table.output])
            rows = []
            for begin in range(0, table.num_embeddings, EXPORT_CHUNK):
                ids = np.arange(begin, min(begin + EXPORT_CHUNK, table.num_embeddings), dtype=np.int64)
                feed = {f.name: np.zeros((1, f.max_len) if f.multi_valued else (1,), np.int64) for f in self.fields}
                feed[table.ids.name] = ids[:, None]
                rows.append(exe.run(program, feed=feed, fetch_list=[table.output])[0])
            weight = np.concatenate(rows).astype(np.float32)
            if table.padding_idx is not None:
                weight[table.padding_idx] = 0.0
            field = self.model.table_fields().get(name)
            if self.served is not None and field in self.served:  # served as id 0, like the evaluation
                weight[~self.served[field]] = weight[0]
            out[f"{name}.weight"] = weight
        return out


def _tables_to_servers(model: paddle.nn.Layer, table_options: dict[str, Any]) -> None:
    """Swap every DenseEmbedding under ``model`` for a PSEmbedding of its shape, before the graph is built."""
    from ..nn.dense import DenseEmbedding

    for _, parent in list(model.named_sublayers(include_self=True)):
        for key, child in list(parent._sub_layers.items()):
            if isinstance(child, DenseEmbedding):
                parent._sub_layers[key] = PSEmbedding(child.num_embeddings, child.embedding_dim, child.padding_idx,
                                                      **table_options)


class _Watchdog:
    """A process that, after ``seconds`` unless cancelled, says why on this process's stdout and kills it
    (which fails the launcher's job). A process, not a timer thread: a trainer stalled in Paddle's C++
    start-up barriers holds the GIL, so a thread never runs (seen: geo trainers stalled past every bound
    while another process kept a core busy). It ends by itself once this process is gone."""

    _CODE = ("import os, signal, sys, time\n"
             "parent, seconds, reason = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]\n"
             "time.sleep(seconds)\n"
             "if os.getppid() == parent:\n"
             "    print(f'paddle_edo: {reason}; exiting', flush=True)\n"
             "    os.kill(parent, signal.SIGKILL)\n")

    def __init__(self, seconds: int, reason: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", self._CODE, str(os.getpid()), str(seconds), reason],
                                        stdin=subprocess.DEVNULL)

    def cancel(self) -> None:
        self.process.kill()
        self.process.wait()


def _exit_after(seconds: int, reason: str) -> _Watchdog:
    """Bound this process: after ``seconds`` (unless cancelled) it is stopped, saying why."""
    return _Watchdog(seconds, reason)


FINISHED = "paddle_edo: finished as"  # the last line of every process that ended normally (tools/launch.py)


class ServerStartError(EdoRuntimeError):
    """A parameter server cannot serve on the endpoint the launcher gave it."""


def check_listenable(endpoint: str, role: str) -> None:
    """Refuse to start a server on a port another process holds (bound as brpc binds it). brpc would only
    log 'Fail to listen' and return, and the trainers would wait for the server until the job's timeout;
    a server that fails makes the launcher stop the job at once."""
    host, port = endpoint.rsplit(":", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, int(port)))
        except OSError as exc:
            raise ServerStartError(f"{role}: cannot listen on {endpoint} ({exc.strerror}): another process holds "
                                   f"the port the launcher chose; start the job again") from None


def run_ps(config: dict[str, Any]) -> dict[str, float] | None:
    """Run this process's part of a PS job; trainers return their results (trainer 0 with test metrics)."""
    job = PSJob(config)
    results = job.run()
    print(f"{FINISHED} {job.role}", flush=True)
    return results
