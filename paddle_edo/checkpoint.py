"""Checkpoints written atomically: a temporary file beside the target, flushed, then renamed over it."""
from __future__ import annotations

import math
import os
import warnings
from pathlib import Path
from typing import Any

import paddle

from .data.options import DATA_OPTIONS
from .errors import DivergedError, EdoDeprecationWarning, EdoRuntimeError
from .models import model_section_options
from .nn import load_model_with_caches
from .nn.registry import check_embedding_section
from .schema import ConfigError, check_section

CHECKPOINT_SECTIONS = ("data", "model", "embedding")  # what a checkpoint must have been trained with


class CheckpointError(EdoRuntimeError):
    pass


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


def checkpoint_sections(config: dict[str, Any]) -> dict[str, Any]:
    """The sections a checkpoint records, to check a resume against."""
    return {section: config[section] for section in CHECKPOINT_SECTIONS}


def section_with_defaults(section: str, values: Any) -> Any:
    """A recorded config section as this version validates it (options added since it was written get
    their defaults, old key names their new ones), or the values unchanged when they no longer validate."""
    try:
        if section == "embedding":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", EdoDeprecationWarning)  # a recorded section is not the user's
                return check_embedding_section(section, values)
        schema = DATA_OPTIONS if section == "data" else model_section_options()
        return check_section(section, values, schema)
    except ConfigError:
        return values


def checkpoint_difference(saved: dict[str, Any], config: dict[str, Any]) -> str | None:
    """The first difference between the sections a checkpoint recorded and this config's ("embedding.dim
    was 8, now 4"), both as this version validates them, so that a checkpoint from before an option existed
    still resumes; None when they agree."""
    for section in CHECKPOINT_SECTIONS:
        before, now = section_with_defaults(section, saved.get(section)), section_with_defaults(section, config[section])
        if before != now:
            return _first_difference(section, before, now)
    return None


def _first_difference(path: str, old: Any, new: Any) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            if old.get(key) != new.get(key):
                return _first_difference(f"{path}.{key}", old.get(key), new.get(key))
    return f"{path} was {old!r}, now {new!r}"
