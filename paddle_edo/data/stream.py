"""Splits read from files as they are trained on: encoded on a reader thread, mixed in a bounded
shuffle buffer, sharded across ranks; memory stays bounded whatever the files' size."""
from __future__ import annotations

import contextlib
import queue
import threading
from pathlib import Path
from typing import Any, Iterator, TypeVar

import numpy as np

from ..errors import DataError
from .ctr import CTRTable, FieldSpec
from .tabular import SPLITS, DataPlan, TabularSource

PREFETCH_CHUNKS = 8  # items a reader thread may run ahead of their use
T = TypeVar("T")


def concat_chunks(chunks: list[dict[str, np.ndarray]], keys: list[str]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([c[k] for c in chunks]) for k in keys}


class StreamedSplit:
    """One split of a ``DataPlan``'s files (``train``, ``valid`` or ``test``), read afresh on every pass.

    Rank ``rank`` of ``world_size`` keeps every world_size-th row of the split and stops at the same
    count as the others (collective steps need every rank)."""

    def __init__(self, plan: DataPlan, split: str, shuffle_buffer: int = 200_000, rank: int = 0,
                 world_size: int = 1) -> None:
        self.plan, self.split, self.code = plan, split, SPLITS.index(split)
        self.shuffle_buffer, self.rank, self.world_size = shuffle_buffer, rank, world_size

    @property
    def fields(self) -> list[FieldSpec]:
        return self.plan.fields

    @property
    def dense_features(self) -> list[str]:
        return self.plan.dense_features

    def __len__(self) -> int:
        return self.plan.rows[self.split] // self.world_size

    def shard(self, rank: int, world_size: int) -> "StreamedSplit":
        return StreamedSplit(self.plan, self.split, self.shuffle_buffer, rank, world_size)

    def chunks(self) -> Iterator[dict[str, np.ndarray]]:
        """The split's rows (this rank's share) in file order, encoded, one chunk per record batch."""
        bad = self.plan.source.new_bad_rows()
        seen, limit = 0, len(self)
        source = self.plan.source
        for file_index, first_row, batch in prefetched(source.batches(bad)):  # parsing overlaps encoding
            # this split's rows first (their split follows from their place), then only they are parsed
            codes = source.split_codes(file_index, first_row, batch.num_rows)
            rows = np.flatnonzero(codes == self.code)
            if not len(rows):
                continue
            parsed = self.plan.parse(file_index, first_row, batch.take(rows), bad, rows, codes[rows])
            mine = np.arange(parsed.batch.num_rows)
            if self.world_size > 1:
                position = seen + mine
                seen += len(mine)
                mine = mine[(position % self.world_size == self.rank) & (position < limit * self.world_size)]
                if not len(mine):
                    continue
                parsed = parsed.take(mine)
            yield self.plan.encode(parsed)

    def iter_batches(self, batch_size: int, shuffle: bool, seed: int, epoch: int, skip_batches: int = 0
                     ) -> Iterator[dict[str, np.ndarray]]:
        """Batches of ``batch_size`` rows (the last may be smaller). Shuffled: rows pass through a buffer
        of ``shuffle_buffer`` rows from which batches are drawn at random; the order depends only on
        (seed, epoch)."""
        rng = np.random.default_rng([seed, epoch, self.rank])
        batches = _rebatch(prefetched(self.chunks()), batch_size, self.shuffle_buffer if shuffle else 0, rng)
        for number, batch in enumerate(batches):
            if number >= skip_batches:
                yield batch

    def head(self, rows: int) -> CTRTable:
        """The first ``rows`` rows of the split, in memory."""
        taken, count = [], 0
        for chunk in self.chunks():
            taken.append(chunk)
            count += len(chunk["label"])
            if count >= rows:
                break
        return to_table(self.plan, taken).head(rows)


def to_table(plan: DataPlan, chunks: list[dict[str, np.ndarray]]) -> CTRTable:
    """Encoded chunks as one in-memory table."""
    keys = [f.name for f in plan.fields] + ["label"] + (["dense"] if plan.dense_features else [])
    if not chunks:
        chunks = [{f.name: np.zeros((0, f.max_len) if f.multi_valued else 0, np.int64) for f in plan.fields}
                  | {"label": np.zeros(0, np.float32), "dense": np.zeros((0, len(plan.dense_features)), np.float32)}]
    arrays = concat_chunks(chunks, keys)
    return CTRTable(plan.fields, {f.name: arrays[f.name] for f in plan.fields}, arrays["label"],
                    dense=arrays.get("dense"), dense_features=list(plan.dense_features))


def load_tables(plan: DataPlan) -> dict[str, CTRTable]:
    """Every split (``train``, ``valid``, ``test``) of a plan's files in memory as a ``CTRTable``, in one
    pass over the files; DataError names the file, row and column of a bad value."""
    parts: dict[str, list] = {split: [] for split in SPLITS}
    bad = plan.source.new_bad_rows()
    with contextlib.closing(plan.source.batches(bad)) as batches:
        for file_index, first_row, batch in batches:
            parsed = plan.parse(file_index, first_row, batch, bad)
            encoded = plan.encode(parsed)
            for code, split in enumerate(SPLITS):
                rows = np.flatnonzero(parsed.splits == code)
                if len(rows):
                    parts[split].append({k: v[rows] for k, v in encoded.items()})
    return {split: to_table(plan, chunks) for split, chunks in parts.items()}


def load_rows(data_config: dict[str, Any], state_dir: Path, path: str | Path) -> tuple[CTRTable, bool]:
    """Every row of other files in the run's layout (rows to score), mapped by the run's saved plan, as
    training mapped them; and whether the files have labels."""
    source = TabularSource.from_config(data_config, str(path))
    plan = DataPlan.load(source, state_dir, recount=False)
    if plan is None:
        raise DataError(f"no data plan in {state_dir}: tools/train.py writes it when it trains on "
                        f"data.name {data_config['name']!r}")
    bad = source.new_bad_rows()
    with contextlib.closing(source.batches(bad)) as batches:
        chunks = [plan.encode(plan.parse(file_index, first_row, batch, bad))
                  for file_index, first_row, batch in batches]
    return to_table(plan, chunks), source.label is not None


def prefetched(items: Iterator[T]) -> Iterator[T]:
    """The items (record batches, encoded chunks), made on a thread ahead of their use (pyarrow and numpy
    release the GIL); an error on the thread is raised where its item would have come. When the consumer
    stops early, the thread closes ``items`` (their files' readers) before it ends."""
    ready: queue.Queue = queue.Queue(maxsize=PREFETCH_CHUNKS)
    stop = threading.Event()
    done = object()

    def offer(item: Any) -> bool:
        """Queue an item unless the consumer has gone; False when it has."""
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for item in items:
                if not offer(item):
                    return
            offer(done)
        except BaseException as exc:  # handed to the consumer
            offer(exc)
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=read, name="paddle_edo-reader", daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()


def _rebatch(chunks: Iterator[dict[str, np.ndarray]], batch_size: int, buffer_rows: int,
             rng: np.random.Generator) -> Iterator[dict[str, np.ndarray]]:
    """Chunks of any size -> batches of batch_size rows. With a buffer, rows wait in a pool of about
    buffer_rows + batch_size rows, and each batch is a random draw from the pool."""
    pending: list[dict[str, np.ndarray]] = []
    held = 0
    keys: list[str] = []
    for chunk in chunks:
        keys = list(chunk)
        pending.append(chunk)
        held += len(chunk["label"])
        if held < buffer_rows + max(batch_size, buffer_rows // 2):  # each round moves at least half a buffer
            continue
        pool = concat_chunks(pending, keys)
        order = rng.permutation(held) if buffer_rows else np.arange(held)
        ready = (held - buffer_rows) // batch_size * batch_size
        for start in range(0, ready, batch_size):
            index = order[start:start + batch_size]
            yield {k: v[index] for k, v in pool.items()}
        rest = order[ready:]
        pending = [{k: v[rest] for k, v in pool.items()}]
        held = len(rest)
    if held:
        pool = concat_chunks(pending, keys)
        order = rng.permutation(held) if buffer_rows else np.arange(held)
        for start in range(0, held, batch_size):
            index = order[start:start + batch_size]
            yield {k: v[index] for k, v in pool.items()}
