"""A Chinese text classifier over CharWordEmbedding: fused word vectors, masked mean, MLP, one logit."""
from __future__ import annotations

from typing import Any, Sequence

import paddle

from ..data.ctr import FieldSpec
from ..nn import CharWordEmbedding, TableSpec
from ..nn.char_word import FUSIONS, masked_mean
from ..schema import ConfigError, Option
from .base import RecModel, refuse_dense_features
from .mlp import mlp
from .registry import register_model


@register_model("text_classifier")
class TextClassifier(RecModel):
    """Binary sentiment (or any two-class label) from word ids [B, W] and character ids [B, W x C],
    the ``words`` and ``chars`` fields of ``paddle_edo.data.load_chnsenti``."""

    config_options = {
        "fusion": Option("gate", str, choices=FUSIONS, doc="text_classifier: how word and character vectors fuse"),
        "word_dropout": Option(0.0, float, low=0.0, high=0.95,
                               doc="text_classifier: share of known training words treated as unknown"),
        "pretrained": {  # a user's word2vec files (text, or binary when named .bin)
            "words": Option(None, str, nullable=True, doc="vectors for the word table"),
            "chars": Option(None, str, nullable=True, doc="vectors for the character table"),
        },
    }

    def __init__(self, fields: Sequence[FieldSpec], embedding: TableSpec | dict[str, Any], fusion: str = "gate",
                 hidden_units: Sequence[int] = (64,), dropout: float = 0.0, word_dropout: float = 0.0) -> None:
        super().__init__(fields)
        by_name = {f.name: f for f in self.fields}
        if set(by_name) != {"words", "chars"}:
            raise ConfigError(f"TextClassifier: fields {sorted(by_name)}; it reads 'words' and 'chars' "
                              f"(paddle_edo.data.load_chnsenti)")
        words, chars = by_name["words"], by_name["chars"]
        self.max_chars_per_word = chars.max_len // words.max_len
        spec = TableSpec.from_section(embedding)
        self.embedding = CharWordEmbedding(words.vocab_size, spec.dim, fusion, num_chars=chars.vocab_size,
                                           sparse=spec.sparse, table=spec, word_dropout=word_dropout)
        self.mlp = mlp(spec.dim, hidden_units, dropout)

    @classmethod
    def from_config(cls, fields: Sequence[FieldSpec], config: dict[str, Any], frequencies: Any = None,
                    dense_features: Sequence[str] = ()) -> "TextClassifier":
        refuse_dense_features(cls, dense_features)
        model = config["model"]
        return cls(fields, config["embedding"], model["fusion"], model["hidden_units"], model["dropout"],
                   model["word_dropout"])

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> None:
        if config["data"]["name"] != "chnsenti":
            raise ConfigError(f"model.name = 'text_classifier' needs text data (data.name: chnsenti), "
                              f"not data.name = {config['data']['name']!r}")

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
