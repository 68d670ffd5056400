"""Chinese word segmentation with jieba: one loaded dictionary per (dictionary, user dictionaries)."""
from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any, Iterable, Sequence

import jieba

from ..errors import EdoFileNotFoundError
from ..runtime import default_cache_dir


@functools.lru_cache(maxsize=8)
def _jieba(dictionary: str | None, user_dicts: tuple[str, ...]) -> jieba.Tokenizer:
    """A loaded jieba.Tokenizer, shared by every JiebaTokenizer with the same dictionaries; jieba's own
    parsed-dictionary cache goes under paddle_edo's cache folder, so later processes load it in ~1 s."""
    jieba.setLogLevel(logging.WARNING)
    tokenizer = jieba.Tokenizer(dictionary) if dictionary else jieba.Tokenizer()
    cache = default_cache_dir() / "jieba"
    cache.mkdir(parents=True, exist_ok=True)
    tokenizer.tmp_dir = str(cache)
    tokenizer.initialize()
    for path in user_dicts:
        tokenizer.load_userdict(path)
    return tokenizer


class JiebaTokenizer:
    """Splits text into words with jieba (``hmm`` finds words missing from the dictionary); whitespace
    is dropped. ``user_dicts``: files of ``word [freq] [tag]`` lines added to the dictionary."""

    def __init__(self, user_dicts: Sequence[str | Path] = (), hmm: bool = True, dictionary: str | Path | None = None
                 ) -> None:
        for path in [*user_dicts, *([dictionary] if dictionary else [])]:
            if not Path(path).is_file():
                raise EdoFileNotFoundError(f"JiebaTokenizer: dictionary file {path} does not exist")
        self.hmm = hmm
        self.user_dicts = tuple(str(Path(p).resolve()) for p in user_dicts)
        self.dictionary = str(Path(dictionary).resolve()) if dictionary else None
        self.jieba = _jieba(self.dictionary, self.user_dicts)

    @classmethod
    def from_paddlenlp(cls, tokenizer: Any, hmm: bool = True) -> "JiebaTokenizer":
        """The segmentation of a ``paddlenlp.data.JiebaTokenizer``: its jieba instance's dictionary."""
        inner = tokenizer.tokenizer  # paddlenlp keeps a jieba.Tokenizer there
        made = cls(hmm=hmm)
        made.jieba = inner
        return made

    def _key(self) -> tuple:
        return (self.dictionary, self.user_dicts, self.hmm, id(self.jieba))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JiebaTokenizer) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def cut(self, text: str) -> list[str]:
        return [w for w in self.jieba.lcut(text, HMM=self.hmm) if w.strip()]

    def cut_many(self, texts: Iterable[str]) -> list[list[str]]:
        return [self.cut(t) for t in texts]
