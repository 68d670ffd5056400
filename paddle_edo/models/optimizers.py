"""The optimizer ``train.optimizer`` names, built the same way for every trainer."""
from __future__ import annotations

from typing import Any

import paddle

from ..nn.base import embedding_layers

OPTIMIZERS = ("adam", "adagrad", "sgd", "momentum", "rmsprop")
_CLASSES = {"adam": paddle.optimizer.Adam, "adagrad": paddle.optimizer.Adagrad, "sgd": paddle.optimizer.SGD,
            "momentum": paddle.optimizer.Momentum, "rmsprop": paddle.optimizer.RMSProp}


def create_optimizer(train: dict[str, Any], model: paddle.nn.Layer | None = None) -> paddle.optimizer.Optimizer:
    """The optimizer of a validated ``train`` section. Given the model (dynamic graph), the embedding
    tables form a parameter group with ``embedding_learning_rate``, and Adam is lazy: rows outside the
    batch keep their values, as sparse gradients intend. Without it (the parameter-server trainer's static
    program) the optimizer takes the program's parameters: the servers apply their own rule to the tables,
    and a geo trainer's local copies train with Paddle's default (non-lazy) Adam, as they always have."""
    lr = train["learning_rate"]
    parameters = None
    if model is not None:
        table_params = [p for _, layer in embedding_layers(model) for p in layer.parameters()]
        table_ids = {id(p) for p in table_params}
        other_params = [p for p in model.parameters() if id(p) not in table_ids]
        table_lr = train["embedding_learning_rate"]
        ratio = 1.0 if table_lr is None or lr == 0 else table_lr / lr
        parameters = [g for g in ({"params": table_params, "learning_rate": ratio}, {"params": other_params})
                      if g["params"]]
    name = train["optimizer"]
    if name == "adam":
        return paddle.optimizer.Adam(lr, parameters=parameters, lazy_mode=model is not None)
    return _CLASSES[name](lr, parameters=parameters)
