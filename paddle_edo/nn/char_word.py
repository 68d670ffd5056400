"""CharWordEmbedding: a word table fused with a character table, so that words outside the word
vocabulary still get a vector from their characters."""
from __future__ import annotations

from typing import Any

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from ..errors import EdoTypeError, EdoValueError
from .bag import pooled_lookup
from .base import CompositeEmbedding, EmbeddingBase, is_count, part_attr
from .collection import EmbeddingCollection
from .dense import DenseEmbedding
from .registry import TableSpec, register_embedding
from .signature import accepts_old_signature

FUSIONS = ("gate", "concat", "add", "mean", "word", "char")
PAD_ID, UNK_ID = 0, 1  # [PAD] and [UNK] in both vocabularies (paddle_edo.text.Vocab)


def masked_mean(vectors: paddle.Tensor, mask: paddle.Tensor) -> paddle.Tensor:
    """Mean of vectors [..., L, D] over L where mask [..., L] is true (zero when none is): one batched
    matmul, as Paddle's CPU sum over a middle axis is slow."""
    weights = mask.astype(vectors.dtype)
    weights = weights / paddle.clip(weights.sum(axis=-1, keepdim=True), min=1.0)
    return paddle.matmul(weights.unsqueeze(-2), vectors).squeeze(-2)


@register_embedding("char_word")
class CharWordEmbedding(CompositeEmbedding):
    """Word ids [B, W] and their character ids [B, W, C] -> vectors [B, W, embedding_dim].

    ``num_embeddings`` words and ``num_chars`` characters; in both vocabularies id 0 is [PAD] (the
    padding id) and id 1 is [UNK] (``paddle_edo.text.Vocab``). The characters of a word are mean-pooled
    (padding ignored). Fusions: ``gate`` (a learned per-word sigmoid gate g: g x word + (1 - g) x chars),
    ``concat`` (both, projected to embedding_dim), ``add``, ``mean``; ``word`` and ``char`` use one table
    only (baselines). A word outside the word vocabulary ([UNK]) is represented by its characters alone:
    the [UNK] row never reaches it. ``table`` says what kind of table the words and characters get
    (a ``TableSpec`` or an ``embedding`` section; dense by default), so ``paddle_edo.quantize`` reaches
    them.

    ``word_chars`` [num_embeddings, C]: the character ids of each vocabulary word; with it the layer
    takes word ids alone (``layer(word_ids)``), like any table.

    ``word_dropout``: in training, the share of known words treated as unknown (their [UNK] row in
    word-only mode, their characters alone otherwise), so that the model learns what it will meet for
    words outside the vocabulary; when every training word is in the vocabulary it would never see one.

    Both tables are looked up in one call of an ``EmbeddingCollection`` over them (``batched``; the tables
    stay this layer's ``words`` and ``chars``), unless the table spec says ``collection: false``.
    """

    field_table = False  # two vocabularies: built by the text model, not per id field

    @accepts_old_signature(("word_vocab_size", "char_vocab_size", "embedding_dim", "fusion", "table", "word_dropout"),
                           renamed={"word_vocab_size": "num_embeddings", "char_vocab_size": "num_chars"},
                           is_old=lambda args, kwargs: len(args) > 3 or (len(args) == 3 and "num_chars" not in kwargs))
    def __init__(self, num_embeddings: int, embedding_dim: int, fusion: str = "gate", *, num_chars: int,
                 padding_idx: int = PAD_ID, sparse: bool = True, weight_attr: paddle.ParamAttr | None = None,
                 name: str | None = None, table: TableSpec | dict[str, Any] | None = None, word_dropout: float = 0.0,
                 word_chars: np.ndarray | None = None) -> None:
        label = type(self).__name__
        if padding_idx != PAD_ID:
            raise EdoValueError(f"{label}: padding_idx = {padding_idx!r}; the vocabularies pad with id {PAD_ID}")
        super().__init__(num_embeddings, embedding_dim, padding_idx=PAD_ID, sparse=sparse, name=name)
        if fusion not in FUSIONS:
            raise EdoValueError(f"{label}: fusion = {fusion!r}; expected one of {', '.join(map(repr, FUSIONS))}")
        if not is_count(num_chars, low=2):
            raise EdoValueError(f"{label}: num_chars = {num_chars!r} must be an integer >= 2 ([PAD], [UNK])")
        if not 0.0 <= word_dropout < 1.0:
            raise EdoValueError(f"{label}: word_dropout = {word_dropout!r} must be in [0, 1)")
        self.fusion = fusion
        self.word_dropout = float(word_dropout)
        self.num_chars = int(num_chars)
        section = table.section() if isinstance(table, TableSpec) else dict(table or {})
        spec = TableSpec.from_section({**section, "dim": embedding_dim, "sparse": sparse}, f"{label}: table")
        if weight_attr is not None and spec.type != "dense":
            raise EdoValueError(f"{label}: weight_attr initialises dense word and character tables; a {spec.type!r} "
                                f"table takes its own options (table={{'type': {spec.type!r}, ...}})")
        self.words: EmbeddingBase | None = None
        self.chars: EmbeddingBase | None = None
        if fusion != "char":
            self.words = _table(spec, num_embeddings, weight_attr, "words")
        if fusion != "word":
            self.chars = _table(spec, num_chars, weight_attr, "chars")
        parts = {key: layer for key, layer in (("words", self.words), ("chars", self.chars)) if layer is not None}
        self.batched = EmbeddingCollection(parts, {"chars": "mean"} if self.chars is not None else "none",
                                           tables_of=self) if spec.collection else None
        self.gate = nn.Linear(2 * embedding_dim, 1) if fusion == "gate" else None
        self.project = nn.Linear(2 * embedding_dim, embedding_dim) if fusion == "concat" else None
        self.register_buffer("word_chars", None)
        if word_chars is not None:
            word_chars = np.asarray(word_chars)
            if word_chars.ndim != 2 or word_chars.shape[0] != num_embeddings or not np.issubdtype(
                    word_chars.dtype, np.integer) or word_chars.min() < 0 or word_chars.max() >= num_chars:
                raise EdoValueError(f"{label}: word_chars must be [num_embeddings={num_embeddings}, C] character ids "
                                    f"in [0, {num_chars}), got shape {list(word_chars.shape)}")
            self.register_buffer("word_chars", paddle.to_tensor(word_chars.astype(np.int64)))

    def forward(self, word_ids: paddle.Tensor, char_ids: paddle.Tensor | None = None) -> paddle.Tensor:
        if char_ids is None:
            char_ids = self._chars_of(word_ids)
        if self.training and self.word_dropout > 0:
            dropped = (paddle.rand(word_ids.shape) < self.word_dropout) & (word_ids > UNK_ID)
            word_ids = paddle.where(dropped, paddle.full_like(word_ids, UNK_ID), word_ids)
        words, chars = self._parts(word_ids, char_ids)
        if self.fusion == "word":
            return words
        if self.fusion == "char":
            return chars
        known = (word_ids > UNK_ID).astype(chars.dtype).unsqueeze(-1)       # 0 for [PAD] and [UNK]
        words = words * known
        if self.fusion == "add":
            return words + chars
        if self.fusion == "mean":
            return chars + known * 0.5 * (words - chars)
        both = paddle.concat([words, chars], axis=-1)
        if self.fusion == "concat":
            return self.project(both)
        gate = F.sigmoid(self.gate(both)) * known                         # unknown words: all characters
        return chars + gate * (words - chars)

    def _parts(self, word_ids: paddle.Tensor, char_ids: paddle.Tensor) -> tuple[paddle.Tensor | None,
                                                                                paddle.Tensor | None]:
        """(the words' vectors, their characters' mean vectors), each [..., D] (None for a table this fusion
        has not): through the collection, every word an example of it, or through each table."""
        if self.batched is None:
            words = self.words(word_ids) if self.words is not None else None
            chars = None if self.chars is None else pooled_lookup(self.chars, char_ids, mode="mean", padding_idx=PAD_ID,
                                                                  owner=self.full_name())
            return words, chars
        ids = {}
        if self.words is not None:
            ids["words"] = word_ids.reshape([-1])
        if self.chars is not None:
            ids["chars"] = char_ids.reshape([-1, char_ids.shape[-1]])
        vectors = dict(zip(ids, self.batched(ids, concat=False)))
        shape = [-1 if n < 0 else n for n in word_ids.shape[1:]]
        return tuple(None if key not in vectors else vectors[key].reshape([-1, *shape, self.embedding_dim])
                     for key in ("words", "chars"))

    def _chars_of(self, word_ids: paddle.Tensor) -> paddle.Tensor:
        """[..., C] character ids of vocabulary words, from ``word_chars``."""
        if self.word_chars is None:
            raise EdoTypeError(f"{self.full_name()}: give char_ids (layer(word_ids, char_ids)), or build the layer "
                               f"with word_chars so that word ids alone are enough")
        self.check_ids(word_ids)
        chars = paddle.gather(self.word_chars, word_ids.flatten())
        return chars.reshape([*word_ids.shape, self.word_chars.shape[1]])

    def lookup(self, ids: paddle.Tensor) -> paddle.Tensor:
        """Word ids alone: their characters from ``word_chars``."""
        return self.forward(ids)

    def extra_repr(self) -> str:
        return (f"{self.num_embeddings}, {self.embedding_dim}, fusion={self.fusion!r}, num_chars={self.num_chars}, "
                f"word_dropout={self.word_dropout}")


def _table(spec: TableSpec, rows: int, weight_attr: paddle.ParamAttr | None, part: str) -> EmbeddingBase:
    """One of the two vocabularies' tables, as ``spec`` says (a ``weight_attr`` with a dense spec only)."""
    if weight_attr is not None:
        return DenseEmbedding(rows, spec.dim, padding_idx=PAD_ID, sparse=spec.sparse,
                              weight_attr=part_attr(weight_attr, part), **dict(spec.options))
    return spec.build(rows, padding_idx=PAD_ID)
