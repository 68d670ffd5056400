"""Fleet parameter-server training: the CTR model built as a static program whose tables are PS sparse
tables, one process per server or trainer under ``python -m paddle.distributed.launch``.

Paddle 2.6.2 facts this relies on (measured on the CPU wheel, see docs/guides/distributed.md):
- sync mode segfaults in SendBarrierOp on its first step, so it is refused; async and geo work;
- async trainers push dense gradients but never pull the updated dense parameters back: they are
  pulled here every ``pull_dense_every`` steps;
- a sparse row that no trainer has pushed yet reads as zeros: the servers create a row at its first
  push (``FLAGS_pserver_create_value_when_push``, on by default and not settable from Python). A
  trainer's first batches, whose rows are all new, therefore give exactly zero gradients (the ReLU
  layers see only zeros); those zero pushes create the rows, and training proceeds from there;
- ``run_server()`` never returns by itself: after a barrier, trainer 0 stops the servers;
- a trainer that exits without ``stop_worker()`` segfaults; every trainer must call the save.
"""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import paddle

from ..checkpoint import check_finite, checkpoint_sections, save_checkpoint
from ..data import CTRBatches, load_dataset
from ..models import build_model
from ..models.optimizers import create_optimizer
from ..monitor import SparseGradMonitor, monitors_from_config
from ..monitor.sparse_grad import MONITORED_VALID_ROWS
from ..monitor.row_gradients import RowGradients
from ..nn import DenseEmbedding, PSEmbedding, swap_sublayers
from ..schema import ConfigError
from .admission import RULES as ADMISSION_RULES
from .admission import FeatureAdmission, joined
from .options import SGD_RULES, check_ps_config
from .processes import FINISHED, check_listenable, exit_after
from .ps_checkpoint import PSCheckpoints
from .ps_export import dense_state, pulled_tables

logger = logging.getLogger("paddle_edo")



def table_learning_rate(config: dict[str, Any]) -> float:
    """The tables' rate in a PS job: the servers' rule's, and in geo mode the trainers' for their local copies."""
    distributed, train = config["distributed"], config["train"]
    return distributed["sparse_learning_rate"] or train["embedding_learning_rate"] or train["learning_rate"]


def strategy_from_config(config: dict[str, Any], table_names: list[str]):
    """DistributedStrategy of the ``distributed`` section: async or geo, sparse rule and shards per table."""
    from paddle.distributed import fleet

    distributed, train = config["distributed"], config["train"]
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True
    if distributed["ps_mode"] == "geo":
        strategy.a_sync_configs = {"k_steps": distributed["k_steps"]}
    rule, field = SGD_RULES[train["optimizer"]]
    learning_rate = table_learning_rate(config)
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
        exit_after(config["distributed"]["timeout_s"], f"{self.role} passed distributed.timeout_s = "
                    f"{config['distributed']['timeout_s']} s")
        paddle.seed(config["train"]["seed"])
        # a user's files: trainer 0 keeps the data plan beside the run (every process makes the same one)
        self.splits = load_dataset(config["data"], self.output_dir / "data"
                                   if not fleet.is_server() and fleet.worker_index() == 0 else None)
        self.fields = self.splits.fields
        distributed = config["distributed"]
        # feature admission on this trainer's batches (single-valued fields: a multi-valued field's id 0 is
        # padding, which pooling leaves out, so serving could not treat a filtered id the same way)
        self.admission = None if fleet.is_server() or distributed["entry"] not in ADMISSION_RULES else \
            FeatureAdmission.from_config(config, {f.name: f.vocab_size for f in self.fields if not f.multi_valued},
                                         fleet.worker_index())
        self.served: dict[str, np.ndarray] | None = None  # ids some trainer admitted (trainer 0, at the end)
        self.geo = distributed["ps_mode"] == "geo"
        self.checkpoints = PSCheckpoints(config, fleet, self.role, self.admission)
        self._build()

    def _build(self) -> None:
        distributed = self.config["distributed"]
        # no entry for the servers: they ignore it (the trainers admit ids themselves)
        table_options = {"table_class": distributed["table_class"], "geo": self.geo}
        # per-table layers: the servers hold and train the tables, so a collection would batch nothing
        embedding = {**self.config["embedding"], "collection": False}
        if embedding["type"] == "dense":  # every table on the servers
            self.model = build_model(self.fields, {**self.config, "embedding": {
                "type": "ps_sparse", "dim": embedding["dim"], "sparse": True, "collection": False, **table_options}},
                dense_features=self.splits.dense_features)
        else:  # id compression (hash, qr): the layers map ids to rows; their inner tables go to the servers
            self.model = build_model(self.fields, {**self.config, "embedding": embedding},
                                     dense_features=self.splits.dense_features)
            _tables_to_servers(self.model, table_options)
        if self.geo:  # the trainers train their copies of the tables: at the tables' rate, as the servers would
            rate, learning_rate = table_learning_rate(self.config), self.config["train"]["learning_rate"]
            for _, layer in self.model.named_sublayers():
                if isinstance(layer, PSEmbedding) and learning_rate > 0:
                    layer.weight_attr = paddle.ParamAttr(learning_rate=rate / learning_rate)
        self.inputs = [paddle.static.data(spec.name, spec.shape, spec.dtype) for spec in self.model.input_specs()]
        self.label = paddle.static.data("label", [None], "float32")
        self.logit = self.model(self.inputs)
        self.loss = self.model.create_loss(self.logit, {"label": self.label})
        self.tables = {name: layer for name, layer in self.model.named_sublayers() if isinstance(layer, PSEmbedding)}
        strategy = strategy_from_config(self.config, [f"ps_{t.full_name()}" for t in self.tables.values()])
        train = self.config["train"]
        optimizer = create_optimizer(train)
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
        resumed = self.checkpoints.to_resume()
        if resumed is not None and self.geo:  # before init_worker, which starts the servers from trainer 0's tables
            self.checkpoints.load_trainer_state(resumed[0])
        seconds = self.config["distributed"]["init_timeout_s"]
        stalled = exit_after(seconds, f"{self.role}: fleet.init_worker() did not return within "
                                       f"distributed.init_timeout_s = {seconds} s (stalled in Paddle's start-up "
                                       f"barriers; start the job again)")
        fleet.init_worker()
        stalled.cancel()
        logger.info("%s: joined the servers", self.role)
        runtime = fleet.fleet._runtime_handle

        def pull_dense() -> None:  # async trainers do not receive dense updates by themselves
            runtime._worker.client_flush()
            runtime._pull_all_dense(runtime.scopes, runtime._send_ctx, get_the_one_recv_context(runtime.context))

        mine = self.splits.train.shard(rank, trainers)
        batches = CTRBatches(mine, train["batch_size"], shuffle=True, seed=train["seed"] + rank)
        main = paddle.static.default_main_program()
        every = self.config["distributed"]["pull_dense_every"]
        first_epoch, history = 0, []
        if resumed is not None:
            first_epoch, history = self.checkpoints.resume(*resumed, pull_dense)
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
                if step % train["log_every_steps"] == 0:
                    logger.info("%s: step %d  loss %.4f (the last %d steps)", self.role, step,
                                np.mean(losses[-train["log_every_steps"]:]), min(len(losses), train["log_every_steps"]))
                if self.monitor is not None:
                    self._monitor_step(step, feed, fetched)
                if not self.geo and step % every == 0:
                    pull_dense()
            history.append(float(np.mean(losses)))
            logger.info("%s: epoch %d/%d  loss %.4f", self.role, epoch + 1, train["epochs"], history[-1])
            check_finite(history[-1], f"{self.role}, epoch {epoch + 1}")
            if self.monitor is not None:
                self.monitor.log_never_updated(step)
            self.checkpoints.save(exe, epoch + 1, history)
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
        valid = self.splits.valid.head(MONITORED_VALID_ROWS)
        self.monitor.attach(self.model, {t: valid.ids[f] for t, f in table_fields.items()},
                            {t: sizes[f] for t, f in table_fields.items()})

    def _monitor_step(self, step: int, batch: dict[str, np.ndarray], fetched: list[np.ndarray]) -> None:
        """Coverage from the batch's ids every step; on logged steps, the fetched row gradients."""
        gradients = None
        if fetched:
            gradients = {name: RowGradients(rows.ravel(), grads.reshape(rows.size, -1), sparse=True)
                         for name, rows, grads in zip(self.monitor_fetches, fetched[0::2], fetched[1::2])}
        lookups = {t: batch[f] for t, f in self.monitor.table_fields.items()}
        self.monitor.step(self.model, step, lookups, gradients)

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
        if self.splits.dense_features:
            feed["dense"] = np.asarray(batch["dense"], dtype=np.float32)
        return feed

    def _admission_path(self, rank: int) -> Path:
        return self.output_dir / "admission" / f"trainer{rank}.npz"

    # ------------------------------------------------------------ trainer 0
    def _finish(self, exe, history: list[float]) -> dict[str, float]:
        """Evaluate on the test split and write a paddle_edo checkpoint with every table pulled from
        the servers, so tools/eval.py, export_model.py and infer.py serve the PS-trained model."""
        forward = paddle.static.default_main_program()._prune(targets=[self.logit])
        logits, labels = [], []
        for batch in CTRBatches(self.splits.test, 8192, shuffle=False):
            logits.append(exe.run(forward, feed=self._feed(batch), fetch_list=[self.logit])[0])
            labels.append(batch["label"])
        probabilities = 1.0 / (1.0 + np.exp(-np.concatenate(logits)))
        results = {f"test_{k}": v for k, v in self.model.create_metrics(np.concatenate(labels), probabilities).items()}
        state = {**dense_state(exe, self.model), **pulled_tables(exe, self.model, self.fields, self.served)}
        save_checkpoint({"model": state, "optimizer": {},
                         "epoch": self.config["train"]["epochs"], "step_in_epoch": 0, "global_step": 0,
                         "history": [{"loss": loss} for loss in history],
                         "config": checkpoint_sections(self.config)},
                        self.output_dir / "checkpoints" / "last.pdckpt")
        (self.output_dir / "results.json").write_text(json.dumps(results, indent=2))
        return results

def _tables_to_servers(model: paddle.nn.Layer, table_options: dict[str, Any]) -> None:
    """Swap every DenseEmbedding under ``model`` for a PSEmbedding of its shape, before the graph is built."""
    def on_servers(name: str, layer: paddle.nn.Layer) -> PSEmbedding | None:
        if isinstance(layer, DenseEmbedding):
            return PSEmbedding(layer.num_embeddings, layer.embedding_dim, padding_idx=layer.padding_idx,
                               **table_options)
        return None

    swap_sublayers(model, on_servers)


def run_ps(config: dict[str, Any]) -> dict[str, float] | None:
    """Run this process's part of a PS job; trainers return their results (trainer 0 with test metrics)."""
    job = PSJob(config)
    results = job.run()
    print(f"{FINISHED} {job.role}", flush=True)
    return results
