import importlib
import sys

import numpy as np
import paddle
import pytest

from paddle_edo import memory_report, quantize
from paddle_edo.data import FieldSpec
from paddle_edo.engine import Engine
from paddle_edo.export import Predictor, export_model, input_specs, to_static
from paddle_edo.nn import HashEmbedding, MixedDimEmbedding, QREmbedding, QuantizedEmbedding
from paddle_edo.nn.mixed_dim import block_layout
from paddle_edo.nn.shared import hash_ids_numpy

from conftest import small_synthetic_config

EXTREME_IDS = np.array([0, 1, 2, -1, -5, 65535, 65536, 2**31 - 1, 2**32 + 7, 2**62 + 3, 2**63 - 1, -(2**63),
                        987654321012], dtype=np.int64)


def test_hash_buckets_match_the_reference_for_any_int64():
    layer = HashEmbedding(1000, 8, 1000, num_hashes=3)
    buckets = layer.bucket_ids(paddle.to_tensor(EXTREME_IDS)).numpy()
    np.testing.assert_array_equal(buckets, hash_ids_numpy(EXTREME_IDS, layer.coefficients.numpy(), 1000))
    assert buckets.min() >= 0 and buckets.max() < 1000
    spread = hash_ids_numpy(np.arange(100_000), layer.coefficients.numpy(), 1000)[:, 0]
    counts = np.bincount(spread, minlength=1000)
    assert counts.min() > 50 and counts.max() < 160  # about 100 ids per bucket
    assert HashEmbedding(1000, 8, 1000, num_hashes=3, seed=0).coefficients.numpy().tolist() == \
        layer.coefficients.numpy().tolist()  # fixed seed: the same hashes in every process


def test_hash_is_identical_in_dygraph_to_static_and_inference(tmp_path):
    layer = HashEmbedding(50, 4, 50, num_hashes=2, padding_idx=0)
    layer.eval()
    ids = paddle.to_tensor(EXTREME_IDS)
    eager = layer.bucket_ids(ids).numpy()

    class Buckets(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.hash = layer

        def forward(self, x):
            return self.hash.bucket_ids(x)

    spec = [paddle.static.InputSpec([None], "int64")]
    np.testing.assert_array_equal(paddle.jit.to_static(Buckets(), input_spec=spec, full_graph=True)(ids).numpy(),
                                  eager)
    paddle.jit.save(paddle.jit.to_static(Buckets(), input_spec=spec, full_graph=True), str(tmp_path / "h"))
    served = Predictor(tmp_path / "h").run([EXTREME_IDS])
    np.testing.assert_array_equal(served, eager)


@pytest.mark.parametrize("combine", ["sum", "mean", "concat"])
def test_hash_combines_its_rows(combine):
    layer = HashEmbedding(97, 6, 97, num_hashes=3, combine=combine, padding_idx=-1, init_std=1.0)
    ids = np.array([5, -1, 2**40], dtype=np.int64)
    out = layer(paddle.to_tensor(ids)).numpy()
    rows = layer.table.weight.numpy()[hash_ids_numpy(ids, layer.coefficients.numpy(), 97)]
    expected = {"sum": rows.sum(1), "mean": rows.mean(1), "concat": rows.reshape(3, -1)}[combine]
    np.testing.assert_allclose(out[[0, 2]], expected[[0, 2]], rtol=1e-6)
    np.testing.assert_array_equal(out[1], np.zeros(6, np.float32))  # the padding id (-1 here)


def test_qr_gives_every_id_its_own_vector():
    layer = QREmbedding(1000, 8, num_collisions=32, operation="mult", padding_idx=0)
    assert layer.quotient.num_embeddings == 32 and layer.remainder.num_embeddings == 32  # ceil(1000 / 32)
    vectors = layer(paddle.arange(1, 1000)).numpy()
    assert len(np.unique(vectors.round(8), axis=0)) == 999
    q, r = layer.quotient.weight.numpy(), layer.remainder.weight.numpy()
    np.testing.assert_allclose(vectors[99], q[100 // 32] * r[100 % 32], rtol=1e-6)
    np.testing.assert_array_equal(layer(paddle.to_tensor([0])).numpy(), np.zeros((1, 8), np.float32))
    concat = QREmbedding(1000, 8, num_collisions=32, operation="concat")
    assert concat(paddle.to_tensor([7])).shape == [1, 8] and concat.quotient.embedding_dim == 4


def test_mixed_dim_gives_frequent_ids_wide_rows():
    frequencies = np.zeros(1000)
    frequencies[[7, 3, 500]] = [1000, 900, 800]
    frequencies[10:] += np.arange(990)[::-1] / 100
    rank, ends, dims = block_layout(frequencies, 32, 3, 0.5, 2)
    assert rank[7] == 0 and rank[3] == 1 and rank[500] == 2
    assert ends == [10, 100, 1000] and dims[0] == 32 and dims[1] < 32 and dims[2] <= dims[1]
    layer = MixedDimEmbedding(1000, 32, frequencies, num_blocks=3, padding_idx=0)
    ids = paddle.to_tensor([7, 12, 999, 0])
    out = layer(ids).numpy()
    block = layer.blocks[2]
    local = rank[999] - 100
    expected = block.weight.numpy()[local] @ layer.projections[2].weight.numpy()
    np.testing.assert_allclose(out[2], expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(out[0], layer.blocks[0].weight.numpy()[0], rtol=1e-6)  # full width, no projection
    np.testing.assert_array_equal(out[3], np.zeros(32, np.float32))


def test_mixed_dim_updates_only_the_rows_looked_up():
    layer = MixedDimEmbedding(200, 8, np.arange(200)[::-1].astype(float), num_blocks=2, padding_idx=0)
    optimizer = paddle.optimizer.Adam(0.1, parameters=layer.parameters(), lazy_mode=True)
    before = [b.weight.numpy().copy() for b in layer.blocks]
    for _ in range(2):
        layer(paddle.to_tensor([1, 150])).sum().backward()
        optimizer.step()
        optimizer.clear_grad()
    # each block's last row is the dummy that ids outside the block look up (always read as zeros)
    changed = [np.flatnonzero((b.weight.numpy()[:-1] != w[:-1]).any(1)).tolist()
               for b, w in zip(layer.blocks, before)]
    rank = layer.rank.numpy()
    start = layer.block_ends[0]
    assert changed == [[int(rank[1])], [int(rank[150]) - start]]


@pytest.mark.parametrize("make", [
    lambda: HashEmbedding(300, 8, 300, padding_idx=0),
    lambda: QREmbedding(5000, 8, num_collisions=70, padding_idx=0),
    lambda: MixedDimEmbedding(5000, 8, np.random.default_rng(0).zipf(1.5, 5000).astype(float), padding_idx=0)])
def test_bytes_are_exact_and_quantize_reaches_the_inner_tables(make):
    model = paddle.nn.Sequential(make())
    report = memory_report(model)
    assert report.tables[0].estimated_bytes == report.tables[0].held_bytes
    ids = paddle.to_tensor([[1, 2, 0], [4, 3, 2]])
    before = model(ids).numpy()
    quantize(model, "int8")
    inner = [l for l in model.sublayers() if isinstance(l, QuantizedEmbedding)]
    assert inner and all(l.storage_dtype == "int8" for l in inner)
    after = memory_report(model)
    assert after.tables[0].dtype == "int8" and after.tables[0].estimated_bytes == after.tables[0].held_bytes
    assert after.held_bytes < report.held_bytes
    np.testing.assert_allclose(model(ids).numpy(), before, atol=0.02 * np.abs(before).max() + 1e-4)


def test_shared_layers_export_to_inference(tmp_path):
    fields = [FieldSpec("user", 3000), FieldSpec("tags", 40, max_len=3)]
    frequencies = {"user": np.arange(3000)[::-1].astype(float), "tags": np.ones(40)}
    ids = [np.array([1, 2, 2999], dtype=np.int64), np.array([[1, 2, 0], [3, 0, 0], [9, 8, 7]], dtype=np.int64)]
    from paddle_edo.models import DeepFM
    for embedding in ({"type": "hash", "num_buckets": 100}, {"type": "qr"}, {"type": "mixed_dim"}):
        model = DeepFM(fields, {"dim": 8, **embedding}, hidden_units=[8], frequencies=frequencies)
        quantize(model, "int4")
        model.eval()
        eager = model([paddle.to_tensor(i) for i in ids]).numpy()
        static = to_static(model, input_specs(fields))([paddle.to_tensor(i) for i in ids]).numpy()
        prefix = export_model(model, input_specs(fields), tmp_path / embedding["type"] / "model")
        np.testing.assert_allclose(static, eager, atol=1e-6)
        np.testing.assert_allclose(Predictor(prefix).run(ids), eager, atol=1e-6)


@pytest.mark.parametrize("embedding", [{"type": "hash", "num_buckets": 100, "combine": "mean", "num_hashes": 3},
                                       {"type": "hash", "num_buckets": 100}, {"type": "qr"}, {"type": "mixed_dim"}],
                         ids=["hash mean of 3", "hash sum", "qr mult", "mixed_dim"])
def test_exports_may_take_the_fused_kernels_for_cpu_serving(tmp_path, embedding):
    from paddle_edo.export import uses_fused_kernels
    from paddle_edo.models import DeepFM

    fields = [FieldSpec("user", 3000), FieldSpec("tags", 40, max_len=3)]
    frequencies = {"user": np.arange(3000)[::-1].astype(float), "tags": np.ones(40)}
    ids = [np.array([1, 2, 2999, 0], dtype=np.int64),
           np.array([[1, 2, 0], [3, 0, 0], [9, 8, 7], [0, 0, 0]], dtype=np.int64)]
    model = DeepFM(fields, {"dim": 8, **embedding}, hidden_units=[8], frequencies=frequencies)
    model.eval()
    eager = model([paddle.to_tensor(i) for i in ids]).numpy()
    fused = export_model(model, input_specs(fields), tmp_path / "fused" / "model", fused_kernels=True)
    plain = export_model(model, input_specs(fields), tmp_path / "plain" / "model")
    assert uses_fused_kernels(fused) and not uses_fused_kernels(plain)
    np.testing.assert_allclose(Predictor(fused).run(ids), eager, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(Predictor(plain).run(ids), eager, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="fused_kernels = true: paddle_edo's fused lookups run on the CPU only"):
        Predictor(fused, device="gpu")


def test_a_fused_export_without_the_kernels_is_refused_clearly(tmp_path, monkeypatch):
    import paddle_edo.export

    monkeypatch.setattr(paddle_edo.export, "fused_ops", lambda: None)  # no C++ compiler here, say
    with pytest.raises(RuntimeError, match="export.fused_kernels = true, but paddle_edo's kernels cannot be built"):
        export_model(HashEmbedding(10, 4, 10), [paddle.static.InputSpec([None], "int64")], tmp_path / "m",
                     fused_kernels=True)


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="num_collisions = 0 must be an integer >= 1"):
        QREmbedding(100, 8, num_collisions=0)
    with pytest.raises(ValueError, match="operation = 'div'"):
        QREmbedding(100, 8, operation="div")
    with pytest.raises(ValueError, match="num_hashes = 0"):
        HashEmbedding(100, 8, 100, num_hashes=0)
    with pytest.raises(ValueError, match="divisible by num_hashes"):
        HashEmbedding(100, 9, 100, num_hashes=2, combine="concat")
    with pytest.raises(ValueError, match=r"frequencies has shape \(99,\), expected \(100,\)"):
        MixedDimEmbedding(100, 8, np.ones(99))
    with pytest.raises(IndexError, match="id -3 is out of range"):
        QREmbedding(100, 8)(paddle.to_tensor([-3]))
    with pytest.raises(TypeError, match="int32 or int64"):
        HashEmbedding(100, 8, 100)(paddle.to_tensor([1.0]))
    HashEmbedding(100, 8, 100)(paddle.to_tensor([-(2**63), 2**63 - 1]))  # any int64 is fine


def test_mixed_dim_from_config_uses_training_frequencies(tmp_path):
    config = small_synthetic_config(tmp_path / "run", epochs=1)
    config["embedding"] = {"type": "mixed_dim", "dim": 8, "sparse": True, "num_blocks": 3, "alpha": 0.5,
                           "min_dim": 2, "frequencies": "train"}
    engine = Engine(config)
    table = engine.model.embeddings["f0"]
    counts = np.bincount(engine.splits.train.ids["f0"], minlength=500)
    assert int(table.rank.numpy()[counts.argmax()]) == 0
    assert engine.fit()["test_auc"] > 0.6


@pytest.mark.parametrize("backend", ["faiss", "numpy"])
def test_clustered_keeps_hot_rows_and_shares_centroids_of_planted_clusters(backend, monkeypatch):
    from paddle_edo.nn import ClusteredEmbedding, DenseEmbedding

    if backend == "faiss":
        importlib.import_module("faiss")  # requirements.txt: `make test` installs it
    else:
        monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss raises ImportError

    rng = np.random.default_rng(0)
    centers = rng.normal(0, 5, (4, 6)).astype(np.float32)
    source = DenseEmbedding(200, 6, padding_idx=0)
    weight = centers[np.arange(200) % 4] + rng.normal(0, 0.01, (200, 6)).astype(np.float32)
    weight[0] = 0
    source.weight.set_value(weight)
    frequencies = np.arange(200)[::-1].astype(float)  # id 1 is the most frequent real id
    layer = ClusteredEmbedding.from_embedding(source, frequencies, num_clusters=4, keep_top=10)
    out = layer(paddle.arange(200)).numpy()
    np.testing.assert_array_equal(out[1:11], weight[1:11])  # kept rows exactly
    for i in range(11, 200):  # the rest: their planted centre, up to the noise
        np.testing.assert_allclose(out[i], centers[i % 4], atol=0.01)
    np.testing.assert_array_equal(out[0], np.zeros(6, np.float32))
    report = memory_report(paddle.nn.Sequential(layer))
    assert report.tables[0].held_bytes == report.tables[0].estimated_bytes == (10 + 4 + 1) * 6 * 4 + 200 * 4
    optimizer = paddle.optimizer.SGD(0.1, parameters=layer.parameters())
    layer(paddle.to_tensor([50])).sum().backward()  # fine-tuning moves the shared row
    optimizer.step()
    assert not np.allclose(layer(paddle.to_tensor([54])).numpy(), out[54])
    with pytest.raises(ValueError, match="num_clusters = 500 must be in"):
        ClusteredEmbedding.from_embedding(source, frequencies, num_clusters=500, keep_top=10)
    with pytest.raises(ValueError, match="frequencies has shape"):
        ClusteredEmbedding.from_embedding(source, frequencies[:5], num_clusters=4, keep_top=10)


def test_clustered_from_config_trains_full_then_packs_at_the_end(tmp_path):
    from paddle_edo.nn import ClusteredEmbedding

    config = small_synthetic_config(tmp_path / "run", epochs=1)
    config["embedding"] = {"type": "clustered", "dim": 8, "sparse": True, "min_rows": 0, "cluster_fraction": 0.1,
                           "keep_fraction": 0.02, "frequencies": "train"}
    engine = Engine(config)
    table = engine.model.embeddings["f0"]
    assert isinstance(table, ClusteredEmbedding) and not table.packed and table.table.num_embeddings == 500
    full_bytes = engine.memory_report().held_bytes
    results = engine.fit()
    assert table.packed and table.table.num_embeddings == 10 + 50 + 1  # kept + clusters + padding row
    assert engine.memory_report().held_bytes < full_bytes
    assert "test_auc_before_packing" in results and results["test_auc"] > 0.6


@pytest.mark.parametrize("make", [
    lambda: QREmbedding(5000, 8, num_collisions=70, operation="mult", padding_idx=3),
    lambda: QREmbedding(5000, 8, num_collisions=70, operation="add"),
    lambda: QREmbedding(5000, 8, num_collisions=70, operation="concat"),
    lambda: HashEmbedding(500, 8, 500, num_hashes=2, combine="sum", padding_idx=5),
    lambda: HashEmbedding(500, 8, 500, num_hashes=3, combine="mean"),
    lambda: HashEmbedding(500, 8, 500, num_hashes=2, combine="concat", padding_idx=-7),
    lambda: MixedDimEmbedding(5000, 16, np.random.default_rng(1).random(5000), padding_idx=0),
    lambda: MixedDimEmbedding(5000, 16, np.random.default_rng(1).random(5000), num_blocks=3, min_dim=16)],
    ids=["qr-mult", "qr-add", "qr-concat", "hash-sum", "hash-mean", "hash-concat", "mixed", "mixed-full-width"])
def test_fused_lookups_equal_the_composite_ops(make, monkeypatch):
    """Forward passes without gradient take the fused CPU kernel; training passes and static programs
    take Paddle's composite ops; all give the same vectors."""
    import paddle_edo.kernels
    import paddle_edo.nn.mixed_dim
    import paddle_edo.nn.shared

    assert paddle_edo.kernels.fused_ops() is not None  # built by `make test` (a C++ compiler is at hand)
    calls = []

    def counted():
        calls.append(1)
        return paddle_edo.kernels.fused_ops()
    for module in (paddle_edo.nn.shared, paddle_edo.nn.mixed_dim):
        monkeypatch.setattr(module, "fused_ops", counted)
    layer = make()
    layer.eval()
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 5000, (1024, 7)).astype(np.int64)  # enough lookups for the kernels' threads
    ids[0, :3] = [3, 5, 0]  # the padding ids of some layers
    if isinstance(layer, HashEmbedding):
        ids[1, :3] = [-7, -(2**62), 2**62]  # any int64 is an id
    training = layer(paddle.to_tensor(ids))
    assert not calls and not training.stop_gradient  # composite: the gradient flows
    with paddle.no_grad():
        fused = layer(paddle.to_tensor(ids)).numpy()
        static = paddle.jit.to_static(layer, full_graph=True)(paddle.to_tensor(ids)).numpy()
    assert len(calls) == 1
    if isinstance(layer, MixedDimEmbedding):  # its projections are BLAS matmuls: their summation order
        # depends on the processor's kernel (AVX-512 FMA on some machines), the fused kernel's does not
        np.testing.assert_allclose(fused, training.numpy(), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(fused, static, rtol=1e-6, atol=1e-7)
    else:
        np.testing.assert_array_equal(fused, training.numpy())
        np.testing.assert_array_equal(fused, static)
    if layer.padding_idx is not None:
        assert not fused[ids == layer.padding_idx].any()
    packed = make()
    quantize(packed, "int8")  # packed inner tables: composite ops again
    packed.eval()
    with paddle.no_grad():
        packed(paddle.to_tensor(ids))
    assert len(calls) == 1 and any(isinstance(t, QuantizedEmbedding) for t in packed.sublayers())


def test_fused_kernels_refuse_ids_outside_the_tables():
    from paddle_edo.kernels import fused_ops

    q, r = paddle.zeros([10, 4]), paddle.zeros([7, 4])
    with pytest.raises(Exception, match="id 70 is outside the QR tables"):
        fused_ops().edo_qr_lookup(paddle.to_tensor([1, 70], dtype="int64"), q, r, 7, 0, False, 0)
    layer = MixedDimEmbedding(100, 8, np.ones(100))
    tables = [b.weight for b in layer.blocks]
    projections = [p.weight if isinstance(p, paddle.nn.Linear) else paddle.zeros([0, 8]) for p in layer.projections]
    with pytest.raises(Exception, match="id -1 is outside \\[0, 100\\)"):
        fused_ops().edo_mixed_dim_lookup(paddle.to_tensor([-1], dtype="int64"), layer.rank, layer.block_starts,
                                         tables, projections, 8, False, 0)


def test_without_the_kernels_the_composite_ops_serve(tmp_path, monkeypatch, caplog):
    import paddle_edo.kernels as kernels

    layer = QREmbedding(100, 4, num_collisions=10, padding_idx=0)
    layer.eval()
    ids = paddle.arange(100)
    expected = layer(ids).numpy()  # gradient on: composite ops
    monkeypatch.setattr(kernels, "_loaded", {})
    monkeypatch.setenv("PADDLE_EDO_FUSED_KERNELS", "0")
    assert kernels.fused_ops() is None
    with paddle.no_grad():
        np.testing.assert_array_equal(layer(ids).numpy(), expected)
    monkeypatch.setattr(kernels, "_loaded", {})
    monkeypatch.delenv("PADDLE_EDO_FUSED_KERNELS")
    broken = tmp_path / "lookups.cc"
    broken.write_text("this is not C++\n")
    monkeypatch.setattr(kernels, "SOURCES", [broken])
    monkeypatch.setenv("PADDLE_EXTENSION_DIR", str(tmp_path / "build"))
    assert kernels.fused_ops() is None
    assert "the fused lookup kernels could not be built" in caplog.text
    with paddle.no_grad():
        np.testing.assert_array_equal(layer(ids).numpy(), expected)


@pytest.mark.parametrize("layer", [lambda f: HashEmbedding(3000, 8, 300, storage_format="int8"),
                                   lambda f: QREmbedding(3000, 8, storage_format="int4"),
                                   lambda f: MixedDimEmbedding(3000, 8, f, storage_format="fp16")],
                         ids=["hash int8", "qr int4", "mixed_dim fp16"])
def test_composite_tables_pack_their_inner_tables_after_training(layer):
    frequencies = np.arange(3000)[::-1].astype(float)
    table = layer(frequencies)
    assert not table.packed and table.storage_dtype == "float32"
    ids = paddle.to_tensor(np.random.default_rng(0).integers(0, 3000, (64, 3)))
    table(ids).sum().backward()                                 # trains as fp32
    fp32_bytes = table.estimated_bytes()
    twin = layer(frequencies)                                    # the same fp32 rows, quantized by quantize()
    twin.set_state_dict(table.state_dict())
    quantize(paddle.nn.Sequential(twin), table.storage_format)
    table.pack()
    assert table.packed and table.storage_dtype == table.storage_format
    assert table.estimated_bytes() < fp32_bytes and memory_report(paddle.nn.Sequential(table)).tables[0].error > 0
    table.eval()
    twin.eval()
    with paddle.no_grad():
        np.testing.assert_array_equal(table(ids).numpy(), twin(ids).numpy())
