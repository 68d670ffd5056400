"""ShardedCollection: an EmbeddingCollection whose large tables are row-sharded over the ranks.

Each rank holds, for every sharded table, the rows of its share (``nn.shards.RowShare``: id g lives on rank
g % N at local row g // N), trained there by the table's own optimizer: Paddle's (lazy Adam, Adagrad, SGD)
from its sparse gradient, a TableOptimizer's rule by the RowTrainer, a low-precision table's own row
update, a cached table's bound optimizer. A step of lookups:

1. each rank checks its ids (out of range: refused naming the table and the id, before any exchange) and
   keeps each table's distinct ids, the padding id dropped, so a row crosses the network once per rank;
2. it sends each owner the local rows it wants, all tables in one message (their counts first);
3. each owner looks the rows up through its share's own layer, an ordinary autograd lookup;
4. the rows go back (the ``_RowExchange`` PyLayer), and each rank gathers, zeroes padding and pools bags.

In the backward pass the same PyLayer sends each row's summed gradient back to its owner, where Paddle's
autograd carries it into the share's lookup: no dense gradient and no all-reduce of a table. Tables too
small to shard (or of a type whose rows are not ids: hash, QR, mixed-dimension, clustered) are whole on every
rank, looked up locally, their dense gradients all-reduced with the dense layers (``gradients.py``)."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import paddle

from ...compat import dynamic_graph_under_sot
from ...errors import EdoIndexError, EdoRuntimeError, EdoValueError
from ...nn.base import EmbeddingBase
from ...nn.collection import EmbeddingCollection
from ...nn.shards import RowShare
from .exchange import Exchange, joined_flat


class ShardedCollection(EmbeddingCollection):
    """The tables of ``collection`` (the same layers, names and pooling), its sharded ones (those with a
    ``row_share``) looked up across the ranks through ``exchange``. ``forward`` takes and gives what
    ``EmbeddingCollection.forward`` does: bags as padded ids ``[batch, L]`` or as flat ids with offsets. Every
    rank must call it the same number of times, as a collective, and in training mode with gradients on run
    the backward pass of what it returned (which sends the row gradients to their owners)."""

    def __init__(self, tables: Mapping[str, EmbeddingBase], pooling: Mapping[str, str], exchange: Exchange, *,
                 name: str | None = None) -> None:
        super().__init__(tables, pooling, name=name)
        self.exchange = exchange
        for key, table in tables.items():
            share = getattr(table, "row_share", None)
            if share is not None:
                if share.world_size != exchange.world_size or share.rank != exchange.rank:
                    raise EdoValueError(f"{type(self).__name__}: table {key!r} is rank {share.rank} of "
                                        f"{share.world_size}'s share, the exchange rank {exchange.rank} of "
                                        f"{exchange.world_size}")
                self.padding[key] = share.padding_idx

    @classmethod
    def from_collection(cls, collection: EmbeddingCollection, exchange: Exchange) -> "ShardedCollection":
        return cls(collection.tables(), collection.pooling, exchange)

    def shares(self) -> dict[str, RowShare]:
        """The sharded tables' shares, by table name."""
        return {key: table.row_share for key, table in self.items() if getattr(table, "row_share", None) is not None}

    def fused_tables(self) -> list[str]:
        """None: a share is looked up by its own layer, for rows other ranks ask for."""
        return []

    @dynamic_graph_under_sot
    def forward(self, ids: Sequence[paddle.Tensor] | Mapping[str, paddle.Tensor],
                offsets: Sequence[paddle.Tensor | None] | Mapping[str, paddle.Tensor] | None = None,
                concat: bool = True) -> paddle.Tensor | list[paddle.Tensor]:
        """Vectors of every table's ids: ``[batch, width]`` with ``concat``, else one tensor per table. Under
        ``paddle.jit.to_static``'s default mode (SOT) it runs in dynamic graph, a graph break; a whole-graph
        program is refused (EdoRuntimeError): the exchange moves values a program does not have."""
        if not paddle.in_dynamic_mode():
            raise EdoRuntimeError(f"{type(self).__name__} {self.full_name()}: its tables exchange rows between ranks "
                                  f"in dynamic graph; use paddle.jit.to_static's default mode (SOT), not "
                                  f"full_graph=True")
        ids = self._by_table(ids, "ids")
        offsets = self._by_table(offsets, "offsets") if offsets is not None else [None] * len(self.names)
        batch = self._batch_size(ids, offsets)
        shares = self.shares()
        sharded = [key for key in self.names if key in shares]
        gathered = self._sharded_lookup(sharded, [ids[self.names.index(key)] for key in sharded],
                                        [offsets[self.names.index(key)] for key in sharded], shares, batch) \
            if sharded else {}
        outputs = []
        for index, key in enumerate(self.names):
            if key in gathered:
                vectors = gathered[key]
            else:
                vectors = self._table_lookup(key, ids[index], offsets[index]).reshape(
                    [batch, self._width(index, ids[index], offsets[index])])
            outputs.append(vectors)
        if concat:
            if batch == 0:
                return paddle.zeros([0, sum(int(out.shape[1]) for out in outputs)], dtype="float32")
            return outputs[0] if len(outputs) == 1 else paddle.concat(outputs, axis=1)
        return [out.reshape(self._shape(i, ids[i], offsets[i], batch)) for i, out in enumerate(outputs)]

    def _sharded_lookup(self, keys: list[str], ids: list[paddle.Tensor], offsets: list[paddle.Tensor | None],
                        shares: dict[str, RowShare], batch: int) -> dict[str, paddle.Tensor]:
        """Each sharded table's vectors [batch, width], its rows fetched from their owners."""
        plan = _ExchangePlan(self, keys, ids, offsets, shares, batch)
        requested = plan.request()  # ids each rank asks of this one, by table
        owned = [self[key](paddle.to_tensor(local)) if local.size else
                 paddle.zeros([0, self[key].embedding_dim], dtype="float32") for key, local in zip(keys, requested)]
        if paddle.is_grad_enabled() and self.training:  # the same on every rank: all or none send gradients back
            anchor = paddle.zeros([1], dtype="float32")
            anchor.stop_gradient = False
            trained = [rows for rows in owned if not rows.stop_gradient]
            plan.owned = owned
            flat = _RowExchange.apply(anchor, *trained, plan=plan)
        else:
            with paddle.no_grad():
                flat = plan.send_rows(owned)
        return plan.vectors(flat)


class _ExchangePlan:
    """One step's bookkeeping: each table's distinct ids, who owns them, how many each rank asks of each."""

    def __init__(self, collection: ShardedCollection, keys: list[str], ids: list[paddle.Tensor],
                 offsets: list[paddle.Tensor | None], shares: dict[str, RowShare], batch: int) -> None:
        self.collection, self.keys, self.batch = collection, keys, batch
        self.bags = [None if o is None else _bag_of_each_id(o, int(np.prod(i.shape)), key)
                     for key, i, o in zip(keys, ids, offsets)]  # given offsets: each id's bag
        self.exchange = collection.exchange
        world = self.exchange.world_size
        self.dims = [collection[key].embedding_dim for key in keys]
        self.shapes, self.inverse, self.valid, self.orders = [], [], [], []
        counts = np.zeros([world, len(keys)], dtype=np.int64)   # [destination, table]: ids asked of each owner
        self.asked: list[list[np.ndarray]] = [[] for _ in range(world)]
        for t, (key, table_ids) in enumerate(zip(keys, ids)):
            share = shares[key]
            values = table_ids.numpy().astype(np.int64, copy=False).reshape(-1)
            if values.size:
                low, high = int(values.min()), int(values.max())
                if low < 0 or high >= share.rows:
                    raise EdoIndexError(f"{collection.full_name()} table '{key}': id {low if low < 0 else high} is out "
                                        f"of range [0, {share.rows})")
            self.shapes.append(list(table_ids.shape))
            valid = values != share.padding_idx if share.padding_idx is not None else np.ones(values.shape, bool)
            distinct, inverse = np.unique(values[valid], return_inverse=True)
            owners = distinct % world
            order = np.argsort(owners, kind="stable")            # distinct ids grouped by owner
            self.orders.append(order)
            full = np.full(values.shape, distinct.size, dtype=np.int64)  # padding -> a zero row past the end
            full[valid] = inverse
            self.inverse.append(full)
            self.valid.append(valid)
            counts[:, t] = np.bincount(owners, minlength=world)
            grouped = distinct[order] // world
            bounds = np.concatenate([[0], np.cumsum(counts[:, t])])
            for d in range(world):
                self.asked[d].append(grouped[bounds[d]:bounds[d + 1]])
        self.counts = counts
        self.distinct = counts.sum(axis=0)                     # [table]

    def request(self) -> list[np.ndarray]:
        """Send each owner the ids wanted of it; returns the ids every rank wants of this one, per table,
        sources in rank order."""
        world, tables = self.exchange.world_size, len(self.keys)
        counts = self.exchange.exchange([paddle.to_tensor(self.counts[d]) for d in range(world)], [tables] * world)
        self.asked_of_me = np.stack([c.numpy() for c in counts])   # [source, table]
        parts = [paddle.to_tensor(np.concatenate(self.asked[d]).astype(np.int64)) for d in range(world)]
        received = self.exchange.exchange(parts, self.asked_of_me.sum(axis=1).tolist())
        by_table = [[] for _ in range(tables)]
        for source, message in enumerate(received):
            cuts = np.cumsum(self.asked_of_me[source])[:-1]
            for t, part in enumerate(np.split(message.numpy(), cuts)):
                by_table[t].append(part)
        return [np.concatenate(parts) for parts in by_table]

    def send_rows(self, owned: list[paddle.Tensor]) -> paddle.Tensor:
        """Return the owned rows to whoever asked; returns this rank's distinct rows of every table, flat,
        each table's in its distinct-id order, and one zero at the end."""
        pieces = self._swap(owned, self.asked_of_me, self.counts)
        tables = [_ungroup(_cat(parts, self.dims[t]), self.orders[t]).reshape([-1]) for t, parts in enumerate(pieces)]
        return joined_flat([*tables, paddle.zeros([1], dtype="float32")])

    def send_gradients(self, flat_grad: paddle.Tensor) -> list[paddle.Tensor]:
        """The backward of ``send_rows``: each distinct row's gradient back to its owner; returns the
        gradient of every owned rows tensor."""
        per_table = _cut(flat_grad[:-1], self.distinct * self.dims)
        grouped = [paddle.gather(g.reshape([-1, dim]), paddle.to_tensor(order)) if order.size else g.reshape([-1, dim])
                   for g, dim, order in zip(per_table, self.dims, self.orders)]
        pieces = self._swap(grouped, self.counts, self.asked_of_me)
        return [_cat(parts, self.dims[t]) for t, parts in enumerate(pieces)]

    def _swap(self, tables: list[paddle.Tensor], send: np.ndarray, receive: np.ndarray) -> list[list[paddle.Tensor]]:
        """Each table's rows ([n, dim], grouped by rank) sent to the ranks, ``send[r, t]`` rows of table t
        to rank r, all tables in one message; returns, per table, the rows each rank sent here
        (``receive[r, t]`` of them)."""
        world = self.exchange.world_size
        splits = [_cut(rows, send[:, t]) for t, rows in enumerate(tables)]
        parts = [joined_flat([splits[t][r] for t in range(len(self.keys))]) for r in range(world)]
        received = self.exchange.exchange(parts, [int((receive[r] * self.dims).sum()) for r in range(world)])
        pieces = [[] for _ in self.keys]
        for r, message in enumerate(received):
            for t, part in enumerate(_cut(message, receive[r] * self.dims)):
                pieces[t].append(part.reshape([-1, self.dims[t]]))
        return pieces

    def vectors(self, flat: paddle.Tensor) -> dict[str, paddle.Tensor]:
        """Each table's vectors [batch, width] from its distinct rows: gathered, padding zero, bags pooled."""
        parts = _cut(flat[:-1], self.distinct * self.dims)
        tail = flat[-1:]  # zero; in every output, so that every rank's backward reaches the exchange
        out = {}
        for t, key in enumerate(self.keys):
            dim, shape = self.dims[t], self.shapes[t]
            rows = paddle.concat([parts[t].reshape([-1, dim]), paddle.zeros([1, dim], dtype="float32")])
            batch = shape[0] if shape else 1
            mode = self.collection.pooling[key]
            if self.inverse[t].size == 0:  # an empty slice (evaluation's last batch; training slices never are)
                width = dim if mode != "none" else dim * int(np.prod(shape[1:]))
                out[key] = paddle.zeros([self.batch if self.bags[t] is not None else batch, width], dtype="float32")
                continue
            vectors = paddle.gather(rows, paddle.to_tensor(self.inverse[t])) + tail     # [n, dim]
            if self.bags[t] is not None:  # flat ids with offsets: each id's row added into its bag
                bags = paddle.to_tensor(self.bags[t])
                zeros = paddle.zeros([self.batch, dim], dtype="float32")
                zeros.stop_gradient = False  # Paddle 2.6.2's index_add backward fails on a constant input
                summed = zeros.index_add(bags, 0, vectors)
                if mode == "mean":
                    kept = np.bincount(self.bags[t][self.valid[t]], minlength=self.batch).astype(np.float32)
                    summed = summed / paddle.to_tensor(np.maximum(kept, 1.0)).reshape([self.batch, 1])
                out[key] = summed
                continue
            if mode == "none":
                out[key] = vectors.reshape([batch, dim * int(np.prod(shape[1:]))])
                continue
            length = shape[1]
            summed = vectors.reshape([batch, length, dim]).sum(axis=1)
            if mode == "mean":
                kept = self.valid[t].reshape([batch, length]).sum(axis=1).astype(np.float32)
                summed = summed / paddle.to_tensor(np.maximum(kept, 1.0)).reshape([batch, 1])
            out[key] = summed
        return out


def _bag_of_each_id(offsets: paddle.Tensor, count: int, key: str) -> np.ndarray:
    """The bag of each of ``count`` flat ids, given the bags' starts (``offsets`` [batch], from 0, not
    decreasing, within the ids); EdoValueError naming the table else."""
    starts = offsets.numpy().astype(np.int64).reshape(-1)
    if starts.size and (starts[0] != 0 or (np.diff(starts) < 0).any() or starts[-1] > count):
        raise EdoValueError(f"table {key!r}: offsets must start at 0, never decrease and stay within the {count} ids, "
                            f"got {starts.tolist()[:8]}")
    return np.searchsorted(starts, np.arange(count), side="right") - 1


def _cat(parts: list[paddle.Tensor], dim: int) -> paddle.Tensor:
    """Rows [n, dim] joined, empty parts included (Paddle's concat refuses to join none)."""
    kept = [p for p in parts if int(p.shape[0])]
    if not kept:
        return paddle.zeros([0, dim], dtype="float32")
    return kept[0] if len(kept) == 1 else paddle.concat(kept)


def _cut(tensor: paddle.Tensor, sizes: np.ndarray) -> list[paddle.Tensor]:
    """``tensor`` cut along its first axis into pieces of ``sizes`` (zeros allowed)."""
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64).tolist()
    return [tensor[bounds[i]:bounds[i + 1]] for i in range(len(sizes))]


def _ungroup(grouped: paddle.Tensor, order: np.ndarray) -> paddle.Tensor:
    """Rows grouped by owner (``grouped[i]`` is distinct id ``order[i]``'s) back in distinct-id order."""
    if order.size == 0:
        return grouped
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size)
    return paddle.gather(grouped, paddle.to_tensor(inverse))


class _RowExchange(paddle.autograd.PyLayer):
    """``send_rows`` with a backward that sends the rows' gradients to their owners. ``anchor``, a leaf
    that wants a gradient, makes every rank run the backward (and so its half of the exchange) even when
    it owns no row wanted this step."""

    @staticmethod
    def forward(ctx, anchor: paddle.Tensor, *trained: paddle.Tensor, plan: _ExchangePlan) -> paddle.Tensor:
        ctx.plan = plan
        ctx.trained = [not rows.stop_gradient for rows in plan.owned]  # the tensors ``trained`` holds, in order
        owned, plan.owned = plan.owned, None
        return plan.send_rows(owned)

    @staticmethod
    def backward(ctx, grad: paddle.Tensor):
        with paddle.no_grad():
            grads = ctx.plan.send_gradients(grad)
        return (paddle.zeros([1], dtype="float32"), *[g for g, wanted in zip(grads, ctx.trained) if wanted])
