"""The ``distributed`` config section (parameter servers, collective ranks) and what it refuses."""
from __future__ import annotations

from typing import Any

import paddle

from ..compat import PARAMETER_SERVER_BUILDS, has_parameter_servers
from ..nn import EMBEDDINGS
from ..nn.shards import PLACEMENTS
from ..schema import ConfigError, Option
from .admission import RULES as ADMISSION_RULES
from .sharded.collection import BAG_POOLINGS
from .sharded.exchange import EXCHANGES

SGD_RULES = {"adam": ("SparseAdamSGDRule", "adam"), "adagrad": ("SparseAdaGradSGDRule", "adagrad"),
             "sgd": ("SparseNaiveSGDRule", "naive")}
PS_EMBEDDINGS = ("dense", "hash", "qr")

DISTRIBUTED_OPTIONS: dict[str, Option] = {
    "mode": Option("none", str, choices=("none", "ps", "collective", "sharded"),
                   doc="ps: Fleet parameter servers; collective: DataParallel; sharded: each rank holds a share of "
                       "every large table's rows (both under paddle.distributed.launch)"),
    "shard_min_rows": Option(4096, int, low=0,
                             doc="sharded: tables with fewer rows are whole on every rank, their dense gradients "
                                 "all-reduced (at a batch of 4096 ids, exchanging such a table's rows moves about "
                                 "as many bytes as all-reducing it)"),
    "placement": Option("auto", str, choices=PLACEMENTS,
                        doc="sharded: how tables of at least shard_min_rows rows are spread over the ranks; row: "
                            "each rank holds a share of the rows (types whose id g is row g); table: each table "
                            "whole on one rank, which looks up and pools what every rank asks (any type); auto: "
                            "row where the type allows, else table"),
    "exchange": Option("auto", str, choices=EXCHANGES,
                       doc="sharded: how ranks swap ids and rows; auto: all_to_all (NCCL) on a GPU, pairwise "
                           "send/recv on the CPU (gloo)"),
    "bag_pooling": Option("auto", str, choices=BAG_POOLINGS,
                          doc="sharded: where the bags of pooled tables placed by rows are summed; after_exchange: "
                              "each rank fetches its bags' distinct rows; at_owner: each owner sums the ids it "
                              "holds of every bag and sends one partial sum a bag; auto: whichever sends fewer "
                              "bytes, table by table and step by step (long bags of rarely repeated ids: at_owner)"),
    "ps_mode": Option("async", str, choices=("async", "geo", "sync"), doc="sync is refused (segfaults in 2.6.2)"),
    "k_steps": Option(100, int, low=1, doc="geo: local steps between pushes"),
    "pull_dense_every": Option(1, int, low=1, doc="async: steps between pulls of the dense parameters (more "
                               "train the dense layers on stale copies: at 10, a Criteo run learned nothing)"),
    # feature admission and table kind: the PS table layer's own options
    **{k: v for k, v in EMBEDDINGS["ps_sparse"].config_options.items() if k != "geo"},
    "show_click_threshold": Option(10.0, float, low=0.0,
                                   doc="entry show_click: the score an id needs (Paddle's embedx_threshold)"),
    "nonclick_coeff": Option(0.1, float, low=0.0, doc="entry show_click: score of a show without a click"),
    "click_coeff": Option(1.0, float, low=0.0, doc="entry show_click: score of a click"),
    "sparse_learning_rate": Option(None, float, low=0.0, nullable=True,
                                   doc="the tables' rate on the servers, and in geo mode on the trainers' copies (default: the "
                                       "tables' rate)"),
    "shard_num": Option(4, int, low=1, doc="shards per sparse table on the servers"),
    "timeout_s": Option(1800, int, low=10, doc="every process of the job exits non-zero after this long"),
    "init_timeout_s": Option(120, int, low=10,
                             doc="a trainer whose fleet.init_worker() has not returned after this long exits "
                                 "non-zero"),
}


def check_distributed_config(config: dict[str, Any]) -> None:
    """Refuse distributed settings the chosen mode cannot train with."""
    mode = config["distributed"]["mode"]
    if mode == "ps":
        check_ps_config(config)
    if mode == "collective" and config["embedding"]["sparse"]:
        raise ConfigError("distributed.mode = 'collective' needs embedding.sparse = false: Paddle 2.6.2's "
                          "DataParallel does not all-reduce sparse embedding gradients on CPU (the ranks' "
                          "tables drift apart silently); or use distributed.mode = 'ps'")
    if mode == "sharded":
        check_sharded_config(config)
    if config["train"]["to_static"] and mode not in ("none", "sharded"):
        raise ConfigError(f"train.to_static = true works with distributed.mode = 'none' or 'sharded', not {mode!r} "
                          f"(parameter servers build their own static program; collective ranks train in dynamic "
                          f"graph)")


def check_ps_config(config: dict[str, Any]) -> None:
    distributed = config["distributed"]
    rule = config["train"]["table_optimizer"]
    for key, value, default in (("name", rule["name"], None), ("state_dtype", rule["state_dtype"], "float32")):
        if value != default:
            raise ConfigError(f"train.table_optimizer.{key} = {value!r} cannot apply with distributed.mode = 'ps': the "
                              f"servers hold the tables and train them with train.optimizer's rule at "
                              f"distributed.sparse_learning_rate; drop train.table_optimizer.{key}")
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
    if not has_parameter_servers():
        raise ConfigError(f"distributed.mode = 'ps' needs a Paddle build with parameter-server support; this "
                          f"paddle {paddle.__version__} has none (the CPU wheels on PyPI lack it from 3.1.1 on): "
                          f"install {PARAMETER_SERVER_BUILDS}")


def check_sharded_config(config: dict[str, Any]) -> None:
    """Refuse what sharded tables cannot train with, naming the key."""
    if not config["embedding"]["collection"]:
        raise ConfigError("distributed.mode = 'sharded' needs embedding.collection = true: the ranks exchange the "
                          "rows of a model's tables in its embedding collection")
    if config["model"]["name"] != "deepfm":
        raise ConfigError(f"model.name = {config['model']['name']!r} is not supported with distributed.mode = "
                          f"'sharded'; sharded jobs train 'deepfm' (its tables form one embedding collection)")
    if config["train"]["amp"]["enable"]:
        raise ConfigError("train.amp.enable = true is not supported with distributed.mode = 'sharded'")
