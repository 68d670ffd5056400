"""Embedding layers; each is a paddle.nn.Layer registered under a config name."""
from .base import EmbeddingBase
from .registry import EMBEDDINGS, build_embedding, register_embedding
from .dense import DenseEmbedding
from .quantized import QuantizedEmbedding
from .shared import HashEmbedding, QREmbedding
from .mixed_dim import MixedDimEmbedding

__all__ = ["EmbeddingBase", "DenseEmbedding", "HashEmbedding", "MixedDimEmbedding", "QREmbedding", "QuantizedEmbedding", "EMBEDDINGS", "build_embedding", "register_embedding"]
