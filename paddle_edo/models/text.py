"""A Chinese text classifier over CharWordEmbedding: fused word vectors, a sentence encoder (masked mean,
n-gram convolutions or a bidirectional GRU), MLP, one logit."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from ..data.ctr import FieldSpec
from ..nn import CharWordEmbedding, TableSpec
from ..nn.char_word import FUSIONS, masked_mean
from ..errors import EdoValueError
from ..schema import ConfigError, Option
from ..text import CharWordEncoder
from .base import RecModel, refuse_dense_features
from .mlp import mlp
from .registry import register_model

ENCODERS = ("mean", "cnn", "bigru")
NEG_LARGE = -1e4  # added to padded positions before max pooling


class SentenceEncoder(nn.Layer):
    """Word vectors [B, W, D] and a mask of real words [B, W] -> one sentence vector [B, out_features].

    ``mean``: masked mean (word order lost; out_features = D). ``cnn``: convolutions over 1, 2 and 3
    consecutive words (``channels`` each), ReLU, max over the real words, beside the masked mean
    (out_features = 3 x channels + D): phrases such as 不 + 好 keep their order. ``bigru``: a
    bidirectional GRU of ``channels`` units a direction, max over the real words (out_features =
    2 x channels)."""

    def __init__(self, kind: str, embedding_dim: int, channels: int = 128) -> None:
        super().__init__()
        if kind not in ENCODERS:
            raise EdoValueError(f"SentenceEncoder: kind = {kind!r}; expected one of {', '.join(map(repr, ENCODERS))}")
        if not isinstance(channels, int) or channels < 1:
            raise EdoValueError(f"SentenceEncoder: channels = {channels!r} must be an integer >= 1")
        self.kind = kind
        self.widths = (1, 2, 3) if kind == "cnn" else ()
        self.convs = nn.LayerList([nn.Linear(w * embedding_dim, channels) for w in self.widths])
        self.gru = nn.GRU(embedding_dim, channels, direction="bidirect") if kind == "bigru" else None
        self.out_features = {"mean": embedding_dim, "cnn": len(self.widths) * channels + embedding_dim,
                             "bigru": 2 * channels}[kind]

    def forward(self, vectors: paddle.Tensor, mask: paddle.Tensor) -> paddle.Tensor:
        mean = masked_mean(vectors, mask)
        if self.kind == "mean":
            return mean
        if self.kind == "bigru":
            lengths = paddle.clip(mask.astype("int64").sum(axis=1), min=1)
            states, _ = self.gru(vectors, sequence_length=lengths)                # [B, W, 2H]
            return _masked_max(states, mask)
        pooled = []
        for width, conv in zip(self.widths, self.convs):
            pooled.append(_masked_max(F.relu(conv(_windows(vectors, width))), mask))   # [B, channels]
        return paddle.concat([*pooled, mean], axis=-1)


def _windows(vectors: paddle.Tensor, width: int) -> paddle.Tensor:
    """[B, W, D] -> [B, W, width x D]: each position's vector and the next width - 1 ones (zeros past
    the end), so that one matmul is a convolution over words. Gathered with one index_select: Paddle's
    CPU Conv1D is ~100x slower, and shifted slices joined by concat 4x slower (forward and backward)."""
    if width == 1:
        return vectors
    length, dim = vectors.shape[1], vectors.shape[2]
    padded = F.pad(vectors, [0, width - 1], data_format="NLC")
    starts = paddle.arange(length, dtype="int64").unsqueeze(1) + paddle.arange(width, dtype="int64").unsqueeze(0)
    return paddle.index_select(padded, starts.flatten(), axis=1).reshape([0, length, width * dim])


def _masked_max(values: paddle.Tensor, mask: paddle.Tensor) -> paddle.Tensor:
    """Max of values [B, W, H] over the W positions where mask [B, W] is true (zero when none is).
    Taken at the argmax, so the backward pass is a scatter of B x H values: Paddle's own max backward
    takes 10x longer on 2.6 and 80x on 3.3 ([128, 128, 64]: 0.23 s and 1.9 s against 0.02 s)."""
    keep = mask.astype(values.dtype).unsqueeze(-1)
    masked = values * keep + (1.0 - keep) * NEG_LARGE
    top = paddle.argmax(masked, axis=1, keepdim=True)
    return paddle.take_along_axis(masked, top, axis=1).squeeze(1) * keep.max(axis=1)


@register_model("text_classifier")
class TextClassifier(RecModel):
    """Binary sentiment (or any two-class label) from word ids [B, W] and character ids [B, W x C],
    the ``words`` and ``chars`` fields of ``paddle_edo.data.load_chnsenti``."""

    config_options = {
        "fusion": Option("gate", str, choices=FUSIONS, doc="text_classifier: how word and character vectors fuse"),
        "encoder": Option("mean", str, choices=ENCODERS, doc="text_classifier: how word vectors make a sentence"),
        "channels": Option(128, int, low=1, doc="text_classifier: filters per n-gram width (cnn), units (bigru)"),
        "word_dropout": Option(0.0, float, low=0.0, high=0.95,
                               doc="text_classifier: share of known training words treated as unknown"),
        "pretrained": {  # a user's word2vec files (text, or binary when named .bin)
            "words": Option(None, str, nullable=True, doc="vectors for the word table"),
            "chars": Option(None, str, nullable=True, doc="vectors for the character table"),
            "compose_chars": Option(False, bool, doc="start the character table from a mean composer fit to the "
                                                     "word vectors (paddle_edo.text.fit_composer)"),
        },
    }

    def __init__(self, fields: Sequence[FieldSpec], embedding: TableSpec | dict[str, Any], fusion: str = "gate",
                 hidden_units: Sequence[int] = (64,), dropout: float = 0.0, word_dropout: float = 0.0,
                 encoder: str = "mean", channels: int = 128) -> None:
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
        self.encoder = SentenceEncoder(encoder, spec.dim, channels)
        self.mlp = mlp(self.encoder.out_features, hidden_units, dropout)

    @classmethod
    def from_config(cls, fields: Sequence[FieldSpec], config: dict[str, Any], frequencies: Any = None,
                    dense_features: Sequence[str] = ()) -> "TextClassifier":
        refuse_dense_features(cls, dense_features)
        model = config["model"]
        return cls(fields, config["embedding"], model["fusion"], model["hidden_units"], model["dropout"],
                   model["word_dropout"], model["encoder"], model["channels"])

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

    def predict_texts(self, encoder: CharWordEncoder, texts: Sequence[str]) -> np.ndarray:
        """P(positive) [N] of N raw texts, encoded by ``encoder`` (the vocabularies the model was trained
        with); evaluated without dropout and without gradient, the layer's mode restored after."""
        texts = list(texts)
        if not texts:
            return np.zeros(0, dtype=np.float32)
        batch = encoder.encode_batch(texts)
        was_training = self.training
        self.eval()
        with paddle.no_grad():
            logits = self([paddle.to_tensor(batch.word_ids), paddle.to_tensor(batch.char_ids.reshape(len(texts), -1))])
        if was_training:
            self.train()
        return F.sigmoid(logits).numpy()

    def forward(self, ids: list[paddle.Tensor]) -> paddle.Tensor:
        words, chars = ids[0], ids[1]
        chars = chars.reshape([0, words.shape[1], self.max_chars_per_word])   # 0: keep the batch dimension
        vectors = self.embedding(words, chars)                                 # [B, W, D]
        return self.mlp(self.encoder(vectors, words != 0)).squeeze(-1)
