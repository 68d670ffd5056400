"""ShardedCollection: an EmbeddingCollection whose large tables are row-sharded over the ranks.

Each rank holds, for every sharded table, the rows of its share (``nn.shards.RowShare``: id g lives on rank
g % N at local row g // N), trained there by the table's own optimizer: Paddle's (lazy Adam, Adagrad, SGD)
from its sparse gradient, a TableOptimizer's rule by the RowTrainer, a low-precision table's own row
update, a cached table's bound optimizer. A step of lookups:

1. each rank checks its ids (out of range: refused naming the table and the id, before any exchange) and
   keeps each table's distinct ids, the padding id dropped, so a row crosses the network once per rank;
2. it sends each owner the local rows it wants, all tables in one message (their counts first);
3. each owner looks the rows up through its share's own layer, an ordinary autograd lookup;
4. the rows go back (the ``_Exchanged`` PyLayer), and each rank gathers, zeroes padding and pools bags;
   where that sends fewer bytes (``distributed.bag_pooling``), owners pool the ids they hold of each bag
   and send back one partial sum a bag instead, which the asking rank adds up.

In the backward pass the same PyLayer sends each row's summed gradient back to its owner, where Paddle's
autograd carries it into the share's lookup: no dense gradient and no all-reduce of a table. An fp32 share
that a RowTrainer trains (the engine's way with a fused rule) skips autograd: its rows are answered as
plain values and the returning gradients go straight into the trainer's rule, one native pass over the
answered rows, as FBGEMM's TBE fuses its optimizer into the backward (``train_owned``; with one gather for
the vectors of unpooled tables of one width, a 2-rank step of 4 tables 18.5 -> 15.5 ms: docs/benchmarks.md).

A table placed whole on one rank (``table_share``: any type, among them hash, QR, mixed-dimension and
clustered tables, whose rows are not ids) gets its ids sent to its owner (distinct ones, or bags as they
are), which looks them up and pools them through the table's own layer and sends back the vectors
(``_TablePlan``); their gradients return the same way, through the same PyLayer. Tables too small to place
are whole on every rank, looked up locally, their dense gradients all-reduced with the dense layers
(``gradients.py``)."""
from __future__ import annotations

import contextlib
from typing import Mapping, Sequence

import numpy as np
import paddle

from ...compat import dynamic_graph_under_sot
from ...errors import EdoIndexError, EdoRuntimeError, EdoValueError
from ...kernels import fused_ops
from ...nn.bag import pool_rows, pooled_lookup
from ...nn.base import EmbeddingBase
from ...nn.collection import EmbeddingCollection
from ...nn.dense import DenseEmbedding
from ...nn.shards import RowShare, place_of
from .exchange import Exchange, joined_flat

BAG_POOLINGS = ("auto", "after_exchange", "at_owner")  # where the bags of tables by rows pool (see _RowPlan)


class ShardedCollection(EmbeddingCollection):
    """The tables of ``collection`` (the same layers, names and pooling), its placed ones (those with a
    ``row_share`` or a ``table_share``) looked up across the ranks through ``exchange``. ``forward`` takes and
    gives what ``EmbeddingCollection.forward`` does: bags as padded ids ``[batch, L]`` or as flat ids with
    offsets. Every rank must call it the same number of times, as a collective, and in training mode with
    gradients on run the backward pass of what it returned (which sends the gradients to their owners)."""

    def __init__(self, tables: Mapping[str, EmbeddingBase], pooling: Mapping[str, str], exchange: Exchange, *,
                 name: str | None = None) -> None:
        super().__init__(tables, pooling, name=name)
        self.exchange = exchange
        self.train_owned_rows = True
        self.bag_pooling = "auto"  # where the bags of tables by rows pool (BAG_POOLINGS)
        for key, table in tables.items():
            share = getattr(table, "row_share", None) or getattr(table, "table_share", None)
            if share is not None:
                if share.world_size != exchange.world_size or share.rank != exchange.rank:
                    raise EdoValueError(f"{type(self).__name__}: table {key!r} is rank {share.rank} of "
                                        f"{share.world_size}'s share, the exchange rank {exchange.rank} of "
                                        f"{exchange.world_size}")
            if getattr(table, "row_share", None) is not None:
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

    def trains_here(self, key: str) -> bool:
        """Whether table ``key``'s share takes its rows' gradients from the exchange straight into its
        RowTrainer's rule (``train_owned``): an fp32 share on the CPU that a RowTrainer trains, unless
        ``train_owned_rows`` is off (monitors read the shares' own gradients, which this skips)."""
        table = self[key]
        return (self.train_owned_rows and type(table) is DenseEmbedding and fused_ops() is not None
                and getattr(table, "row_trainer", None) is not None and table.weight.place.is_cpu_place())

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
        by_rows = [key for key in self.names if key in shares]
        by_table = [key for key in self.names if getattr(self[key], "table_share", None) is not None]
        gathered = self._exchanged_lookup(by_rows, by_table, ids, offsets, shares, batch) \
            if by_rows or by_table else {}
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

    def _exchanged_lookup(self, by_rows: list[str], by_table: list[str], ids: list[paddle.Tensor],
                          offsets: list[paddle.Tensor | None], shares: dict[str, RowShare], batch: int
                          ) -> dict[str, paddle.Tensor]:
        """The vectors [batch, width] of the tables placed by rows (their rows fetched from their owners) and
        of those placed whole on one rank (looked up and pooled by the owner)."""
        def given(keys: list[str], values: list) -> list:
            return [values[self.names.index(key)] for key in keys]
        plans = []
        if by_rows:
            plans.append(_RowPlan(self, by_rows, given(by_rows, ids), given(by_rows, offsets), shares, batch))
        if by_table:
            plans.append(_TablePlan(self, by_table, given(by_table, ids), given(by_table, offsets), batch))
        for plan in plans:
            plan.owned = plan.answer()  # what this rank owns of what every rank asked, by autograd lookups
        if paddle.is_grad_enabled() and self.training:  # the same on every rank: all or none send gradients back
            anchor = paddle.zeros([1], dtype="float32")
            anchor.stop_gradient = False
            trained = [values for plan in plans for values in plan.owned if not values.stop_gradient]
            flats = _Exchanged.apply(anchor, *trained, plans=plans)
            flats = [flats] if isinstance(flats, paddle.Tensor) else list(flats)
        else:
            with paddle.no_grad():
                flats = [plan.send_values(plan.owned) for plan in plans]
            for plan in plans:
                plan.owned = None
        return {key: vectors for plan, flat in zip(plans, flats) for key, vectors in plan.vectors(flat).items()}


class _RowPlan:
    """One step's bookkeeping: each table's distinct ids, who owns them, how many each rank asks of each.

    A pooled table's bags pool after the exchange (its distinct rows fetched, as unpooled tables') or at the
    owners (``at_owner``): each owner is sent the ids it holds with their bags, and answers with one partial
    sum per bag, which the asking rank adds up; the gradient of each bag goes back to every owner that added
    into it. Rows cost ``8 + 8 dim`` bytes each way and back (id, row, gradient), pooling at the owners ``16``
    a kept id (id and bag) and ``8 dim`` a bag per owner: with ``distributed.bag_pooling = auto`` each rank
    takes, table by table and step by step, the one that sends fewer bytes (long bags of ids that rarely
    repeat pool at the owners)."""

    def __init__(self, collection: ShardedCollection, keys: list[str], ids: list[paddle.Tensor],
                 offsets: list[paddle.Tensor | None], shares: dict[str, RowShare], batch: int) -> None:
        self.collection, self.keys, self.batch = collection, keys, batch
        self.starts = [None if o is None else _bag_starts(o, int(np.prod(i.shape)), key)
                       for key, i, o in zip(keys, ids, offsets)]  # given offsets: the bags' starts
        self.bags = [None if s is None else np.searchsorted(s, np.arange(int(np.prod(i.shape))), side="right") - 1
                     for s, i in zip(self.starts, ids)]  # and each id's bag
        self.exchange = collection.exchange
        world = self.exchange.world_size
        self.dims = [collection[key].embedding_dim for key in keys]
        self.shapes, self.inverse, self.valid, self.orders, self.values = [], [], [], [], []
        self.at_owner = np.zeros(len(keys), dtype=bool)          # tables whose bags pool at their owners
        self.counts = np.zeros([world, len(keys)], dtype=np.int64)  # [destination, table]: ids asked of each owner
        self.answers = np.zeros([world, len(keys)], dtype=np.int64)  # [owner, table]: rows each owner answers
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
            self.values.append(values)
            self.counts[:, t] = np.bincount(owners, minlength=world)
            if self._asks_pooled(t, values, valid):
                continue
            self.answers[:, t] = self.counts[:, t]
            grouped = distinct[order] // world
            bounds = np.concatenate([[0], np.cumsum(self.counts[:, t])])
            for d in range(world):
                self.asked[d].append(grouped[bounds[d]:bounds[d + 1]])
        self.flat_rows = self.answers.sum(axis=0)              # [table]: rows of this rank's flat answer
        self.flat_rows[self.at_owner] = batch                  # pooled: the bags' sums

    def _asks_pooled(self, t: int, values: np.ndarray, valid: np.ndarray) -> bool:
        """Whether table ``t``'s bags pool at their owners this step (``values``: its ids, flat; ``valid``:
        those not padding); if so, its request to each owner is set: the ids the owner holds, then their
        bags."""
        setting, dim, world = self.collection.bag_pooling, self.dims[t], self.exchange.world_size
        if self.collection.pooling[self.keys[t]] == "none" or setting == "after_exchange" or not self.batch:
            return False
        kept = values[valid]
        kept_owners = kept % world
        kept_counts = np.bincount(kept_owners, minlength=world)
        if setting == "auto":
            others = np.arange(world) != self.exchange.rank
            rows_bytes = int(self.counts[others, t].sum()) * (8 + 8 * dim)
            pooled_bytes = int(kept_counts[others].sum()) * 16 + int((kept_counts[others] > 0).sum()) * self.batch * 8 * dim
            if pooled_bytes >= rows_bytes:
                return False
        bag = self.bags[t] if self.bags[t] is not None else \
            np.arange(values.size) // int(np.prod(self.shapes[t][1:]))  # [batch, L] ids: bag i // L
        by_owner = np.argsort(kept_owners, kind="stable")
        grouped, kept_bags = kept[by_owner] // world, bag[valid][by_owner]
        bounds = np.concatenate([[0], np.cumsum(kept_counts)])
        for d in range(world):
            self.asked[d].append(np.concatenate([grouped[bounds[d]:bounds[d + 1]], kept_bags[bounds[d]:bounds[d + 1]]]))
        self.at_owner[t] = True
        self.counts[:, t] = kept_counts
        self.answers[:, t] = np.where(kept_counts > 0, self.batch, 0)
        return True

    def request(self) -> list[list[tuple[np.ndarray, np.ndarray | None]]]:
        """Send each owner the ids wanted of it (with their bags where they pool there); returns, per table
        and asking rank (in rank order), the local ids it wants of this one and their bags (None: it wants
        the rows)."""
        world, tables = self.exchange.world_size, len(self.keys)
        header = np.concatenate([self.counts, np.broadcast_to(self.at_owner, self.counts.shape),
                                 np.full([world, 1], self.batch)], axis=1).astype(np.int64)
        headers = self.exchange.exchange([paddle.to_tensor(header[d]) for d in range(world)], [2 * tables + 1] * world)
        headers = np.stack([h.numpy() for h in headers])           # [source, 2 tables + 1]
        self.asked_of_me = headers[:, :tables]                      # [source, table]: ids
        self.pooled_for = headers[:, tables:2 * tables].astype(bool)  # [source, table]: pooled here
        batches = headers[:, 2 * tables]
        self.answered = np.where(self.pooled_for, np.where(self.asked_of_me > 0, batches[:, None], 0),
                                 self.asked_of_me)               # [source, table]: rows this rank answers
        lengths = self.asked_of_me * (1 + self.pooled_for)
        parts = [paddle.to_tensor(np.concatenate(self.asked[d]).astype(np.int64)) for d in range(world)]
        received = self.exchange.exchange(parts, lengths.sum(axis=1).tolist())
        by_table = [[] for _ in range(tables)]
        for source, message in enumerate(received):
            cuts = np.cumsum(lengths[source])[:-1]
            for t, part in enumerate(np.split(message.numpy(), cuts)):
                n = int(self.asked_of_me[source, t])
                by_table[t].append((part[:n], part[n:]) if self.pooled_for[source, t] else (part, None))
        return by_table

    def answer(self) -> list[paddle.Tensor]:
        """The rows every rank asked of this one (or the partial sums of the bags of ranks whose bags pool
        here), per table, looked up through the share's own layer: with autograd, or, for a share its
        RowTrainer trains here (``trains_here``), as plain values whose gradients ``train_owned`` applies."""
        self.requests = self.request()
        self.requested = [paddle.to_tensor(np.concatenate([np.zeros(0, np.int64), *(ids for ids, _ in requests)]))
                          for requests in self.requests]
        self.trained_here = [self.collection.trains_here(key) for key in self.keys]
        answers = []
        for t, (key, local, dim, here) in enumerate(zip(self.keys, self.requested, self.dims, self.trained_here)):
            if not local.size:
                answers.append(paddle.zeros([0, dim], dtype="float32"))
                continue
            with paddle.no_grad() if here else contextlib.nullcontext():
                answers.append(self._pooled(t) if self.pooled_for[:, t].any() else self.collection[key](local))
        return answers

    def _pooled(self, t: int) -> paddle.Tensor:
        """Table ``t``'s answers to every asking rank, in rank order: the rows for ranks that asked for rows
        (one lookup), one partial sum per bag for ranks whose bags pool here (one bag lookup of them all, by
        the share's own pooling: the bag kernel where it serves)."""
        key, dim, requests = self.keys[t], self.dims[t], self.requests[t]
        table = self.collection[key]
        asked = [ids for ids, bags in requests if bags is None and ids.size]
        rows = _cut(table(paddle.to_tensor(np.concatenate(asked))), [ids.size for ids in asked]) if asked else []
        pooled = [(ids, bags, int(self.answered[source, t])) for source, (ids, bags) in enumerate(requests)
                  if bags is not None and ids.size]
        sums = []
        if pooled:
            shifts = np.cumsum([0] + [ids.size for ids, _, _ in pooled[:-1]])
            starts = np.concatenate([np.searchsorted(bags, np.arange(count)) + shift
                                     for (_, bags, count), shift in zip(pooled, shifts)])
            summed = pooled_lookup(table, paddle.to_tensor(np.concatenate([ids for ids, _, _ in pooled])),
                                   paddle.to_tensor(starts), mode="sum",
                                   owner=f"{self.collection.full_name()} table '{key}'")
            sums = _cut(summed, [count for _, _, count in pooled])
        answers = []
        for ids, bags in requests:
            if ids.size:
                answers.append((rows if bags is None else sums).pop(0))
        return _cat(answers, dim)

    def train_owned(self, grads: list[paddle.Tensor]) -> None:
        """Apply each share's rule (its RowTrainer's) to the rows it answered, from their gradients as the
        asking ranks sent them back (a bag's gradient to each of its ids; the kernel sums an id's gradients
        in the ranks' order): one pass over the rows, where autograd would make a sparse gradient for the
        trainer to read."""
        for t, (key, local, grad, here) in enumerate(zip(self.keys, self.requested, grads, self.trained_here)):
            if not (here and local.size):
                continue
            if self.pooled_for[:, t].any():  # each id's row of the gradient: its own, or its bag's (one gather)
                starts = np.concatenate([[0], np.cumsum(self.answered[:-1, t])])
                rows = np.concatenate([start + (np.arange(ids.size) if bags is None else bags)
                                       for (ids, bags), start in zip(self.requests[t], starts)])
                grad = paddle.gather(grad, paddle.to_tensor(rows))
            _apply_rule(self.collection[key], local, grad)

    def send_values(self, owned: list[paddle.Tensor]) -> paddle.Tensor:
        """Return the owned rows to whoever asked; returns this rank's distinct rows of every table, flat,
        each table's in its distinct-id order, and one zero at the end."""
        pieces = self._swap(owned, self.answered, self.answers)
        tables = [(_summed(parts, self.batch, self.dims[t]) if self.at_owner[t] else
                   _ungroup(_cat(parts, self.dims[t]), self.orders[t])).reshape([-1]) for t, parts in enumerate(pieces)]
        return joined_flat([*tables, paddle.zeros([1], dtype="float32")])

    def send_gradients(self, flat_grad: paddle.Tensor) -> list[paddle.Tensor]:
        """The backward of ``send_values``: each distinct row's gradient back to its owner, each bag's to every
        owner that added into it; returns the gradient of every owned answers tensor."""
        per_table = _cut(flat_grad[:-1], self.flat_rows * self.dims)
        grouped = []
        for t, (g, dim, order) in enumerate(zip(per_table, self.dims, self.orders)):
            g = g.reshape([-1, dim])
            if self.at_owner[t]:
                grouped.append(_cat([g] * int((self.answers[:, t] > 0).sum()), dim))
            else:
                grouped.append(paddle.gather(g, paddle.to_tensor(order)) if order.size else g)
        pieces = self._swap(grouped, self.answers, self.answered)
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
        if self._one_gather():
            return self._gathered(flat)
        parts = _cut(flat[:-1], self.flat_rows * self.dims)
        tail = flat[-1:]  # zero; in every output, so that every rank's backward reaches the exchange
        out = {}
        for t, key in enumerate(self.keys):
            dim, shape = self.dims[t], self.shapes[t]
            batch = shape[0] if shape else 1
            mode = self.collection.pooling[key]
            if self.inverse[t].size == 0:  # an empty slice (evaluation's last batch; training slices never are)
                width = dim if mode != "none" else dim * int(np.prod(shape[1:]))
                out[key] = paddle.zeros([self.batch if self.bags[t] is not None else batch, width], dtype="float32")
                continue
            if self.at_owner[t]:  # the owners' partial sums, added up
                out[key] = self._mean(parts[t].reshape([self.batch, dim]) + tail, t)
                continue
            rows = paddle.concat([parts[t].reshape([-1, dim]), paddle.zeros([1, dim], dtype="float32")])
            if mode != "none" and fused_ops() is not None and rows.place.is_cpu_place():
                out[key] = self._bag_kernel(rows, t) + tail
                continue
            vectors = paddle.gather(rows, paddle.to_tensor(self.inverse[t])) + tail     # [n, dim]
            if self.bags[t] is not None:  # flat ids with offsets: each id's row added into its bag
                bags = paddle.to_tensor(self.bags[t])
                zeros = paddle.zeros([self.batch, dim], dtype="float32")
                zeros.stop_gradient = False  # Paddle 2.6.2's index_add backward fails on a constant input
                out[key] = self._mean(zeros.index_add(bags, 0, vectors), t)
                continue
            if mode == "none":
                out[key] = vectors.reshape([batch, dim * int(np.prod(shape[1:]))])
                continue
            out[key] = self._mean(vectors.reshape([batch, shape[1], dim]).sum(axis=1), t)
        return out

    def _bag_kernel(self, rows: paddle.Tensor, t: int) -> paddle.Tensor:
        """Table ``t``'s bags ``[batch, dim]`` pooled from its distinct ``rows`` (and the zero row after them,
        which padding ids read) by the bag kernel, forward and back: where a gather of every id's row, its
        pooling and the gather's scatter-add backward write an ``[ids, dim]`` tensor each."""
        key, ids = self.keys[t], self.values[t]
        bounds = np.append(self.starts[t], ids.size) if self.starts[t] is not None else \
            np.arange(0, ids.size + 1, int(np.prod(self.shapes[t][1:])))
        return pool_rows(rows, paddle.to_tensor(self.inverse[t]), paddle.to_tensor(ids), paddle.to_tensor(bounds),
                         self.collection.pooling[key], self.collection.padding.get(key))

    def _mean(self, summed: paddle.Tensor, t: int) -> paddle.Tensor:
        """Bag sums ``[batch, dim]`` of table ``t`` as its pooling wants them: as they are, or over each bag's
        kept ids (at least one)."""
        if self.collection.pooling[self.keys[t]] != "mean":
            return summed
        if self.bags[t] is not None:
            kept = np.bincount(self.bags[t][self.valid[t]], minlength=self.batch)
        else:
            kept = self.valid[t].reshape([self.batch, -1]).sum(axis=1)
        return summed / paddle.to_tensor(np.maximum(kept.astype(np.float32), 1.0)).reshape([self.batch, 1])

    def _one_gather(self) -> bool:
        """Whether one gather gives every table's vectors: tables of one width, not pooled, each with ids."""
        return (len(set(self.dims)) == 1 and all(self.collection.pooling[key] == "none" for key in self.keys)
                and all(bags is None and inverse.size for bags, inverse in zip(self.bags, self.inverse)))

    def _gathered(self, flat: paddle.Tensor) -> dict[str, paddle.Tensor]:
        """``vectors`` of unpooled tables of one width by one gather of the rows of them all, example by
        example (and its backward one scatter), where a gather a table costs a cut, a join and a scatter
        each, forward and back. Padding ids read a zero row past the rows."""
        dim, batch = self.dims[0], self.shapes[0][0] if self.shapes[0] else 1
        rows = flat[:-1].reshape([-1, dim])
        total = int(self.flat_rows.sum())
        starts = np.concatenate([[0], np.cumsum(self.flat_rows)[:-1]])
        index = np.concatenate([np.where(inverse == count, total, inverse + start).reshape([batch, -1])
                                for inverse, count, start in zip(self.inverse, self.flat_rows, starts)], axis=1)
        if not all(valid.all() for valid in self.valid):
            rows = paddle.concat([rows, paddle.zeros([1, dim], dtype="float32")])
        out = paddle.gather(rows, paddle.to_tensor(index.reshape(-1))).reshape([batch, -1])
        widths = [int(np.prod(shape[1:])) * dim for shape in self.shapes]
        parts = paddle.split(out, widths, axis=1) if len(widths) > 1 else [out]
        return dict(zip(self.keys, parts))


class _TablePlan:
    """One step of the tables placed whole on one rank: each rank sends each table's ids to its owner, which
    looks them up through the table's own layer, one call per asking rank, and sends back one vector per
    row asked; their gradients go back the same way. A table without pooling sends its distinct ids (a row
    crosses the network once per rank and step, as by rows) and gathers its vectors from the answer; a
    pooled one sends its bags as it has them (``[batch, L]``, or flat with offsets), which the owner pools:
    a bag crosses the network once as ids and once as one vector, whatever its length."""

    HEADER = 3  # per table asked of an owner: ids, rows of the answer, and L of [rows, L] ids (0: flat, -1: offsets)

    def __init__(self, collection: ShardedCollection, keys: list[str], ids: list[paddle.Tensor],
                 offsets: list[paddle.Tensor | None], batch: int) -> None:
        self.collection, self.keys, self.batch = collection, keys, batch
        self.exchange = collection.exchange
        self.owners = [collection[key].table_share.owner for key in keys]
        self.dims = [collection[key].embedding_dim for key in keys]
        self.messages, self.headers, self.inverse, self.widths = [], [], [], []
        for key, table_ids, table_offsets in zip(keys, ids, offsets):
            table = collection[key]
            values = table_ids.numpy().astype(np.int64, copy=False)
            if values.size and not table.takes_any_id:
                low, high = int(values.min()), int(values.max())
                if low < 0 or high >= table.num_embeddings:
                    raise EdoIndexError(f"{collection.full_name()} table '{key}': id {low if low < 0 else high} is "
                                        f"out of range [0, {table.num_embeddings})")
            self.widths.append(collection._width(collection.names.index(key), table_ids, table_offsets))
            if collection.pooling[key] == "none":
                distinct, inverse = np.unique(values.reshape(-1), return_inverse=True)
                self.messages.append([distinct])
                self.headers.append([distinct.size, distinct.size, 0])
                self.inverse.append(inverse.reshape(-1))
            elif table_offsets is not None:
                starts = table_offsets.numpy().astype(np.int64).reshape(-1)
                self.messages.append([values.reshape(-1), starts])
                self.headers.append([values.size, starts.size, -1])
                self.inverse.append(None)
            else:
                self.messages.append([values.reshape(-1)])
                self.headers.append([values.size, values.shape[0], values.shape[1]])
                self.inverse.append(None)

    def _mine(self, rank: int) -> list[int]:
        """The indices of the tables rank ``rank`` owns."""
        return [t for t, owner in enumerate(self.owners) if owner == rank]

    def answer(self) -> list[paddle.Tensor]:
        """Send each owner the ids of its tables; returns this rank's answers to what every rank asked of
        it: per owned table, per asking rank (in rank order), its vectors ``[rows asked, dim]``."""
        world, rank = self.exchange.world_size, self.exchange.rank
        owned = self._mine(rank)
        self.answered_ids: dict[int, paddle.Tensor] = {}  # table trained here -> the ids its answers hold
        headers = self.exchange.exchange(
            [paddle.to_tensor(np.asarray([v for t in self._mine(d) for v in self.headers[t]], dtype=np.int64))
             for d in range(world)], [self.HEADER * len(owned)] * world)
        self.asked = [h.numpy().reshape([len(owned), self.HEADER]).tolist() for h in headers]  # [source][table]

        def length(header: list[int]) -> int:
            return header[0] + (header[1] if header[2] < 0 else 0)
        parts = [paddle.to_tensor(np.concatenate([np.zeros(0, np.int64), *(m for t in self._mine(d)
                                                                           for m in self.messages[t])]))
                 for d in range(world)]
        received = [message.numpy() for message in self.exchange.exchange(
            parts, [sum(length(h) for h in self.asked[source]) for source in range(world)])]
        answers = []
        for position, t in enumerate(owned):
            requests = []
            for source in range(world):
                n, rows, shape = self.asked[source][position]
                start = sum(length(h) for h in self.asked[source][:position])
                requests.append((n, rows, shape, received[source][start:start + length(self.asked[source][position])]))
            answers.extend(self._answers(t, requests))
        return answers

    def _answers(self, t: int, requests: list[tuple[int, int, int, np.ndarray]]) -> list[paddle.Tensor]:
        """Table ``t``'s answers ``[rows, dim]`` to every rank's request (ids, rows, L, message), in one call of
        the table's layer on all of them joined, as one process makes it (a layer may keep a step's lookup,
        as a low-precision table keeps its rows' gradients); per rank when their bags' lengths differ. An
        unpooled table that its RowTrainer trains here (``trains_here``) answers with plain values, and
        ``train_owned`` applies their gradients."""
        key, dim = self.keys[t], self.dims[t]
        shapes = {shape for n, rows, shape, _ in requests if n}
        if len(shapes) > 1:
            return [answer for request in requests for answer in self._answers(t, [request])]
        if not shapes:
            return [paddle.zeros([rows, dim], dtype="float32") for _, rows, _, _ in requests]
        shape = shapes.pop()
        ids = np.concatenate([message[:n] for n, _, _, message in requests])
        offsets = None
        if shape < 0:  # each rank's bag starts, moved past the ids of the ranks before it
            offsets = np.concatenate([message[n:] + total_before for (n, _, _, message), total_before in
                                      zip(requests, np.cumsum([0] + [n for n, _, _, _ in requests[:-1]]))])
        rows = [r for _, r, _, _ in requests]
        ids = ids.reshape([sum(rows), shape]) if shape > 0 else ids
        asked = paddle.to_tensor(ids)
        here = self.collection.pooling[key] == "none" and self.collection.trains_here(key)
        if here:
            self.answered_ids[t] = asked
        with paddle.no_grad() if here else contextlib.nullcontext():
            looked_up = self.collection._table_lookup(key, asked, None if offsets is None else paddle.to_tensor(offsets))
        looked_up = looked_up.reshape([sum(rows), dim])
        bounds = np.concatenate([[0], np.cumsum(rows)]).tolist()
        return [looked_up[bounds[i]:bounds[i + 1]] if rows[i] else paddle.zeros([0, dim], dtype="float32")
                for i in range(len(requests))]

    def send_values(self, owned: list[paddle.Tensor]) -> paddle.Tensor:
        """Send each asking rank its answers; returns this rank's answers of every table, flat, in table
        order, and one zero at the end."""
        world, rank = self.exchange.world_size, self.exchange.rank
        mine = self._mine(rank)
        parts = [joined_flat([owned[position * world + d] for position in range(len(mine))]
                             + [paddle.zeros([0], dtype="float32")]) for d in range(world)]
        received = self.exchange.exchange(parts, [sum(self._sizes(self._mine(d))) for d in range(world)])
        tables: list[paddle.Tensor | None] = [None] * len(self.keys)
        for owner in range(world):
            for t, part in zip(self._mine(owner), _cut(received[owner], self._sizes(self._mine(owner)))):
                tables[t] = part
        return joined_flat([*tables, paddle.zeros([1], dtype="float32")])

    def _sizes(self, tables: list[int]) -> list[int]:
        """The elements of this rank's answers of ``tables``."""
        return [self.headers[t][1] * self.dims[t] for t in tables]

    def send_gradients(self, flat_grad: paddle.Tensor) -> list[paddle.Tensor]:
        """The backward of ``send_values``: each answer's gradient back to the owner; returns the gradient
        of every owned answer."""
        world, rank = self.exchange.world_size, self.exchange.rank
        per_table = _cut(flat_grad[:-1], self._sizes(list(range(len(self.keys)))))
        parts = [joined_flat([per_table[t] for t in self._mine(d)] + [paddle.zeros([0], dtype="float32")])
                 for d in range(world)]
        mine = self._mine(rank)
        shapes = [[[self.asked[source][position][1], self.dims[t]] for position, t in enumerate(mine)]
                  for source in range(world)]
        received = self.exchange.exchange(parts, [sum(r * d for r, d in shapes[source]) for source in range(world)])
        grads = [None] * (len(mine) * world)
        for source in range(world):
            for position, part in enumerate(_cut(received[source], [r * d for r, d in shapes[source]])):
                grads[position * world + source] = part.reshape(shapes[source][position])
        return grads

    def train_owned(self, grads: list[paddle.Tensor]) -> None:
        """Apply the rule of each table trained here to the rows its answers held, from their gradients
        (``grads``: per owned table, per asking rank, as ``send_gradients`` gives them)."""
        world = self.exchange.world_size
        for position, t in enumerate(self._mine(self.exchange.rank)):
            if t in self.answered_ids:
                answered = [g for g in grads[position * world:(position + 1) * world] if int(g.shape[0])]
                _apply_rule(self.collection[self.keys[t]], self.answered_ids[t], _cat(answered, self.dims[t]))

    def vectors(self, flat: paddle.Tensor) -> dict[str, paddle.Tensor]:
        """Each table's vectors [batch, width]: gathered from the distinct rows' answers, or the bags' pooled
        ones as they came (plus the zero at the end, that every rank's backward reaches the exchange)."""
        if self.batch == 0:  # an empty slice (evaluation's last batch; training slices never are)
            return {key: paddle.zeros([0, width], dtype="float32") for key, width in zip(self.keys, self.widths)}
        parts = _cut(flat[:-1], self._sizes(list(range(len(self.keys)))))
        tail = flat[-1:]
        out = {}
        for t, key in enumerate(self.keys):
            answers = parts[t].reshape([-1, self.dims[t]])
            inverse = self.inverse[t]
            if inverse is None:
                out[key] = answers.reshape([self.batch, self.widths[t]]) + tail
            elif inverse.size == 0:
                out[key] = paddle.zeros([self.batch, self.widths[t]], dtype="float32")
            else:
                gathered = paddle.gather(answers, paddle.to_tensor(inverse))
                out[key] = gathered.reshape([self.batch, self.widths[t]]) + tail
        return out


def _apply_rule(table: EmbeddingBase, ids: paddle.Tensor, grad: paddle.Tensor) -> None:
    """The table's RowTrainer's rule applied to its rows ``ids`` ([n], repeats summed in order) given their
    gradients ``grad`` ([n, dim])."""
    trainer, name = table.row_trainer
    padding = -1 if table.padding_idx is None else int(table.padding_idx)
    trainer.states[name].update([table.weight], [ids], [ids], grad, [1], [0], [padding], int(ids.shape[0]),
                                [place_of(table)])


def _bag_starts(offsets: paddle.Tensor, count: int, key: str) -> np.ndarray:
    """The bags' starts (``offsets`` [batch]) over ``count`` flat ids, int64, checked: from 0, not
    decreasing, within the ids; EdoValueError naming the table else."""
    starts = offsets.numpy().astype(np.int64).reshape(-1)
    if starts.size and (starts[0] != 0 or (np.diff(starts) < 0).any() or starts[-1] > count):
        raise EdoValueError(f"table {key!r}: offsets must start at 0, never decrease and stay within the {count} ids, "
                            f"got {starts.tolist()[:8]}")
    return starts


def _summed(parts: list[paddle.Tensor], batch: int, dim: int) -> paddle.Tensor:
    """Partial bag sums ``[batch, dim]`` from the owners (in rank order) added up; zeros where none came."""
    kept = [p for p in parts if int(p.shape[0])]
    return paddle.add_n(kept) if kept else paddle.zeros([batch, dim], dtype="float32")


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


class _Exchanged(paddle.autograd.PyLayer):
    """Each plan's ``send_values`` (one flat tensor of values per plan, in order), with a backward that runs
    each plan's ``send_gradients`` in the same order on every rank. ``anchor``, a leaf that wants a
    gradient, makes every rank run the backward (and so its half of the exchanges) even when it owns
    nothing wanted this step. ``trained``: the plans' owned tensors that want gradients, in order."""

    @staticmethod
    def forward(ctx, anchor: paddle.Tensor, *trained: paddle.Tensor, plans: list) -> paddle.Tensor:
        ctx.plans = plans
        ctx.trained = [[not values.stop_gradient for values in plan.owned] for plan in plans]
        flats = []
        for plan in plans:
            owned, plan.owned = plan.owned, None
            flats.append(plan.send_values(owned))
        return flats[0] if len(flats) == 1 else tuple(flats)

    @staticmethod
    def backward(ctx, *grads: paddle.Tensor):
        result = [paddle.zeros([1], dtype="float32")]
        with paddle.no_grad():
            for plan, grad, wanted in zip(ctx.plans, grads, ctx.trained):
                owned = plan.send_gradients(grad)
                plan.train_owned(owned)
                result.extend(g for g, keep in zip(owned, wanted) if keep)
        return tuple(result)
