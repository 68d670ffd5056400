"""Checkpoints written atomically: a temporary file beside the target, flushed, then renamed over it."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import paddle


class CheckpointError(RuntimeError):
    pass


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
