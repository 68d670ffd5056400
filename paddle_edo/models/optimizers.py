"""The optimizer ``train.optimizer`` names, built the same way for every trainer; and, where a model's
collections can take it, the same rule fused into their backward pass for their tables."""
from __future__ import annotations

from typing import Any

import paddle

from ..kernels import fused_ops
from ..nn.base import embedding_layers
from ..nn.cached import CachedEmbedding
from ..nn.quantized import is_low_precision
from ..optim import FUSED_RULES, TableOptimizer
from ..schema import ConfigError

OPTIMIZERS = ("adam", "adagrad", "sgd", "momentum", "rmsprop")
OPTIMIZER_CLASSES = {"adam": paddle.optimizer.Adam, "adagrad": paddle.optimizer.Adagrad, "sgd": paddle.optimizer.SGD,
                     "momentum": paddle.optimizer.Momentum, "rmsprop": paddle.optimizer.RMSProp}


def fused_table_optimizer(config: dict[str, Any], world_size: int = 1, device: str = "cpu") -> TableOptimizer | None:
    """The rule the native kernels apply to a model's fp32 and QAT tables, outside Paddle's optimizer:
    ``train.table_optimizer`` (its ``name``, or ``train.optimizer`` where it is fused: sgd, adagrad, adam) at
    the tables' learning rate, where the run lets tables train apart. None (tables train through Paddle's
    optimizer) under AMP (the loss scale is Paddle's optimizer's), with several ranks (collective mode
    all-reduces table gradients), off the CPU or without the native kernels; a ``train.table_optimizer.name``
    such a run cannot apply is refused (ConfigError naming why), as no Paddle optimizer has the row-wise
    rules. Where the collections can fuse it (``collections_fuse``) it runs in their backward pass, elsewhere
    on each table's own sparse gradient (``paddle_edo.nn.RowTrainer``)."""
    train = config["train"]
    section = train["table_optimizer"]
    name = section["name"] or train["optimizer"]
    blocked = [reason for reason, applies in (
        ("train.amp.enable is true", train["amp"]["enable"]), (f"{world_size} ranks train", world_size > 1),
        (f"the device is {device!r}, not the CPU", device != "cpu"),
        ("paddle_edo's native kernels are not built", fused_ops() is None)) if applies]
    if blocked and section["name"]:
        raise ConfigError(f"train.table_optimizer.name = {name!r} trains tables with paddle_edo's native kernels, "
                          f"which this run cannot use: {blocked[0]} (drop train.table_optimizer.name to train "
                          f"tables with train.optimizer)")
    if blocked or name not in FUSED_RULES:
        return None
    return TableOptimizer(name, train["embedding_learning_rate"] or train["learning_rate"], beta1=section["beta1"],
                          beta2=section["beta2"], weight_decay=section["weight_decay"], state_dtype=section["state_dtype"])


def check_tables_reached(model: paddle.nn.Layer, optimizer: TableOptimizer, named: bool) -> None:
    """Refuse a row-wise rule or a compressed state for a model whose tables include ones it cannot train:
    cached and low_precision tables unless ``named`` (train.table_optimizer.name set: they take the rule;
    else a cached table's rows carry train.optimizer's state between host and device, and a low_precision
    table applies train.optimizer's row rule); ConfigError naming the table and the key."""
    if (optimizer.name.startswith("rowwise") or optimizer.state_dtype != "float32") and not named:
        key, value = ("name", optimizer.name) if optimizer.name.startswith("rowwise") else \
            ("state_dtype", optimizer.state_dtype)
        for name, layer in model.named_sublayers():
            why = ("a cached table carries train.optimizer's state between host and device unless "
                   "train.table_optimizer.name is set" if isinstance(layer, CachedEmbedding) else
                   "a low_precision table applies train.optimizer's row rule unless train.table_optimizer.name is set"
                   if is_low_precision(layer) else None)
            if why:
                raise ConfigError(f"train.table_optimizer.{key} = {value!r} cannot train table {name!r} ({why}); "
                                  f"drop train.table_optimizer.{key}, or give that table another embedding.type")


def collections_fuse(config: dict[str, Any]) -> bool:
    """Whether the collections train their tables in their backward pass: not with ``embedding.collection:
    false``, nor with monitoring (the monitors read tables' gradients, which a fused backward never makes),
    nor in a sharded job (its tables train by rows at their owners, in one process too, so that its
    checkpoints resume with any number of ranks)."""
    return (config["embedding"].get("collection", True) and not config["monitor"]["enable"]
            and config["distributed"]["mode"] != "sharded")


def create_optimizer(train: dict[str, Any], model: paddle.nn.Layer | None = None,
                     trained_apart: list[paddle.Tensor] = ()) -> paddle.optimizer.Optimizer:
    """The optimizer of a validated ``train`` section. Given the model (dynamic graph), the embedding
    tables form a parameter group with ``embedding_learning_rate``. Without it (the parameter-server
    trainer's static program) the optimizer takes the program's parameters: the servers apply their own
    rule to the tables, and a geo trainer trains its local copies. Adam is lazy: rows outside the batch
    keep their values, as sparse gradients intend (and as the servers' rule does). Paddle's non-lazy Adam
    on a sparse gradient is also unsafe on CPU: past the gradient's last row it reads the row list beyond
    its end, and where that memory holds a later row's index it applies whatever follows the gradient's
    values to that row (a geo trainer's tables took huge Adam moments in every job, and now and then a NaN).
    ``trained_apart``: parameters a collection's fused backward trains, left out."""
    lr = train["learning_rate"]
    parameters = None
    if model is not None:
        apart = {id(p) for p in trained_apart}
        table_params = [p for _, layer in embedding_layers(model) for p in layer.parameters() if id(p) not in apart]
        table_ids = {id(p) for p in table_params} | apart
        other_params = [p for p in model.parameters() if id(p) not in table_ids]
        table_lr = train["embedding_learning_rate"]
        ratio = 1.0 if table_lr is None or lr == 0 else table_lr / lr
        parameters = [g for g in ({"params": table_params, "learning_rate": ratio}, {"params": other_params})
                      if g["params"]]
    name = train["optimizer"]
    if name == "adam":
        return paddle.optimizer.Adam(lr, parameters=parameters, lazy_mode=True)
    return OPTIMIZER_CLASSES[name](lr, parameters=parameters)
