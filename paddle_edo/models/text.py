"""A Chinese text classifier over CharWordEmbedding: fused word vectors, masked mean, MLP, one logit."""
from __future__ import annotations

from typing import Any, Sequence

import paddle
import paddle.nn as nn

from ..data.ctr import FieldSpec
from ..nn.char_word import CharWordEmbedding, masked_mean
from .mlp import mlp


class TextClassifier(nn.Layer):
    """Binary sentiment (or any two-class label) from word ids [B, W] and character ids [B, W x C],
    the ``words`` and ``chars`` fields of ``paddle_edo.data.load_chnsenti``."""

    def __init__(self, word_vocab_size: int, char_vocab_size: int, max_chars_per_word: int,
                 embedding: dict[str, Any], fusion: str = "gate", hidden_units: Sequence[int] = (64,),
                 dropout: float = 0.0, word_dropout: float = 0.0) -> None:
        super().__init__()
        self.max_chars_per_word = max_chars_per_word
        table = {k: v for k, v in embedding.items() if k != "dim"}
        self.embedding = CharWordEmbedding(word_vocab_size, char_vocab_size, embedding["dim"], fusion, table,
                                           word_dropout)
        self.mlp = mlp(embedding["dim"], hidden_units, dropout)

    @classmethod
    def from_config(cls, fields: Sequence[FieldSpec], config: dict[str, Any], frequencies: Any = None
                    ) -> "TextClassifier":
        by_name = {f.name: f for f in fields}
        words, chars = by_name["words"], by_name["chars"]
        model = config["model"]
        return cls(words.vocab_size, chars.vocab_size, chars.max_len // words.max_len, config["embedding"],
                   model["fusion"], model["hidden_units"], model["dropout"], model["word_dropout"])

    def table_fields(self) -> dict[str, str]:
        """Sublayer name of each table -> the field whose ids it looks up (for monitors)."""
        names = {"embedding.words": "words", "embedding.chars": "chars"}
        return {name: field for name, field in names.items()
                if getattr(self.embedding, name.split(".")[1]) is not None}

    def forward(self, ids: list[paddle.Tensor]) -> paddle.Tensor:
        words, chars = ids[0], ids[1]
        chars = chars.reshape([0, words.shape[1], self.max_chars_per_word])   # 0: keep the batch dimension
        vectors = self.embedding(words, chars)                                 # [B, W, D]
        return self.mlp(masked_mean(vectors, words != 0)).squeeze(-1)
