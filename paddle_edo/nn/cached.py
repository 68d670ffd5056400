"""CachedEmbedding: hot rows in a cache on the accelerator, the full table in host RAM or an mmap file."""
from __future__ import annotations

import math
import os
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import paddle
import paddle.nn.functional as F
from paddle.base.layer_helper import LayerHelper

from ..cache import CacheStatistics, HostStore, Prefetcher, SlotMap
from ..cache.host import HOST_KINDS
from ..cache.policies import POLICIES
from ..compat import dynamic_graph_under_sot
from ..errors import EdoRuntimeError, EdoTypeError, EdoValueError
from ..optim.states import TableStates
from ..quant.row_records import RECORD_FORMATS, RowRecords
from ..schema import ConfigError, Option
from .base import EmbeddingBase, is_count
from .dedup import deduplicated_lookup, summed_by_id
from .dense import DenseEmbedding
from .registry import register_embedding
from .shards import place_of, share_being_built
from .signature import accepts_old_signature
from .swap import swap_sublayers

LFU_COUNTS = "lfu_counts"  # the state entry of the lfu policy's count of uses per id
ROW_STATE_PREFIX = "row_state_"  # state_dict keys of the per-row optimizer state, beside "weight"
CACHEABLE_OPTIMIZERS = ("sgd", "adagrad", "adam")
HOST_FORMATS = ("float32", *RECORD_FORMATS)
FILE_SUFFIXES = {"float32": ".f32", "fp16": ".fp16", "int8": ".int8"}


def _row_state(optimizer: paddle.optimizer.Optimizer, owner: str) -> dict[str, float]:
    """Per-row accumulators of an optimizer a cache can carry, with their initial values."""
    if type(optimizer) is paddle.optimizer.SGD:
        return {}
    if type(optimizer) is paddle.optimizer.Adagrad:
        return {optimizer._moment_acc_str: float(optimizer.initial_accumulator_value)}
    if type(optimizer) is paddle.optimizer.Adam and optimizer._lazy_mode:
        return {optimizer._moment1_acc_str: 0.0, optimizer._moment2_acc_str: 0.0}
    raise EdoTypeError(f"{owner}: cannot train with {type(optimizer).__name__}"
                       f"{'(lazy_mode=False)' if type(optimizer) is paddle.optimizer.Adam else ''}: a cache keeps "
                       f"row-wise optimizer state only for SGD, Adagrad and Adam(lazy_mode=True), whose sparse "
                       f"updates touch just the rows of the batch")


@register_embedding("cached")
class CachedEmbedding(EmbeddingBase):
    """An fp32 table whose full copy lives on the host; ``cache_rows`` rows at a time sit in a tensor on
    the default device (the GPU when there is one), where lookups and sparse updates happen.

    Per lookup: distinct ids, hits and misses; misses are copied in with one batched copy after the
    policy's victims (``lru`` / ``lfu``) are written back if dirty. The optimizer's per-row state
    (Adagrad, lazy Adam) moves with the rows, so training equals training the resident table bit for
    bit. Training needs ``bind_optimizer(model, optimizer)``, or a ``RowTrainer`` whose TableOptimizer
    rule (row-wise Adagrad, 8-bit Adam, ...) keeps the state of every row in host RAM, indexed by row, and
    updates the step's rows wherever they sit (cache or host), on the CPU; the engine binds one or the
    other. Dynamic graph only: ``uncache(model)`` turns the layer into a DenseEmbedding for export.

    ``host_format="int8"`` (or ``"fp16"``) keeps the host rows packed, as a low_precision table of the
    format keeps its rows (68 bytes a row at dim 64, a quarter of fp32's): a row read from the host is
    decoded into the fp32 cache, and re-encoded with stochastic rounding when it goes back. Such rows keep no
    optimizer state beside them: train with SGD or a RowTrainer's table rule.

    ``path`` is the table file when ``host="mmap"`` (a folder, existing or ending in a separator, gets
    a file named after the layer); with ``reopen`` an existing file's rows are the table, else they are
    initialised afresh.

    Lookups: the EmbeddingBase contract (ids range-checked always: the host map needs them). Errors
    besides: EdoValueError for a bad ``cache_ratio`` / ``cache_rows`` or ``sparse=False``; EdoRuntimeError
    in a static program, and for a backward before ``bind_optimizer``.
    """

    row_shardable = True

    config_options = {
        "init_std": Option(0.01, float, low=0.0, doc="std of the normal initialiser"),
        "cache_ratio": Option(0.2, float, low=0.0, high=1.0, doc="cache size as a share of the table's rows"),
        "cache_rows": Option(None, int, low=1, nullable=True, doc="cache size in rows (overrides cache_ratio)"),
        "policy": Option("lru", str, choices=tuple(POLICIES), doc="eviction policy"),
        "host": Option("memory", str, choices=HOST_KINDS, doc="where the full table lives"),
        "host_format": Option("float32", str, choices=HOST_FORMATS, doc="how the host store keeps rows: fp32, or "
                                                                        "packed (SGD or a table rule only)"),
        "path": Option(None, str, nullable=True, doc="folder for the table files when host: mmap"),
        "prefetch": Option(True, bool, doc="read the next batch's missing rows on a background thread"),
        "deduplicate": Option(True, bool, doc="training lookups go through the batch's distinct ids"),
        "min_cache_rows": Option(64, int, low=1, doc="a table whose cache would hold fewer rows stays resident "
                                                     "(dense fp32): it is small, and such a cache saves next to "
                                                     "nothing while most lookups go to the host"),
    }

    @accepts_old_signature(("num_embeddings", "embedding_dim", "cache_rows", "cache_ratio", "policy", "host", "path",
                            "prefetch", "padding_idx", "sparse", "check_ids", "init_std", "reopen", "deduplicate",
                            "host_format"))
    def __init__(self, num_embeddings: int, embedding_dim: int, cache_rows: int | None = None, *,
                 padding_idx: int | None = None, sparse: bool = True, weight_attr: paddle.ParamAttr | None = None,
                 name: str | None = None, cache_ratio: float = 0.2, policy: str = "lru", host: str = "memory",
                 path: str | Path | None = None, prefetch: bool = True, init_std: float = 0.01, reopen: bool = True,
                 deduplicate: bool = True, range_check: bool = True, host_format: str = "float32") -> None:
        super().__init__(num_embeddings, embedding_dim, padding_idx=padding_idx, sparse=sparse, name=name,
                         range_check=range_check)
        self.deduplicate = bool(deduplicate)
        name = self.label
        if not self.sparse:
            raise EdoValueError(f"{name}: sparse = False is not supported: the cache trains with sparse row gradients")
        self.cache_rows = self._resolve_cache_rows(cache_rows, cache_ratio)
        share = share_being_built()  # a rank's share: its rows of the whole table, in a file of its own
        if host_format not in HOST_FORMATS:
            raise EdoValueError(f"{name}: host_format = {host_format!r}; expected one of "
                                f"{', '.join(map(repr, HOST_FORMATS))}")
        self.host_format = host_format
        if path is not None and host == "mmap" and (str(path).endswith(os.sep) or Path(path).is_dir()):
            path = Path(path) / f"{self.full_name()}{FILE_SUFFIXES[host_format]}"
        if path is not None and share is not None:
            path = Path(f"{path}.rank{share.rank}of{share.world_size}")
        seed = int(paddle.randint(0, 2**31 - 1, [1]).item())  # paddle.seed() decides the initial table
        initializer = weight_attr.initializer if weight_attr is not None else None
        self.host = HostStore(self.num_embeddings, self.embedding_dim, host, path, init_std, seed,
                              zero_row=self.padding_idx, reopen=reopen, owner=name, rounding_key=self.full_name(),
                              fill=None if initializer is None else _filled_by(initializer),
                              global_rows=share.place if share is not None else (0, 1),
                              records=None if host_format == "float32" else
                              RowRecords(host_format, self.embedding_dim, f"{name}: host_format"))
        self.cache = self.create_parameter([self.cache_rows, self.embedding_dim], dtype="float32",
                                           default_initializer=paddle.nn.initializer.Constant(0.0))
        self.slots = SlotMap(self.num_embeddings, self.cache_rows, policy, owner=name)
        self.prefetcher = Prefetcher(self.host, self.slots) if prefetch else None
        self.stats = CacheStatistics()
        self.optimizer: paddle.optimizer.Optimizer | None = None
        self.row_trainer = None  # (RowTrainer, name) when a table rule trains it instead (RowTrainer sets it)
        self._bypass: list[tuple[np.ndarray, paddle.Tensor, np.ndarray]] = []  # this step's host-served rows
        self._padding_slot: int | None = None
        self._admit_padding()
        self.register_state_dict_hook(self._full_table_state)
        self.cache.register_hook(self._refuse_unbound_gradient)

    @property
    def trained(self) -> bool:
        """Whether an optimizer is bound or a RowTrainer trains this table (a step may then pin rows)."""
        return self.optimizer is not None or self.row_trainer is not None

    def _refuse_unbound_gradient(self, grad: paddle.Tensor) -> paddle.Tensor:
        """A gradient reaching the cache needs the bound optimizer: it alone moves rows with their state, so
        a backward before ``bind_optimizer`` is refused here (a forward alone is a lookup and works)."""
        if not self.trained:
            raise EdoRuntimeError(f"{self.label}: training needs the optimizer bound to the cache: call "
                                  f"paddle_edo.nn.bind_optimizer(model, optimizer) after building the optimizer "
                                  f"and before the first backward")
        return grad

    @property
    def label(self) -> str:
        """How errors name this table: the class and the layer's unique name."""
        return f"{type(self).__name__} {self.full_name()}"

    def _resolve_cache_rows(self, cache_rows: int | None, cache_ratio: float) -> int:
        name = self.label
        if cache_rows is None:
            if not 0.0 < cache_ratio <= 1.0:
                raise EdoValueError(f"{name}: cache_ratio = {cache_ratio!r} must be in (0, 1]")
            cache_rows = math.ceil(cache_ratio * self.num_embeddings)
        elif not is_count(cache_rows):
            raise EdoValueError(f"{name}: cache_rows = {cache_rows!r} must be an integer >= 1")
        if cache_rows > self.num_embeddings:
            warnings.warn(f"{name}: cache_rows = {cache_rows} is more than the table's {self.num_embeddings} "
                          f"rows; using {self.num_embeddings}", stacklevel=3)
            cache_rows = self.num_embeddings
        return int(cache_rows)

    @classmethod
    def from_config(cls, num_embeddings: int, options: dict[str, Any], padding_idx: int | None = None
                    ) -> EmbeddingBase:
        """The cached table a config describes, or a resident DenseEmbedding (saying why, for the memory
        report) when its cache would hold fewer than ``min_cache_rows`` rows."""
        kwargs = {k: options[k] for k in cls.config_options if k != "min_cache_rows"}
        cache_rows = kwargs["cache_rows"] or math.ceil(kwargs["cache_ratio"] * num_embeddings)
        if min(cache_rows, num_embeddings) < options["min_cache_rows"]:
            table = DenseEmbedding(num_embeddings, options["dim"], padding_idx=padding_idx, sparse=options["sparse"],
                                   init_std=options["init_std"], deduplicate=options["deduplicate"])
            table.report_note = (f"resident: its cache would hold {min(cache_rows, num_embeddings)} rows, fewer than "
                                 f"embedding.min_cache_rows = {options['min_cache_rows']}")
            return table
        if kwargs["path"]:
            kwargs["path"] = os.path.join(kwargs["path"], "")  # a folder: one file per table, named by layer
        # an experiment's files are scratch space: every run starts from fresh values (a resume then loads
        # its checkpoint), never from what an earlier run left there
        return cls(num_embeddings, options["dim"], padding_idx=padding_idx, sparse=options["sparse"],
                   reopen=False, **kwargs)

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> None:
        embedding, train = config["embedding"], config["train"]
        if not embedding["sparse"]:
            raise ConfigError("embedding.sparse = false cannot be used with embedding.type = 'cached'; "
                              "the cache trains with sparse row gradients")
        if embedding["host"] == "mmap" and not embedding["path"]:
            raise ConfigError("embedding.host = 'mmap' needs embedding.path, a folder for the table files")
        if embedding["host_format"] != "float32" and train["optimizer"] != "sgd" \
                and train["table_optimizer"]["name"] is None:
            raise ConfigError(f"embedding.host_format = {embedding['host_format']!r} keeps no optimizer state beside "
                              f"the host rows, but train.optimizer = {train['optimizer']!r} keeps some for every row; "
                              f"use 'sgd', name a table rule in train.table_optimizer.name (e.g. 'rowwise_adagrad'), "
                              f"or keep embedding.host_format 'float32'")
        if train["optimizer"] not in CACHEABLE_OPTIMIZERS and train["table_optimizer"]["name"] is None:
            raise ConfigError(f"train.optimizer = {train['optimizer']!r} cannot be used with embedding.type = "
                              f"'cached'; expected one of {', '.join(map(repr, CACHEABLE_OPTIMIZERS))}, or a rule "
                              f"for the tables in train.table_optimizer.name")
        if train["amp"]["enable"] and train["amp"]["level"] == "O2":
            raise ConfigError("train.amp.level = 'O2' cannot be used with embedding.type = 'cached' "
                              "(the host table is float32); use level 'O1'")

    # ------------------------------------------------------------ memory
    @property
    def storage_dtype(self) -> str:
        return "float32"

    def estimated_bytes(self) -> int:
        """Bytes on the device: the cache rows (the optimizer's copies of its state are the optimizer's)."""
        return self.cache_rows * self.embedding_dim * 4

    def host_bytes(self) -> int:
        """Bytes on the host: the full table, its row state, and the slot map (RAM or file pages)."""
        return self.host.nbytes + self.slots.nbytes

    def statistics(self) -> dict[str, float]:
        return {**self.stats.as_dict(), "resident_rows": self.slots.used, "cache_rows": self.cache_rows}

    # ------------------------------------------------------------ optimizer
    def bind(self, optimizer: paddle.optimizer.Optimizer) -> None:
        """Carry ``optimizer``'s per-row state with the rows; writes back and empties the cache first."""
        states = _row_state(optimizer, self.label)
        if states and self.host_format != "float32":
            raise EdoValueError(f"{self.label}: host_format = {self.host_format!r} keeps no optimizer state beside the "
                                f"host rows, but {type(optimizer).__name__} keeps {list(states)} for every row; train "
                                f"it with SGD or a RowTrainer's table rule, or keep host_format 'float32'")
        trained = [p for item in optimizer._param_groups
                   for p in (item["params"] if isinstance(item, dict) else [item])]
        if not any(p is self.cache for p in trained):
            raise EdoValueError(f"{self.label}: the optimizer does not train this layer's cache parameter")
        self.flush()
        if getattr(optimizer, "helper", None) is None:  # what Optimizer.step sets up before creating state
            optimizer.helper = LayerHelper(type(optimizer).__name__)
        optimizer._create_accumulators(paddle.static.default_main_program().global_block(), [self.cache])
        self.host.set_states(states)
        self.optimizer = optimizer
        self._empty_cache()

    def _accumulator(self, state: str) -> paddle.Tensor:
        return self.optimizer._accumulators[state][self.cache.name]

    def row_gradients(self) -> tuple[paddle.Tensor, paddle.Tensor] | None:
        """(ids, row gradients) of this step, for monitors and a table rule: the cache's sparse gradient
        with its slots mapped back to table ids, and the host-read rows' gradients."""
        found = []
        grad = self.cache._grad_ivar()
        if grad is not None and grad._is_initialized() and grad.is_selected_rows():
            found.append((self.slots.id_of_slot[np.asarray(grad.rows(), dtype=np.int64)],
                          grad._get_tensor_from_selected_rows()))
        for ids, rows, _ in self._bypass:
            grad = rows._grad_ivar()
            if grad is not None and grad._is_initialized() and grad.is_selected_rows():
                found.append((ids[np.asarray(grad.rows(), dtype=np.int64)], grad._get_tensor_from_selected_rows()))
        found = [(ids, values) for ids, values in found if ids.size]
        if not found:
            return None
        return (paddle.to_tensor(np.concatenate([ids for ids, _ in found])),
                paddle.concat([values for _, values in found]))

    def decode_rows(self, ids: paddle.Tensor) -> paddle.Tensor:
        """Current values of rows (a step's rows, for monitors): from the cache where resident, else the host."""
        host_ids = ids.numpy()
        slots = self.slots.slot_of[host_ids]
        resident = slots >= 0
        rows = np.empty((len(host_ids), self.embedding_dim), dtype=np.float32)
        rows[resident] = paddle.gather(self.cache.detach(), paddle.to_tensor(slots[resident].astype(np.int64),
                                                                             place=self.cache.place)).numpy()
        rows[~resident] = self.host.read(host_ids[~resident])[:, 0]  # rows without a slot: as the host holds them
        return paddle.to_tensor(rows, place=self.cache.place)

    @property
    def row_state_names(self) -> list[str]:
        """The bound optimizer's per-row accumulators, kept beside each host row."""
        return self.host.state_names

    def end_step(self) -> None:
        """The step's gradients are applied or dropped: its rows may move again."""
        self._bypass.clear()
        self.slots.end_step()
        self.stats.end_step()

    # ------------------------------------------------------------ lookups
    @dynamic_graph_under_sot
    def forward(self, ids: paddle.Tensor) -> paddle.Tensor:
        name = self.label
        if not paddle.in_dynamic_mode():
            raise EdoRuntimeError(f"{name}: a cached table looks rows up on the host and runs in dynamic graph only; "
                                  f"call paddle_edo.nn.uncache(model) before paddle.jit.to_static / export")
        self.check_id_dtype(ids)
        host_ids = ids.numpy()
        # rows are pinned (and host-served rows made trainable) for the bound optimizer's step; without one a
        # forward looks rows up as nn.Embedding does, and a backward is refused (_refuse_unbound_gradient)
        training = paddle.is_grad_enabled() and not self.cache.stop_gradient and self.trained
        flat = host_ids.reshape(-1).astype(np.int64, copy=False)
        if not flat.size:
            return self.empty_lookup(ids)
        self.check_id_range(int(flat.min()), int(flat.max()))  # always: the host map needs valid ids
        taken = self.prefetcher.take(host_ids) if self.prefetcher is not None else None
        slots, bypass_ids = self._admit(flat, training, taken)
        if len(bypass_ids):
            return self._lookup_with_bypass(flat, slots, bypass_ids, training).reshape(
                [*host_ids.shape, self.embedding_dim])
        return self._lookup_slots(slots.reshape(host_ids.shape), self.cache, self._padding_slot, training)

    def _lookup_slots(self, slots: np.ndarray, rows: paddle.Tensor, padding: int | None, training: bool
                      ) -> paddle.Tensor:
        """Rows of ``rows`` (the cache, or a step's bypass rows) at ``slots``, with a sparse gradient."""
        index = paddle.to_tensor(slots, place=rows.place)
        if training and self.deduplicate:  # the gradient then holds each slot once (dedup.py)
            return deduplicated_lookup(index, rows, padding)
        return F.embedding(index, rows, padding_idx=padding, sparse=True)

    def _lookup_with_bypass(self, ids: np.ndarray, slots: np.ndarray, bypass_ids: np.ndarray, training: bool
                            ) -> paddle.Tensor:
        """A lookup some of whose rows found no free slot: those come from the host as a tensor of their
        own (a parameter-like leaf whose sparse gradient ``apply_bypass_updates`` applies with the bound
        optimizer's own update, then writes back), the rest from the cache; [len(ids), dim]."""
        if training and paddle.framework._dygraph_tracer()._amp_level != paddle.base.core.AmpLevel.O0:
            raise EdoRuntimeError(f"{self.label}: this training step needs {len(np.unique(ids))} rows, more than "
                                  f"the cache_rows = {self.cache_rows} it can hold, and under AMP the rows beyond "
                                  f"it cannot be updated from the host (loss scaling unscales the optimizer's "
                                  f"parameters only); raise cache_rows or cache_ratio")
        rows = self.host.read(bypass_ids)
        bypass = paddle.to_tensor(rows[:, 0], place=self.cache.place)
        if training:
            bypass = _leaf_like(self.cache, bypass, f"{self.cache.name}.bypass{len(self._bypass)}")
            self._bypass.append((bypass_ids, bypass, rows))
        in_cache = slots >= 0
        cached_at, bypassed_at = np.flatnonzero(in_cache), np.flatnonzero(~in_cache)
        local = np.searchsorted(bypass_ids, ids[bypassed_at])
        parts = self._lookup_slots(local, bypass, None, training)
        if len(cached_at):
            resident = self._lookup_slots(slots[cached_at], self.cache, self._padding_slot, training)
            parts = paddle.concat([resident, parts])
        order = np.empty(len(ids), dtype=np.int64)
        order[np.concatenate([cached_at, bypassed_at])] = np.arange(len(ids))
        self.stats.count(bypass_rows=len(bypass_ids), bytes_to_device=rows[:, :1].nbytes)
        return paddle.gather(parts, paddle.to_tensor(order, place=self.cache.place))

    def apply_bypass_updates(self) -> None:
        """Update the rows this step read from the host, as the bound optimizer updates the cache's rows
        (its own kernel, on their sparse gradient and their row state), and write them back; called by
        the optimizer's step before it updates the cache (bind_optimizer arranges it)."""
        for ids, rows, host_rows in self._bypass:
            grad = rows._grad_ivar()
            if grad is None:
                continue
            states = {name: paddle.to_tensor(host_rows[:, 1 + k], place=rows.place)
                      for k, name in enumerate(self.host.state_names)}
            _apply_optimizer(self.optimizer, self.cache, rows, grad, states)
            updated = np.stack([rows.numpy(), *(states[name].numpy() for name in self.host.state_names)], axis=1)
            self.host.write(ids, updated)
            if self.prefetcher is not None:
                self.prefetcher.note_written(ids)
            self.stats.count(bytes_to_host=updated.nbytes)
        self._bypass.clear()

    @paddle.no_grad()
    def apply_table_rule(self, states: TableStates) -> None:
        """Apply a TableOptimizer's rule (``states``: this table's, every row's, in host RAM) to the rows of
        this step, the cached ones and those read from the host alike, in one update (one step of the rule's
        counts): each distinct row's summed gradient, the cached rows updated in their slots, the others
        written back to the host store. CPU only (the rule's kernels)."""
        gradients = self.row_gradients()
        if gradients is None:
            return
        unique, summed = summed_by_id(*gradients)
        host_ids = unique.numpy()
        slots = self.slots.slot_of[host_ids]
        cached = slots >= 0
        rows = np.empty((len(host_ids), self.embedding_dim), dtype=np.float32)
        cached_slots = paddle.to_tensor(slots[cached], place=self.cache.place)
        if cached.any():
            rows[cached] = paddle.gather(self.cache, cached_slots).numpy()
        for bypass_ids, bypass, _ in self._bypass:  # a step's bypassed rows are the only copies of theirs
            position = np.searchsorted(host_ids, bypass_ids)
            found = (position < len(host_ids)) & (host_ids[np.minimum(position, len(host_ids) - 1)] == bypass_ids)
            rows[position[found]] = bypass.numpy()[found]
        updated = paddle.to_tensor(rows)
        states.update_rows(updated, unique, summed, -1 if self.padding_idx is None else self.padding_idx, place_of(self))
        values = updated.numpy()
        if cached.any():
            paddle.scatter_(self.cache, cached_slots, paddle.to_tensor(values[cached], place=self.cache.place))
        if not cached.all():
            self.host.write(host_ids[~cached], values[~cached][:, None])
            if self.prefetcher is not None:
                self.prefetcher.note_written(host_ids[~cached])
            self.stats.count(bytes_to_host=values[~cached].nbytes)
        self._bypass.clear()

    def prefetch(self, ids: paddle.Tensor | np.ndarray) -> None:
        """Start reading the rows a coming lookup of ``ids`` will miss (no-op with prefetch=False)."""
        if self.prefetcher is not None:
            self.prefetcher.start(ids.numpy() if isinstance(ids, paddle.Tensor) else np.asarray(ids))

    def _admit(self, ids: np.ndarray, training: bool, taken) -> tuple[np.ndarray, np.ndarray]:
        """(slot of each id, -1 where bypassed; the distinct ids that found no free slot)."""
        admission = self.slots.admit(ids, pin=training)
        self._write_back(admission.write_back_ids, admission.write_back_slots)
        if len(admission.new_ids):
            self._load(admission.new_ids, admission.new_slots, taken)
        misses = len(admission.new_ids)
        self.stats.count(lookups=admission.distinct_hits + misses, hits=admission.distinct_hits, misses=misses,
                         evictions=admission.evictions)
        return admission.slots, admission.bypass_ids

    def _targets(self) -> list[paddle.Tensor]:
        """The cache tensor and, once an optimizer is bound, its accumulators: the host row layout (a
        store reopened with state but not yet bound moves weights only)."""
        states = self.host.state_names if self.optimizer is not None else []
        return [self.cache, *(self._accumulator(name) for name in states)]

    def _load(self, ids: np.ndarray, slots: np.ndarray, taken=None) -> None:
        """Copy host rows with their optimizer state into cache slots, one batched copy per tensor;
        rows staged by the prefetcher are used unless written back since they were read."""
        rows = self._staged_rows(ids, taken) if taken is not None else self.host.read(ids)
        index = paddle.to_tensor(slots, place=self.cache.place)
        targets = self._targets()
        with paddle.no_grad():
            for position, target in enumerate(targets):
                paddle.scatter_(target, index, paddle.to_tensor(rows[:, position], place=target.place))
        self.stats.count(bytes_to_device=rows[:, : len(targets)].nbytes)

    def _staged_rows(self, ids: np.ndarray, taken) -> np.ndarray:
        staged, written = taken
        if not len(staged.row_ids) or staged.names != self.host.names:
            return self.host.read(ids)
        position = np.minimum(np.searchsorted(staged.row_ids, ids), len(staged.row_ids) - 1)
        stale = staged.row_ids[position] != ids   # not staged (it was resident when the read began)
        if len(written):
            stale |= np.isin(ids, written)        # written back since: the staged copy may predate it
        rows = staged.rows[position]
        if stale.any():
            rows[stale] = self.host.read(ids[stale])
        return rows

    def _write_back(self, ids: np.ndarray, slots: np.ndarray) -> None:
        if not len(ids):
            return
        index = paddle.to_tensor(slots, place=self.cache.place)
        rows = np.stack([paddle.gather(t, index).numpy() for t in self._targets()], axis=1)
        self.host.write(ids, rows)  # a prefix of each host row: weight, then state
        if self.prefetcher is not None:
            self.prefetcher.note_written(ids)
        self.stats.count(rows_written_back=len(ids), bytes_to_host=rows.nbytes)

    def flush(self) -> None:
        """Write every dirty cached row (and its optimizer state) back to the host store. Packed host rows
        are rounded as they go, and a row's value then depends on when it went back: the cache is emptied,
        so that a run resumed from the host rows (with an empty cache, and the lru policy) goes on exactly
        as the flushed one does."""
        ids, slots = self.slots.dirty_rows()
        self._write_back(ids, slots)
        self.slots.mark_clean(slots)
        if self.host.records is not None:
            self._empty_cache()
        self.host.flush()

    def _admit_padding(self) -> None:
        if self.padding_idx is not None:
            self._padding_slot = self.slots.make_permanent(self.padding_idx)
            self._load(np.array([self.padding_idx], dtype=np.int64), np.array([self._padding_slot], dtype=np.int64))

    def _empty_cache(self, host_values: dict[str, np.ndarray] | None = None) -> None:
        """Drop every cached row without writing it back, after a flush or before ``host_values``
        (full arrays by name) overwrite the host store."""
        if self.prefetcher is not None:
            self.prefetcher.cancel()
        self.slots.reset()
        if host_values:
            self.host.load(host_values)
        self.host.flush()
        self._admit_padding()

    # ------------------------------------------------------------ state
    @property
    def packed_state_keys(self) -> list[str]:
        """A packed host's state entries: its codes and fp16 row parameters, named as a QuantizedEmbedding
        of the format names them (``int8_codes``, ``int8_row_params``; ``fp16_codes``)."""
        keys = [f"{self.host_format}_codes"]
        return keys + [f"{self.host_format}_row_params"] if self.host.records.format.row_params else keys

    def owns_state_key(self, key: str) -> bool:
        """Whether ``key`` (relative to the layer) is one of its state entries."""
        if key == LFU_COUNTS:
            return self.slots.policy.name == "lfu"
        if self.host.records is not None:
            return key in self.packed_state_keys
        return key == "weight" or key.startswith(ROW_STATE_PREFIX)

    def _full_table_state(self, destination: dict[str, Any]) -> None:
        """state_dict hook: the full host table and row state replace the cache tensor (packed host rows:
        their codes and row parameters, as they are)."""
        key = next((k for k, v in destination.items() if v is self.cache), None)
        if key is None:
            return
        prefix = key[: -len("cache")]
        del destination[key]
        self.flush()
        if self.slots.policy.name == "lfu":  # which rows the cache keeps next depends on every id's count
            destination[prefix + LFU_COUNTS] = paddle.to_tensor(self.slots.policy.counts, place=paddle.CPUPlace())
        if self.host.records is not None:
            for entry, array in zip(self.packed_state_keys, self.host.records.split(np.asarray(self.host.array))):
                destination[prefix + entry] = paddle.to_tensor(array, place=paddle.CPUPlace())
            return
        for name in self.host.names:
            entry = "weight" if name == "weight" else ROW_STATE_PREFIX + name
            column = np.ascontiguousarray(self.host.column(name))
            destination[prefix + entry] = paddle.to_tensor(column, place=paddle.CPUPlace())

    def set_state_dict(self, state_dict: dict[str, Any], use_structured_name: bool = True) -> None:
        """Load a full table (``weight`` and ``row_state_*``, or a packed host's codes and row parameters,
        as ``state_dict()`` gives them, and with the lfu policy each id's count of uses, ``lfu_counts``; a
        state without them, from before they were saved, starts the counts at zero)."""
        self.load_host_state(state_dict)

    def load_host_state(self, values: dict[str, Any]) -> None:
        name = self.label
        values = dict(values)
        counts = values.pop(LFU_COUNTS, None)
        if counts is not None:
            counts = counts.numpy() if isinstance(counts, paddle.Tensor) else np.asarray(counts)
            if self.slots.policy.name != "lfu":
                raise EdoValueError(f"{name}: the state holds {LFU_COUNTS!r}, the counts of the lfu policy; this "
                                    f"table evicts by {self.slots.policy.name!r} (embedding.policy)")
            if counts.dtype != np.int32 or counts.shape != (self.num_embeddings,):
                raise EdoValueError(f"{name}: {LFU_COUNTS!r} is {counts.dtype} {list(counts.shape)}, expected int32 "
                                    f"{[self.num_embeddings]}")
        if self.host.records is not None:
            self._load_packed_state(values)
        else:
            self._load_rows(values)
        if self.slots.policy.name == "lfu":
            self.slots.policy.counts[:] = 0 if counts is None else counts

    def _load_rows(self, values: dict[str, Any]) -> None:
        """An fp32 host's weight and row state, checked by name and shape."""
        name = self.label
        expected = ["weight", *(ROW_STATE_PREFIX + s for s in self.host.state_names)]
        missing = [k for k in expected if k not in values]
        if missing:
            raise EdoValueError(f"{name}: the state has no {missing[0]!r}; a cached table needs {expected}")
        arrays = {}
        for key, value in values.items():
            if key != "weight" and not key.startswith(ROW_STATE_PREFIX):
                raise EdoValueError(f"{name}: unexpected state entry {key!r}; a cached table holds {expected}")
            array = value.numpy() if isinstance(value, paddle.Tensor) else np.asarray(value)
            if array.shape != (self.num_embeddings, self.embedding_dim):
                raise EdoValueError(f"{name}: {key!r} has shape {list(array.shape)}, expected "
                                    f"{[self.num_embeddings, self.embedding_dim]}")
            arrays["weight" if key == "weight" else key[len(ROW_STATE_PREFIX):]] = array
        if self.optimizer is None:  # not bound yet: take the checkpoint's row state as it is
            self.host.set_states({state: 0.0 for state in arrays if state != "weight"})
        elif set(arrays) != set(self.host.names):
            raise EdoValueError(f"{name}: the state holds {sorted(arrays)}, but the bound optimizer keeps "
                                f"{self.host.names}; load it with the optimizer it was trained with")
        self._empty_cache(arrays)

    def _load_packed_state(self, values: dict[str, Any]) -> None:
        """A packed host's codes and row parameters, checked by name, dtype and shape."""
        records, expected = self.host.records, self.packed_state_keys
        if sorted(values) != sorted(expected):
            differing = sorted(set(values) ^ set(expected))[0]
            raise EdoValueError(f"{self.label}: state entry {differing!r} does not match: a cached table with "
                                f"host_format = {self.host_format!r} holds {expected}")
        arrays = [v.numpy() if isinstance(v, paddle.Tensor) else np.asarray(v) for v in (values[k] for k in expected)]
        codes, params = arrays[0], arrays[1] if len(arrays) > 1 else None
        want = records.split(np.zeros((1, records.record_bytes), dtype=np.uint8))
        for key, array, like in zip(expected, arrays, want):
            if array.dtype != like.dtype or array.shape != (self.num_embeddings, *like.shape[1:]):
                raise EdoValueError(f"{self.label}: {key!r} is {array.dtype} {list(array.shape)}, expected "
                                    f"{like.dtype} {[self.num_embeddings, *like.shape[1:]]}")
        self._empty_cache({"records": records.join(codes, params)})

    def to_dense(self) -> DenseEmbedding:
        """A DenseEmbedding holding the full table (for export and serving)."""
        self.flush()
        dense = DenseEmbedding(self.num_embeddings, self.embedding_dim, padding_idx=self.padding_idx,
                               sparse=True, range_check=self.range_check, init_std=0.0,
                               deduplicate=self.deduplicate)
        dense.weight.set_value(np.ascontiguousarray(self.host.column("weight")))
        return dense

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, cache_rows={self.cache_rows}, policy={self.slots.policy.name}, "
                f"host={self.host.kind}, prefetch={self.prefetcher is not None}")


def _filled_by(initializer: paddle.nn.initializer.Initializer) -> Callable[[int, int], np.ndarray]:
    """Host rows made by a Paddle initializer (a ``weight_attr``'s), a chunk at a time."""
    def fill(rows: int, dim: int) -> np.ndarray:
        chunk = paddle.zeros([rows, dim], dtype="float32")
        initializer(chunk)
        return chunk.numpy()
    return fill


def _leaf_like(parameter: paddle.Tensor, value: paddle.Tensor, name: str) -> paddle.Tensor:
    """A trainable tensor holding ``value`` that an optimizer updates as it would ``parameter`` (same
    learning-rate attributes), without being one of the optimizer's parameters."""
    leaf = paddle.base.framework.EagerParamBase(value.shape, value.dtype, name=name)
    value._share_buffer_to(leaf)
    leaf.optimize_attr = dict(parameter.optimize_attr)
    return leaf


def _apply_optimizer(optimizer: paddle.optimizer.Optimizer, parameter: paddle.Tensor, rows: paddle.Tensor,
                     grad: paddle.Tensor, states: dict[str, paddle.Tensor]) -> None:
    """One update of ``rows`` by ``optimizer``'s own kernel, with ``states`` (its per-row accumulators,
    updated in place) and the per-parameter ones of ``parameter`` (Adam's beta powers, copied, as they
    stand before this step's update)."""
    optimizer._create_global_learning_rate()  # what step() does first (the rate of this step)
    added = []
    for name, by_parameter in optimizer._accumulators.items():
        if parameter.name in by_parameter:
            value = states[name] if name in states else by_parameter[parameter.name].clone()
            by_parameter[rows.name] = value
            added.append(by_parameter)
    try:
        optimizer._append_optimize_op(paddle.static.default_main_program().global_block(), (rows, grad))
    finally:
        for by_parameter in added:
            del by_parameter[rows.name]


def cached_layers(model: paddle.nn.Layer) -> dict[str, CachedEmbedding]:
    return {name: layer for name, layer in model.named_sublayers(include_self=True)
            if isinstance(layer, CachedEmbedding)}


def bind_optimizer(model: paddle.nn.Layer, optimizer: paddle.optimizer.Optimizer) -> list[str]:
    """Bind every cached table of ``model`` that no RowTrainer trains to ``optimizer``: their rows carry
    its per-row state, and ``optimizer.clear_grad()`` releases the rows a step held. Returns the names of
    the tables bound."""
    layers = {name: layer for name, layer in cached_layers(model).items() if layer.row_trainer is None}
    for layer in layers.values():
        layer.bind(optimizer)
    if layers:
        held = getattr(optimizer, "_paddle_edo_caches", None)
        if held is None:
            held = optimizer._paddle_edo_caches = []
            clear_grad, step = optimizer.clear_grad, optimizer.step

            def clear_grad_and_release(*args, **kwargs):
                clear_grad(*args, **kwargs)
                for cached in held:
                    cached.end_step()

            def step_with_bypass_rows(*args, **kwargs):
                for cached in held:
                    cached.apply_bypass_updates()
                return step(*args, **kwargs)

            optimizer.clear_grad = clear_grad_and_release
            optimizer.step = step_with_bypass_rows
        held.extend(layer for layer in layers.values() if layer not in held)
    return list(layers)


def uncache(model: paddle.nn.Layer) -> list[str]:
    """Replace every CachedEmbedding under ``model`` by the DenseEmbedding of its full table (for export);
    returns the names replaced."""
    return swap_sublayers(model, lambda name, layer: layer.to_dense() if isinstance(layer, CachedEmbedding) else None)


def load_model_with_caches(model: paddle.nn.Layer, state: dict[str, Any]) -> dict[str, Any]:
    """Load the host tables of the cached layers from ``state``; returns the entries left for
    ``model.set_state_dict`` (with each cache tensor standing in for itself)."""
    rest = dict(state)
    for name, layer in cached_layers(model).items():
        prefix = f"{name}." if name else ""
        own = {k[len(prefix):]: rest.pop(k) for k in list(rest)
               if k.startswith(prefix) and layer.owns_state_key(k[len(prefix):])}
        layer.load_host_state(own)
        rest[prefix + "cache"] = layer.cache
    return rest
