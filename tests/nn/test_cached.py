import numpy as np
import paddle
import paddle.nn.functional as F
import pytest

from paddle_edo import memory_report
from paddle_edo.config import load_config
from paddle_edo.export import Predictor, export_model
from paddle_edo.nn import CachedEmbedding, DenseEmbedding, bind_optimizer, uncache
from paddle_edo.schema import ConfigError

N, D = 400, 4


def make_optimizer(name, parameters):
    if name == "adam":
        return paddle.optimizer.Adam(0.01, parameters=parameters, lazy_mode=True)
    if name == "adagrad":
        return paddle.optimizer.Adagrad(0.05, parameters=parameters)
    return paddle.optimizer.SGD(0.1, parameters=parameters)


def zipf_batches(count, shape=(32, 4), seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.zipf(1.3, size=shape) % N).astype(np.int64) for _ in range(count)]


class Pooled(paddle.nn.Layer):
    """Sum-pooled table and a linear head: the smallest model with a sparse table and a dense part."""

    def __init__(self, table):
        super().__init__()
        self.table = table
        self.head = paddle.nn.Linear(D, 1)

    def forward(self, ids):
        return self.head(self.table(ids).sum(axis=1)).squeeze(-1)


def train(model, optimizer, batches, prefetch=False):
    for i, ids in enumerate(batches):
        labels = paddle.to_tensor((ids.sum(axis=1) % 2).astype("float32"))
        loss = F.binary_cross_entropy_with_logits(model(paddle.to_tensor(ids)), labels)
        if prefetch and i + 1 < len(batches):
            model.table.prefetch(batches[i + 1])
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()


def cached_and_resident(optimizer_name, **cache_args):
    """A cached model and a resident nn.Embedding model starting from the same values. SGD applies a
    sparse gradient's duplicate rows one by one, a deduplicated lookup their sum (equal to float rounding
    only): with SGD the cache looks up every id, as nn.Embedding does."""
    paddle.seed(5)
    cache_args.setdefault("deduplicate", optimizer_name != "sgd")
    cached = Pooled(CachedEmbedding(N, D, padding_idx=0, **cache_args))
    resident = Pooled(paddle.nn.Embedding(N, D, padding_idx=0, sparse=True))
    resident.table.weight.set_value(np.array(cached.table.host.column("weight")))
    resident.head.set_state_dict(cached.head.state_dict())
    cached_opt = make_optimizer(optimizer_name, cached.parameters())
    bind_optimizer(cached, cached_opt)
    return cached, cached_opt, resident, make_optimizer(optimizer_name, resident.parameters())


def assert_rows_equal(cached_rows: np.ndarray, resident_rows: np.ndarray, deduplicated: bool = True) -> None:
    """The cached table's rows (or row state) equal the resident nn.Embedding's, bit for bit, but for the
    padding row 0: Paddle's sparse embedding gradient ignores padding_idx and trains it, where a cached
    table looking its batch's distinct ids up keeps it zero."""
    assert np.array_equal(cached_rows[1:], resident_rows[1:])
    if deduplicated:
        assert not cached_rows[0].any()


@pytest.mark.parametrize("optimizer_name", ["sgd", "adagrad", "adam"])
@pytest.mark.parametrize("policy,prefetch", [("lru", False), ("lfu", True)])
def test_training_through_the_cache_equals_the_resident_table_bit_for_bit(optimizer_name, policy, prefetch):
    batches = zipf_batches(30)
    largest_step = max(len(np.unique(b)) for b in batches) + 1  # + the padding row's permanent slot
    cached, cached_opt, resident, resident_opt = cached_and_resident(
        optimizer_name, cache_rows=largest_step, policy=policy, prefetch=prefetch)
    train(cached, cached_opt, batches, prefetch)
    train(resident, resident_opt, batches)
    assert cached.table.statistics()["evictions"] > 100  # the cache really turned over
    state = cached.table.state_dict()
    dedup = cached.table.deduplicate
    assert_rows_equal(state["weight"].numpy(), resident.table.weight.numpy(), dedup)
    # the optimizer's row state went back to the host with the rows
    for name in cached.table.row_state_names:
        expected = resident_opt._accumulators[name][resident.table.weight.name].numpy()
        assert_rows_equal(state["row_state_" + name].numpy(), expected, dedup)


def test_mmap_host_trains_exactly_and_reopens_with_the_trained_rows(tmp_path):
    path = tmp_path / "tables" / "item.f32"
    batches = zipf_batches(10)
    cached, cached_opt, resident, resident_opt = cached_and_resident("adam", cache_rows=150, host="mmap", path=path)
    train(cached, cached_opt, batches, prefetch=True)
    train(resident, resident_opt, batches)
    cached.table.flush()
    reopened = CachedEmbedding(N, D, cache_rows=10, host="mmap", path=path)
    assert reopened.host.names == ["weight", "moment1", "moment2"]  # Adam's state beside each row
    assert_rows_equal(reopened.host.column("weight"), resident.table.weight.numpy())
    assert path.stat().st_size == N * 3 * D * 4
    bind_optimizer(reopened, make_optimizer("adam", [reopened.cache]))
    moment = resident_opt._accumulators["moment1"][resident.table.weight.name].numpy()
    assert_rows_equal(reopened.host.column("moment1"), moment)  # kept by a binding of the same kind


@pytest.mark.parametrize("optimizer_name", ["sgd", "adagrad", "adam"])
@pytest.mark.parametrize("prefetch", [False, True])
def test_a_cache_smaller_than_a_steps_rows_serves_the_rest_from_the_host_exactly(optimizer_name, prefetch):
    batches = zipf_batches(30, shape=(64, 4))
    smallest_step = min(len(np.unique(b)) for b in batches)
    cached, cached_opt, resident, resident_opt = cached_and_resident(
        optimizer_name, cache_rows=smallest_step // 3, prefetch=prefetch)
    train(cached, cached_opt, batches, prefetch)
    train(resident, resident_opt, batches)
    statistics = cached.table.statistics()
    assert statistics["bypass_rows"] > 30 * smallest_step // 2 and statistics["step_bypass_rows"] > 0
    state = cached.table.state_dict()
    assert_rows_equal(state["weight"].numpy(), resident.table.weight.numpy(), cached.table.deduplicate)
    for name in cached.table.row_state_names:
        expected = resident_opt._accumulators[name][resident.table.weight.name].numpy()
        assert_rows_equal(state["row_state_" + name].numpy(), expected, cached.table.deduplicate)
    with paddle.no_grad():  # evaluation too: one lookup of more rows than the cache holds
        ids = paddle.to_tensor(np.arange(3, 3 * cached.table.cache_rows + 3).reshape(-1, 3))
        np.testing.assert_array_equal(cached(ids).numpy(), resident(ids).numpy())


def test_rows_of_a_step_stay_until_clear_grad_then_may_move():
    paddle.seed(0)
    model = Pooled(CachedEmbedding(N, D, cache_rows=8, policy="lru"))
    optimizer = make_optimizer("sgd", model.parameters())
    bind_optimizer(model, optimizer)
    model(paddle.to_tensor([[1, 2, 3, 4]])).sum().backward()
    model(paddle.to_tensor([[5, 6, 7, 8], [9, 10, 11, 12]]))  # rows 1-4 wait for the optimizer: 4 go to the host
    assert model.table.statistics()["bypass_rows"] == 4 and model.table.statistics()["evictions"] == 0
    optimizer.step()
    optimizer.clear_grad()
    model(paddle.to_tensor([[5, 6, 7, 8], [9, 10, 11, 12]]))
    assert model.table.statistics()["evictions"] == 4


def test_a_forward_works_before_the_optimizer_is_bound_and_a_backward_is_refused():
    table = CachedEmbedding(N, D, cache_rows=50)
    resident = DenseEmbedding(N, D)
    resident.weight.set_value(table.host.read(np.arange(N))[:, 0])
    assert table(paddle.to_tensor(np.zeros([0], np.int64))).shape == [0, D]  # as nn.Embedding answers
    for first in (0, 40):  # 40 rows, then 40 others: the first call's rows are not pinned, so they make room
        ids = paddle.to_tensor(np.arange(first, first + 40).reshape(2, 20))
        np.testing.assert_array_equal(table(ids).numpy(), resident(ids).numpy())
    assert (table.statistics()["bypass_rows"], table.statistics()["evictions"]) == (0, 30)
    with pytest.raises(Exception, match="bind_optimizer.*before the first backward"):
        table(paddle.to_tensor([1, 2])).sum().backward()
    with paddle.no_grad():
        assert table(paddle.to_tensor([1, 2])).shape == [2, D]
    with pytest.raises(TypeError, match="Momentum.*SGD, Adagrad and Adam"):
        bind_optimizer(Pooled(table), paddle.optimizer.Momentum(0.1, parameters=[table.cache]))
    with pytest.raises(TypeError, match=r"lazy_mode=False"):
        bind_optimizer(Pooled(table), paddle.optimizer.Adam(0.1, parameters=[table.cache]))


def test_statistics_count_hits_misses_evictions_and_bytes():
    table = CachedEmbedding(N, D, cache_rows=3, policy="lru")
    optimizer = make_optimizer("adam", [table.cache])
    bind_optimizer(table, optimizer)
    for ids in ([1, 2, 3], [1, 2], [4]):  # the last evicts 3, the least recently used
        table(paddle.to_tensor(ids)).sum().backward()
        optimizer.step()
        optimizer.clear_grad()
    stats = table.statistics()
    row = D * 4 * 3  # a row and its two Adam moments
    assert (stats["lookups"], stats["hits"], stats["misses"], stats["evictions"]) == (6, 2, 4, 1)
    assert stats["bytes_to_device"] == 4 * row and stats["bytes_to_host"] == 1 * row
    assert (stats["step_lookups"], stats["step_misses"], stats["step_evictions"]) == (1, 1, 1)
    assert table.slots.slot_of[3] == -1 and table.slots.slot_of[[1, 2, 4]].min() >= 0


def test_a_row_written_back_after_prefetch_is_read_again():
    table = CachedEmbedding(N, D, cache_rows=50)
    table.prefetch(np.array([7, 8]))
    fresh = np.full((1, D), 3.0, dtype=np.float32)
    table.host.write(np.array([7]), fresh[:, None])  # as a write-back landing after the read
    table.prefetcher.note_written(np.array([7]))
    with paddle.no_grad():
        out = table(paddle.to_tensor([7, 8])).numpy()
    assert np.array_equal(out[0], fresh[0]) and np.array_equal(out[1], table.host.column("weight")[8])


def test_state_dict_holds_the_full_table_and_loads_into_a_fresh_layer():
    cached, optimizer, _, _ = cached_and_resident("adagrad", cache_rows=120)
    train(cached, optimizer, zipf_batches(5))
    state = cached.state_dict()
    assert sorted(state) == ["head.bias", "head.weight", "table.row_state_moment", "table.weight"]
    assert state["table.weight"].shape == [N, D]
    other = Pooled(CachedEmbedding(N, D, cache_rows=120, padding_idx=0))
    bind_optimizer(other, make_optimizer("adagrad", other.parameters()))
    from paddle_edo.checkpoint import load_model_state

    load_model_state(other, state)
    with paddle.no_grad():
        ids = paddle.to_tensor(zipf_batches(1, seed=9)[0])
        assert np.array_equal(other(ids).numpy(), cached(ids).numpy())
    assert np.array_equal(other.table.host.column("moment"), state["table.row_state_moment"].numpy())


def test_bad_settings_are_refused_clearly(tmp_path):
    with pytest.warns(UserWarning, match="cache_rows = 500 is more than the table's 400 rows; using 400"):
        assert CachedEmbedding(N, D, cache_rows=500).cache_rows == N
    with pytest.raises(ValueError, match="cache_ratio = 0.0 must be in"):
        CachedEmbedding(N, D, cache_ratio=0.0)
    with pytest.raises(ValueError, match="sparse = False"):
        CachedEmbedding(N, D, sparse=False)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="cannot open the table file"):
        CachedEmbedding(N, D, host="mmap", path=blocker / "sub" / "t.f32")
    wrong = tmp_path / "wrong.f32"
    wrong.write_bytes(b"\0" * 12)
    with pytest.raises(ValueError, match=r"wrong.f32 holds 12 bytes, but a 400 x 4 float32 table with \['weight'\] "
                                         r"per row takes 6400"):
        CachedEmbedding(N, D, host="mmap", path=wrong)
    with pytest.raises(IndexError, match="id 400 is out of range"):
        with paddle.no_grad():
            CachedEmbedding(N, D)(paddle.to_tensor([1, 400]))
    base = {"embedding": {"type": "cached"}, "train": {"optimizer": "momentum"}}
    with pytest.raises(ConfigError, match="train.optimizer = 'momentum' cannot be used with embedding.type"):
        load_config(base=base)
    with pytest.raises(ConfigError, match="embedding.host = 'mmap' needs embedding.path"):
        load_config(base={"embedding": {"type": "cached", "host": "mmap"}})
    with pytest.raises(ValueError, match="host_format = 'int4'; expected one of 'float32', 'fp16', 'int8'"):
        CachedEmbedding(N, D, host_format="int4")
    with pytest.raises(ConfigError, match="embedding.host_format = 'int8' keeps no optimizer state beside the host "
                                          "rows, but train.optimizer = 'adam' keeps some for every row"):
        load_config(base={"embedding": {"type": "cached", "host_format": "int8"}, "train": {"optimizer": "adam"}})
    packed = CachedEmbedding(N, D, host_format="int8")
    with pytest.raises(ValueError, match="host_format = 'int8' keeps no optimizer state beside the host rows, but "
                                         "Adam keeps"):
        bind_optimizer(packed, make_optimizer("adam", packed.parameters()))


def test_memory_report_counts_device_and_host_bytes():
    table = CachedEmbedding(N, D, cache_rows=100, policy="lfu")
    bind_optimizer(table, make_optimizer("adam", [table.cache]))
    row = memory_report(Pooled(table)).tables[0]
    assert row.estimated_bytes == row.held_bytes == 100 * D * 4
    arrays = [table.host.array, table.slots.slot_of, table.slots.id_of_slot, table.slots.pinned,
              table.slots.permanent, table.slots.dirty, table.slots._scratch, table.slots.policy.keys, table.slots.policy.counts]
    assert row.host_bytes == sum(a.nbytes for a in arrays) == 3 * N * D * 4 + N * (4 + 4) + 100 * (8 + 4 + 8)


def test_uncached_model_exports_and_predicts_what_the_cache_served(tmp_path):
    cached, optimizer, _, _ = cached_and_resident("adam", cache_rows=120)
    train(cached, optimizer, zipf_batches(5))
    ids = zipf_batches(1, seed=4)[0]
    cached.eval()
    with paddle.no_grad():
        expected = cached(paddle.to_tensor(ids)).numpy()
    assert uncache(cached) == ["table"]
    spec = paddle.static.InputSpec([None, ids.shape[1]], "int64", name="ids")

    class Wrapper(paddle.nn.Layer):  # export_model's models take a list of inputs
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, inputs):
            return self.inner(inputs[0])

    prefix = export_model(Wrapper(cached), [spec], tmp_path / "model")
    np.testing.assert_allclose(Predictor(prefix, device="cpu").run([ids]), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("host, policy", [("memory", "lru"), ("mmap", "lru"), ("memory", "lfu")])
def test_packed_host_rows_train_by_a_table_rule_and_resume_exactly(tmp_path, host, policy):
    """int8 host rows: the cache holds them decoded, a row going back is re-encoded stochastically, a flush
    empties the cache into the host, and the state (codes, row parameters, the rule's state, the lfu
    policy's counts, which decide when a row goes back and is rounded) resumes a run exactly; SGD trains
    such a table too."""
    from paddle_edo.nn import RowTrainer
    from paddle_edo.optim import TableOptimizer

    def layer(folder):
        paddle.seed(4)
        return CachedEmbedding(N, D, cache_rows=24, host_format="int8", host=host, path=folder, prefetch=False,
                               policy=policy)

    def train(table, trainer, batches, first):
        for step, ids in enumerate(batches, first):
            paddle.seed(100 + step)  # the rounding keys of this step's write-backs, as the engine seeds steps
            (table(paddle.to_tensor(ids)) ** 2).sum().backward()
            trainer.step()
            trainer.clear_grad()

    batches = zipf_batches(6, shape=(16, 3))
    optimizer = TableOptimizer("rowwise_adagrad", 0.05)
    whole = layer(tmp_path / "whole" if host == "mmap" else None)
    start = whole.host.column("weight")
    trainer = RowTrainer(optimizer, {"t": whole})
    train(whole, trainer, batches[:3], 0)
    saved, rule_state = {k: v.numpy().copy() for k, v in whole.state_dict().items()}, trainer.state_dict()
    assert sorted(saved) == ["int8_codes", "int8_row_params", *(["lfu_counts"] if policy == "lfu" else [])]
    assert saved["int8_codes"].dtype == np.int8
    assert whole.slots.used == 0  # flushed: every row on the host, as a resumed run finds them
    assert whole.stats.as_dict()["bypass_rows"] > 0 and whole.stats.as_dict()["evictions"] > 0
    train(whole, trainer, batches[3:], 3)
    def resume(state):
        table = layer(tmp_path / f"resumed{len(state)}" if host == "mmap" else None)
        table.set_state_dict({k: paddle.to_tensor(v) for k, v in state.items()})
        resumed_trainer = RowTrainer(optimizer, {"t": table})
        resumed_trainer.load(rule_state, "test")
        train(table, resumed_trainer, batches[3:], 3)
        paddle.seed(7)  # the keys of the last write-backs
        return {k: v.numpy() for k, v in table.state_dict().items()}

    paddle.seed(7)
    expected = {k: v.numpy() for k, v in whole.state_dict().items()}
    for key, value in resume(saved).items():
        np.testing.assert_array_equal(value, expected[key], err_msg=key)
    if policy == "lfu":  # the counts decide which rows the cache keeps, and so when a row goes back and rounds
        counts = saved["lfu_counts"]
        assert counts.dtype == np.int32 and counts.sum() > 0  # (uses of the rows the cache took in)
        again = layer(None)
        again.set_state_dict({k: paddle.to_tensor(v) for k, v in saved.items()})
        np.testing.assert_array_equal(again.slots.policy.counts, counts)
        with pytest.raises(ValueError, match="'lfu_counts', the counts of the lfu policy; this table evicts by 'lru'"):
            CachedEmbedding(N, D, cache_rows=24, host_format="int8").set_state_dict(saved)
    final = whole.host.column("weight")
    assert np.abs(final - start).max() > 0.01  # the rows moved, past int8's rounding
    sgd = CachedEmbedding(N, D, cache_rows=24, host_format="int8", prefetch=False)
    optimizer = make_optimizer("sgd", sgd.parameters())
    bind_optimizer(sgd, optimizer)
    before = sgd.host.column("weight")
    for ids in batches:
        (sgd(paddle.to_tensor(ids)) ** 2).sum().backward()
        optimizer.step()
        optimizer.clear_grad()
    sgd.flush()
    assert np.abs(sgd.host.column("weight") - before).max() > 0.01
