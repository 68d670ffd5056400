"""Sharded embedding tables over Paddle's collective communication (``distributed.mode: sharded``):
each rank holds a share of every large table's rows, or whole tables (``nn.shards``), looks them up across
the ranks through
an exchange built from what the backend has (``exchange.py``), trains its rows with the tables' own
optimizers (``collection.py``), sums the replicated parameters' gradients (``gradients.py``), and writes
its share of a checkpoint that any number of ranks can resume (``checkpoint.py``)."""
from __future__ import annotations

import paddle

from ...nn.collection import EmbeddingCollection
from ...nn.swap import swap_sublayers
from ...schema import ConfigError
from .collection import ShardedCollection
from .exchange import EXCHANGES, Exchange, choose_exchange
from .gradients import GradientSum


def placed(layer: paddle.nn.Layer) -> bool:
    """Whether a layer is a table placed over the ranks: a share of its rows, or whole on one rank."""
    return getattr(layer, "row_share", None) is not None or getattr(layer, "table_share", None) is not None


def shard_collections(model: paddle.nn.Layer, exchange: Exchange) -> dict[str, ShardedCollection]:
    """Turn every collection of ``model`` that holds shares of tables into a ShardedCollection (the same
    tables, under the same names); ConfigError for a shared table outside any collection."""
    def replace(name: str, layer: paddle.nn.Layer) -> paddle.nn.Layer | None:
        if isinstance(layer, EmbeddingCollection) and not isinstance(layer, ShardedCollection) and \
                any(placed(table) for table in layer.values()):
            return ShardedCollection.from_collection(layer, exchange)
        return None

    swap_sublayers(model, replace)
    found = {name: layer for name, layer in model.named_sublayers() if isinstance(layer, ShardedCollection)}
    covered = {id(table) for collection in found.values() for table in collection.values()}
    stray = [name for name, layer in model.named_sublayers() if placed(layer) and id(layer) not in covered]
    if stray:
        raise ConfigError(f"distributed.mode = 'sharded': table {stray[0]!r} is looked up outside an embedding "
                          f"collection; sharded tables need embedding.collection = true (a model whose tables are "
                          f"one EmbeddingCollection, as deepfm's)")
    return found


def sharded_parameters(model: paddle.nn.Layer) -> set[int]:
    """ids of the parameters of the model's placed tables (trained by their owners, never all-reduced)."""
    return {id(p) for _, layer in model.named_sublayers() if placed(layer) for p in layer.parameters()}


__all__ = ["EXCHANGES", "Exchange", "GradientSum", "ShardedCollection", "choose_exchange", "placed",
           "shard_collections", "sharded_parameters"]
