"""Vectors for words outside a pretrained vocabulary, composed from their characters.

``fit_composer`` learns, from pretrained word vectors (a user's word2vec file), how characters make
the vectors of the words that have one: "量子计算机" then gets a vector from 量, 子, 计, 算, 机. Kinds:

- ``mean``: a learned vector per character, averaged: CharWordEmbedding's own character path, so its
  character table can start from it exactly;
- ``position``: a learned vector per character, mapped by one matrix per position in the word
  (first, second, ..., last) and then averaged: a head character (电 in 电脑) is read differently
  from a suffix (性 in 可靠性);
- ``mlp``: the mean, first and last character vectors through a small two-layer network.

The plain character mean (each character's own pretrained vector when the character is a word of the
file, averaged) needs no training and is the baseline they are measured against
(``plain_char_mean``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from ..errors import EdoValueError
from .pretrained import PretrainedReport
from .vocab import PAD, UNK, Vocab

#: The kinds of CharComposer: the mean of a word's character vectors, a position-weighted mean, an MLP.
COMPOSERS = ("mean", "position", "mlp")
PAD_ID, UNK_ID = 0, 1


@dataclass(frozen=True)
class ComposedVectors:
    """Composed vectors [N, dim] of N words, and which words had no known character: those got the
    unknown character's vector, flagged here rather than failing."""

    words: list[str]
    vectors: np.ndarray
    no_known_char: np.ndarray  # bool [N]

    @property
    def flagged(self) -> list[str]:
        return [w for w, flag in zip(self.words, self.no_known_char) if flag]


class CharComposer(nn.Layer):
    """Character ids [N, max_chars] (0 pads) -> word vectors [N, dim]; see the module for the kinds."""

    def __init__(self, chars: Vocab, dim: int, kind: str = "position", max_chars: int = 4, hidden: int = 256) -> None:
        super().__init__()
        if kind not in COMPOSERS:
            raise EdoValueError(f"CharComposer: kind = {kind!r}; expected one of {', '.join(map(repr, COMPOSERS))}")
        for name, value in (("dim", dim), ("max_chars", max_chars), ("hidden", hidden)):
            if not isinstance(value, int) or value < 1:
                raise EdoValueError(f"CharComposer: {name} = {value!r} must be an integer >= 1")
        self.chars, self.kind, self.dim, self.max_chars = chars, kind, dim, max_chars
        self.table = nn.Embedding(len(chars), dim, padding_idx=PAD_ID)
        self.positions = None
        self.mlp = None
        if kind == "position":  # one map per position from the start, the last character its own
            eye = paddle.eye(dim).unsqueeze(0).tile([max_chars + 1, 1, 1])
            self.positions = self.create_parameter([max_chars + 1, dim, dim], default_initializer=nn.initializer.Assign(eye))
        if kind == "mlp":
            self.mlp = nn.Sequential(nn.Linear(3 * dim, hidden), nn.Tanh(), nn.Linear(hidden, dim))

    def forward(self, char_ids: paddle.Tensor) -> paddle.Tensor:
        mask = (char_ids != PAD_ID).astype("float32")                       # [N, C]
        count = paddle.clip(mask.sum(axis=1, keepdim=True), min=1.0)
        vectors = self.table(char_ids)                                       # [N, C, D]
        if self.kind == "position":
            lengths = mask.sum(axis=1).astype("int64")
            slot = paddle.arange(char_ids.shape[1], dtype="int64").unsqueeze(0).expand_as(char_ids)
            is_last = (slot == (lengths - 1).unsqueeze(1)) & (lengths > 1).unsqueeze(1)
            slot = paddle.where(is_last, paddle.full_like(slot, self.max_chars), slot)
            maps = paddle.gather(self.positions, slot.flatten()).reshape([*char_ids.shape, self.dim, self.dim])
            vectors = paddle.matmul(vectors.unsqueeze(-2), maps).squeeze(-2)
        mean = (vectors * mask.unsqueeze(-1)).sum(axis=1) / count
        if self.kind != "mlp":
            return mean
        last = paddle.clip(mask.sum(axis=1).astype("int64") - 1, min=0)
        rows = paddle.arange(char_ids.shape[0], dtype="int64")
        ends = paddle.stack([rows, last], axis=1)
        return self.mlp(paddle.concat([mean, vectors[:, 0], paddle.gather_nd(vectors, ends)], axis=-1))

    def char_ids(self, words: Sequence[str]) -> np.ndarray:
        """[N, max_chars] ids of each word's first max_chars characters (unknown ones -> [UNK])."""
        ids = np.zeros((len(words), self.max_chars), dtype=np.int64)
        for row, word in enumerate(words):
            chars = self.chars.ids(word[: self.max_chars])
            ids[row, : len(chars)] = chars
        return ids

    def compose_vectors(self, words: Sequence[str], batch_size: int = 4096) -> ComposedVectors:
        """Vectors of any words from their characters; a word without one known character (or an empty
        string) gets the unknown character's vector and is flagged."""
        words = list(words)
        ids = self.char_ids(words)
        ids[(ids == PAD_ID).all(axis=1), 0] = UNK_ID                           # empty words: the [UNK] character
        known = ((ids > UNK_ID).sum(axis=1) > 0)
        was_training = self.training
        self.eval()
        with paddle.no_grad():
            parts = [self(paddle.to_tensor(ids[i:i + batch_size])).numpy() for i in range(0, len(words), batch_size)]
        if was_training:
            self.train()
        vectors = np.concatenate(parts) if parts else np.zeros((0, self.dim), dtype=np.float32)
        return ComposedVectors(words, vectors.astype(np.float32), ~known)


@dataclass(frozen=True)
class ComposerFit:
    """A fitted composer and how closely it reproduces the training words' vectors (mean cosine)."""

    composer: CharComposer
    train_cosine: float
    train_words: int


def fit_composer(tokens: Sequence[str], vectors: np.ndarray, kind: str = "mean", *, max_chars: int = 4,
                 epochs: int = 40, batch_size: int = 256, learning_rate: float = 0.005, char_dropout: float = 0.05,
                 seed: int = 0) -> ComposerFit:
    """Learn ``kind`` of composition from pretrained ``vectors`` [len(tokens), dim] of ``tokens`` (as
    ``read_word2vec`` returns them): the composed vector of each word should point where its own does
    (cosine loss; word2vec norms follow frequency, not meaning). Characters start from their own vectors
    where the file has them as words. ``char_dropout``: the share of characters replaced by [UNK] in
    training, so that the unknown character's vector is learned too."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or len(tokens) != vectors.shape[0] or vectors.shape[0] == 0:
        raise EdoValueError(f"fit_composer: {len(tokens)} tokens and vectors of shape {list(vectors.shape)}; "
                            f"expected one vector per token")
    if not np.isfinite(vectors).all():
        raise EdoValueError("fit_composer: the vectors hold NaN or infinite values")
    keep = [i for i, t in enumerate(tokens) if t and t not in (PAD, UNK)]
    words = [tokens[i] for i in keep]
    chars = Vocab([PAD, UNK, *dict.fromkeys(c for w in words for c in w[:max_chars])], source="fit_composer")
    paddle.seed(seed)
    composer = CharComposer(chars, vectors.shape[1], kind, max_chars)
    _start_characters(composer, tokens, vectors)
    ids = composer.char_ids(words)
    targets = _unit(vectors[keep])
    rng = np.random.default_rng(seed)
    optimizer = paddle.optimizer.Adam(learning_rate, parameters=composer.parameters())
    composer.train()
    for _ in range(epochs):
        order = rng.permutation(len(words))
        for start in range(0, len(words), batch_size):
            batch = order[start:start + batch_size]
            batch_ids = ids[batch].copy()
            dropped = (rng.random(batch_ids.shape) < char_dropout) & (batch_ids > UNK_ID)
            batch_ids[dropped] = UNK_ID
            composed = composer(paddle.to_tensor(batch_ids))
            loss = 1.0 - F.cosine_similarity(composed, paddle.to_tensor(targets[batch]), axis=1).mean()
            loss.backward()
            optimizer.step()
            optimizer.clear_grad()
    composer.eval()
    fitted = composer.compose_vectors(words).vectors
    return ComposerFit(composer, float(np.mean(np.sum(_unit(fitted) * targets, axis=1))), len(words))


def load_composed_chars(weight: paddle.Tensor, vocab: Vocab, composer: CharComposer) -> PretrainedReport:
    """Copy the composer's character vectors into the rows of ``weight`` (a [len(vocab), dim] character
    table) for the characters both know; with a ``mean`` composer, a table that averages its rows (the
    character path of CharWordEmbedding) then gives every word the composer's vector. [PAD] and [UNK]
    rows are left alone."""
    rows, dim = weight.shape
    if rows != len(vocab) or dim != composer.dim:
        raise EdoValueError(f"load_composed_chars: the composer makes {composer.dim}-dim vectors and the vocabulary "
                            f"has {len(vocab)} characters; the table is [{rows}, {dim}]")
    source = composer.table.weight.numpy()
    pairs = [(i, composer.chars.index[c]) for i, c in enumerate(vocab.tokens[2:], 2) if c in composer.chars]
    values = weight.numpy()
    if pairs:
        ours, theirs = np.array(pairs).T
        values[ours] = source[theirs]
    weight.set_value(values)
    return PretrainedReport(len(pairs), len(vocab) - 2 - len(pairs), len(composer.chars) - 2)


def _start_characters(composer: CharComposer, tokens: Sequence[str], vectors: np.ndarray) -> None:
    """Rows of characters that are tokens of the file start from their vectors (scaled to the table's
    initial norm), the rest stay random."""
    table = composer.table.weight.numpy()
    scale = float(np.median(np.linalg.norm(table[2:], axis=1))) if len(table) > 2 else 1.0
    for token, vector in zip(tokens, _unit(vectors)):
        if len(token) == 1 and token in composer.chars:
            table[composer.chars.index[token]] = scale * vector
    table[PAD_ID] = 0.0
    composer.table.weight.set_value(table)


def plain_char_mean(words: Sequence[str], tokens: Sequence[str], vectors: np.ndarray) -> ComposedVectors:
    """The untrained baseline: the mean of the unit vectors of a word's characters that are tokens of
    the file; a word with none gets zeros and is flagged."""
    index = {t: i for i, t in enumerate(tokens) if len(t) == 1}
    units = _unit(np.asarray(vectors, dtype=np.float32))
    out = np.zeros((len(words), units.shape[1]), dtype=np.float32)
    flagged = np.zeros(len(words), dtype=bool)
    for row, word in enumerate(words):
        found = [index[c] for c in word if c in index]
        if found:
            out[row] = units[found].mean(axis=0)
        else:
            flagged[row] = True
    return ComposedVectors(list(words), out, flagged)


def neighbour_overlap(true: np.ndarray, composed: np.ndarray, vocabulary: np.ndarray, k: int = 10) -> np.ndarray:
    """Per query, the share of the ``k`` nearest rows of ``vocabulary`` (cosine) to the true vector
    that are also among the ``k`` nearest to the composed one."""
    base = _unit(np.asarray(vocabulary, dtype=np.float32))
    ours = [np.argpartition(-(_unit(q) @ base.T), k, axis=1)[:, :k] for q in (true, composed)]
    return np.array([len(set(a) & set(b)) / k for a, b in zip(*ours)])


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two [N, D] arrays (0 where a row is all zeros)."""
    return np.sum(_unit(a) * _unit(b), axis=1)


def _unit(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)
