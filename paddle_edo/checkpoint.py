"""Checkpoints written atomically: a temporary file beside the target, flushed, then renamed over it."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import paddle

from .errors import EdoRuntimeError
from .nn.cached import load_model_with_caches


class CheckpointError(EdoRuntimeError):
    pass


class DivergedError(EdoRuntimeError):
    """The loss became NaN or infinite: raised before a checkpoint is written, so the last one stays."""


def check_finite(loss: float, where: str) -> None:
    """Refuse to save (and go on) with a NaN or infinite mean loss; ``where`` names the trainer and step."""
    if not math.isfinite(loss):
        raise DivergedError(f"{where}: the mean loss is {loss}; training stopped before saving, so the last "
                            f"checkpoint stays as it was (lower train.learning_rate, or watch the gradients with "
                            f"monitor.enable: true)")


def save_checkpoint(state: dict[str, Any], path: str | Path) -> Path:
    """Write ``state`` with paddle.save so that ``path`` always holds a complete checkpoint."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        paddle.save(state, str(tmp))
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        state = paddle.load(str(path))
    except Exception as exc:  # paddle raises several types for a damaged file
        raise CheckpointError(f"checkpoint {path} cannot be read ({type(exc).__name__}: {exc})") from None
    if not isinstance(state, dict) or "model" not in state:
        raise CheckpointError(f"checkpoint {path} is not a paddle_edo checkpoint (no 'model' entry)")
    return state


def load_model_state(model: paddle.nn.Layer, state: dict[str, Any], source: str = "checkpoint") -> None:
    """set_state_dict that refuses, instead of skipping with a warning, any key, shape or dtype mismatch."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"the model needs {missing[0]!r}" + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
        if unexpected:
            parts.append(f"the checkpoint has {unexpected[0]!r}"
                         + (f" and {len(unexpected) - 1} more" if len(unexpected) > 1 else ""))
        raise CheckpointError(f"{source} does not fit the model: {'; '.join(parts)} "
                              f"(a table of another type or dtype?)")
    for key, tensor in expected.items():
        value = state[key]
        shape, dtype = list(value.shape), str(value.dtype).split(".")[-1]
        if shape != list(tensor.shape) or dtype != str(tensor.dtype).split(".")[-1]:
            raise CheckpointError(f"{source}: {key!r} is {dtype}{shape} in the checkpoint, but the model "
                                  f"holds {str(tensor.dtype).split('.')[-1]}{list(tensor.shape)}")
    model.set_state_dict(load_model_with_caches(model, state))
