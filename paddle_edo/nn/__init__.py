"""Embedding layers; each is a paddle.nn.Layer registered under a config name."""
from .base import EmbeddingBase
from .registry import EMBEDDINGS, build_embedding, register_embedding
from .dense import DenseEmbedding
from .quantized import QuantizedEmbedding

__all__ = ["EmbeddingBase", "DenseEmbedding", "QuantizedEmbedding", "EMBEDDINGS", "build_embedding", "register_embedding"]
