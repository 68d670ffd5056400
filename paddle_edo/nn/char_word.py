"""CharWordEmbedding: a word table fused with a character table, so that words outside the word
vocabulary still get a vector from their characters."""
from __future__ import annotations

from typing import Any

import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from ..errors import EdoTypeError, EdoValueError
from .bag import pooled_lookup
from .base import CompositeEmbedding, EmbeddingBase
from .registry import build_embedding

FUSIONS = ("gate", "concat", "add", "mean", "word", "char")
UNK_ID = 1  # ids 0 and 1 are [PAD] and [UNK] in both vocabularies (paddle_edo.text.Vocab)


def masked_mean(vectors: paddle.Tensor, mask: paddle.Tensor) -> paddle.Tensor:
    """Mean of vectors [..., L, D] over L where mask [..., L] is true (zero when none is): one batched
    matmul, as Paddle's CPU sum over a middle axis is slow."""
    weights = mask.astype(vectors.dtype)
    weights = weights / paddle.clip(weights.sum(axis=-1, keepdim=True), min=1.0)
    return paddle.matmul(weights.unsqueeze(-2), vectors).squeeze(-2)


class CharWordEmbedding(CompositeEmbedding):
    """Word ids [B, W] and their character ids [B, W, C] -> vectors [B, W, embedding_dim].

    The characters of a word are mean-pooled (padding 0 ignored). Fusions: ``gate`` (a learned
    per-word sigmoid gate g: g x word + (1 - g) x chars), ``concat`` (both, projected to
    embedding_dim), ``add``, ``mean``; ``word`` and ``char`` use one table only (baselines). A word
    outside the word vocabulary ([UNK], id 1) is represented by its characters alone: the [UNK] row
    never reaches it. Tables come from the registry (``table`` options: dense by default), so
    ``paddle_edo.quantize`` reaches them.

    ``word_dropout``: in training, the share of known words treated as unknown (their [UNK] row in
    word-only mode, their characters alone otherwise), so that the model learns what it will meet for
    words outside the vocabulary; when every training word is in the vocabulary it would never see one.
    """

    def __init__(self, word_vocab_size: int, char_vocab_size: int, embedding_dim: int, fusion: str = "gate",
                 table: dict[str, Any] | None = None, word_dropout: float = 0.0) -> None:
        super().__init__(word_vocab_size, embedding_dim, padding_idx=0)
        if fusion not in FUSIONS:
            raise EdoValueError(f"CharWordEmbedding: fusion = {fusion!r}; expected one of "
                                f"{', '.join(map(repr, FUSIONS))}")
        if char_vocab_size < 2:
            raise EdoValueError(f"CharWordEmbedding: char_vocab_size = {char_vocab_size} must be >= 2 ([PAD], [UNK])")
        if not 0.0 <= word_dropout < 1.0:
            raise EdoValueError(f"CharWordEmbedding: word_dropout = {word_dropout!r} must be in [0, 1)")
        self.fusion = fusion
        self.word_dropout = float(word_dropout)
        self.char_vocab_size = int(char_vocab_size)
        options = {**(table or {}), "dim": embedding_dim}
        self.words: EmbeddingBase | None = None
        self.chars: EmbeddingBase | None = None
        if fusion != "char":
            self.words = build_embedding(options, word_vocab_size, padding_idx=0)
        if fusion != "word":
            self.chars = build_embedding(options, char_vocab_size, padding_idx=0)
        self.gate = nn.Linear(2 * embedding_dim, 1) if fusion == "gate" else None
        self.project = nn.Linear(2 * embedding_dim, embedding_dim) if fusion == "concat" else None

    def forward(self, word_ids: paddle.Tensor, char_ids: paddle.Tensor) -> paddle.Tensor:
        if self.training and self.word_dropout > 0:
            dropped = (paddle.rand(word_ids.shape) < self.word_dropout) & (word_ids > UNK_ID)
            word_ids = paddle.where(dropped, paddle.full_like(word_ids, UNK_ID), word_ids)
        if self.fusion == "word":
            return self.words(word_ids)
        chars = pooled_lookup(self.chars, char_ids, mode="mean", padding_idx=0, owner=self.full_name())  # [B, W, D]
        if self.fusion == "char":
            return chars
        known = (word_ids > UNK_ID).astype(chars.dtype).unsqueeze(-1)       # 0 for [PAD] and [UNK]
        words = self.words(word_ids) * known
        if self.fusion == "add":
            return words + chars
        if self.fusion == "mean":
            return chars + known * 0.5 * (words - chars)
        both = paddle.concat([words, chars], axis=-1)
        if self.fusion == "concat":
            return self.project(both)
        gate = F.sigmoid(self.gate(both)) * known                         # unknown words: all characters
        return chars + gate * (words - chars)

    def lookup(self, ids: paddle.Tensor) -> paddle.Tensor:
        raise EdoTypeError("CharWordEmbedding takes word ids and character ids: call layer(word_ids, char_ids)")

    def extra_repr(self) -> str:
        return (f"words={self.num_embeddings}, chars={self.char_vocab_size}, dim={self.embedding_dim}, "
                f"fusion={self.fusion!r}, word_dropout={self.word_dropout}")
