"""Embedding layers; each is a paddle.nn.Layer registered under a config name."""
from .base import EmbeddingBase
from .registry import EMBEDDINGS, build_embedding, register_embedding
from .dense import DenseEmbedding
from .quantized import QuantizedEmbedding
from .shared import HashEmbedding, QREmbedding
from .mixed_dim import MixedDimEmbedding
from .clustered import ClusteredEmbedding
from .multitask import MultiTaskEmbedding
from .cached import CachedEmbedding, bind_optimizer, uncache
from .char_word import CharWordEmbedding
from .bag import EmbeddingBag, pooled_lookup
from .ps_table import PSEmbedding

__all__ = [
    "CachedEmbedding", "CharWordEmbedding", "ClusteredEmbedding", "EmbeddingBag", "EmbeddingBase",
    "DenseEmbedding", "HashEmbedding", "MixedDimEmbedding", "MultiTaskEmbedding", "PSEmbedding", "QREmbedding",
    "QuantizedEmbedding", "EMBEDDINGS", "build_embedding", "bind_optimizer", "pooled_lookup", "register_embedding",
    "uncache"
]
