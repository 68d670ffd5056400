"""Text -> word ids and, for each word, its character ids: the two inputs of CharWordEmbedding."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from ..errors import EdoValueError
from .tokenizer import JiebaTokenizer
from .vocab import Vocab


@dataclass(frozen=True)
class EncodedBatch:
    """Padded ids of a batch of B texts (0 is padding in both id arrays): word ids int64 [B, max_words],
    their characters' ids int64 [B, max_words, max_chars_per_word], which positions hold a word (bool
    [B, max_words]) and how many characters each kept (int64 [B, max_words])."""

    word_ids: np.ndarray      # int64 [B, max_words]
    char_ids: np.ndarray      # int64 [B, max_words, max_chars_per_word]
    word_mask: np.ndarray     # bool [B, max_words]: a real word
    char_lengths: np.ndarray  # int64 [B, max_words]: characters kept per word (0 for padding)


class CharWordEncoder:
    """Segments text with ``tokenizer`` and maps each word to its id in ``words`` ([UNK] when unknown)
    and its first ``max_chars_per_word`` characters to ids in ``chars``; texts keep their first
    ``max_words`` words. Any string encodes: an empty one to padding only, unseen characters to [UNK]."""

    def __init__(self, tokenizer: JiebaTokenizer, words: Vocab, chars: Vocab, max_words: int = 64,
                 max_chars_per_word: int = 4) -> None:
        for name, value in (("max_words", max_words), ("max_chars_per_word", max_chars_per_word)):
            if not isinstance(value, int) or value < 1:
                raise EdoValueError(f"CharWordEncoder: {name} = {value!r} must be an integer >= 1")
        self.tokenizer, self.words, self.chars = tokenizer, words, chars
        self.max_words, self.max_chars_per_word = max_words, max_chars_per_word

    def encode_words(self, words: Sequence[str]) -> tuple[list[int], list[list[int]]]:
        """Ids of already segmented words (cut to max_words) and of their characters (cut, unpadded)."""
        words = list(words)[: self.max_words]
        chars = [self.chars.ids(w[: self.max_chars_per_word]) for w in words]
        return self.words.ids(words), chars

    def encode(self, text: str) -> tuple[list[int], list[list[int]]]:
        return self.encode_words(self.tokenizer.cut(text))

    def unknown_words(self, text: str) -> list[str]:
        """The words of ``text`` (within max_words) that the word vocabulary lacks."""
        return [w for w in self.tokenizer.cut(text)[: self.max_words] if w not in self.words]

    def encode_batch(self, texts: Iterable[str] | None = None, segmented: Iterable[Sequence[str]] | None = None
                     ) -> EncodedBatch:
        """Pad a batch of texts (or of already segmented texts) to max_words x max_chars_per_word."""
        if (texts is None) == (segmented is None):
            raise EdoValueError("CharWordEncoder.encode_batch: give texts or segmented, not both")
        encoded = [self.encode(t) for t in texts] if texts is not None else [self.encode_words(s) for s in segmented]
        batch = len(encoded)
        word_ids = np.zeros((batch, self.max_words), dtype=np.int64)
        char_ids = np.zeros((batch, self.max_words, self.max_chars_per_word), dtype=np.int64)
        lengths = np.zeros((batch, self.max_words), dtype=np.int64)
        for row, (words, chars) in enumerate(encoded):
            word_ids[row, : len(words)] = words
            for position, ids in enumerate(chars):
                char_ids[row, position, : len(ids)] = ids
                lengths[row, position] = len(ids)
        return EncodedBatch(word_ids, char_ids, lengths > 0, lengths)
