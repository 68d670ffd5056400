"""A progress bar with rate and ETA; redraws in place on a terminal, prints periodic lines otherwise."""
from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    def __init__(self, total: int, desc: str = "", unit: str = "samples", every: int = 50,
                 stream: TextIO | None = None, width: int = 24) -> None:
        self.total, self.desc, self.unit, self.every, self.width = total, desc, unit, every, width
        self.stream = stream or sys.stderr
        self.interactive = self.stream.isatty()
        self.start = time.perf_counter()
        self.steps = 0
        self.done_units = 0

    def update(self, units: int, **info: float) -> None:
        self.steps += 1
        self.done_units += units
        if self.interactive or self.steps % self.every == 0 or self.steps == self.total:
            self._draw(info)

    def _draw(self, info: dict[str, float]) -> None:
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        rate = self.done_units / elapsed
        remaining = elapsed / self.steps * (self.total - self.steps) if self.total else 0.0
        filled = int(self.width * self.steps / max(self.total, 1))
        bar = "=" * filled + (">" if filled < self.width else "") + " " * (self.width - filled - 1)
        extras = " ".join(f"{k} {v:.4f}" for k, v in info.items())
        line = (f"{self.desc} [{bar[:self.width]}] {self.steps}/{self.total} {rate:,.0f} {self.unit}/s "
                f"ETA {_clock(remaining)} {extras}").rstrip()
        if self.interactive:
            self.stream.write("\r" + line + ("\n" if self.steps == self.total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
