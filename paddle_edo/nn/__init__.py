"""Embedding layers (each a paddle.nn.Layer registered under a name; ``embedding.type`` picks the field
tables among them) and the model conversions that swap them."""
from .base import EmbeddingBase
from .registry import EMBEDDINGS, TableSpec, build_embedding, field_tables, register_embedding
from .dense import DenseEmbedding
from .quantized import QuantizedEmbedding
from .shared import HashEmbedding, QREmbedding
from .mixed_dim import MixedDimEmbedding
from .clustered import ClusteredEmbedding
from .multitask import MultiTaskEmbedding
from .cached import CachedEmbedding, bind_optimizer, load_model_with_caches, uncache
from .char_word import CharWordEmbedding
from .bag import EmbeddingBag, pooled_lookup
from .collection import EmbeddingCollection
from .row_trainer import RowTrainer, bind_row_trainer
from .ps_table import PSEmbedding
from .convert import dequantize_model, quantize, row_updated_tables
from .swap import swap_sublayers

__all__ = [
    "CachedEmbedding", "CharWordEmbedding", "ClusteredEmbedding", "EmbeddingBag", "EmbeddingBase",
    "DenseEmbedding", "EmbeddingCollection", "HashEmbedding", "MixedDimEmbedding", "MultiTaskEmbedding", "PSEmbedding", "QREmbedding",
    "QuantizedEmbedding", "RowTrainer", "EMBEDDINGS", "TableSpec", "build_embedding", "bind_optimizer", "bind_row_trainer",
    "dequantize_model",
    "field_tables", "load_model_with_caches", "pooled_lookup", "quantize", "register_embedding", "row_updated_tables", "swap_sublayers", "uncache"
]
