"""Hooks the engine calls during training; monitors subclass Callback and override what they need."""
from __future__ import annotations

from typing import Any


class Callback:
    def on_train_begin(self, engine: Any) -> None: ...

    def on_after_backward(self, engine: Any, step: int) -> None:
        """Gradients are present (before the optimizer step and the row updates)."""

    def on_step_end(self, engine: Any, step: int, logs: dict[str, float]) -> None: ...

    def on_epoch_end(self, engine: Any, epoch: int, logs: dict[str, float]) -> None: ...

    def on_train_end(self, engine: Any, logs: dict[str, float]) -> None: ...
