import json
import os
import subprocess
import sys

import numpy as np
import paddle
import pytest

from paddle_edo.data.vocabulary import Vocabulary
from paddle_edo.errors import DataError, EdoIndexError, EdoKeyError
from paddle_edo.nn import DenseEmbedding, HashEmbedding, QREmbedding, QuantizedEmbedding
from paddle_edo.serving import TableStore, export_tables, open_tables

from conftest import ROOT


class Tables(paddle.nn.Layer):
    """A model holding one table of each exported kind, looked up by fields f0..f5."""

    def __init__(self):
        super().__init__()
        paddle.seed(3)
        weight = paddle.randn([300, 16]) * 0.1
        self.dense = DenseEmbedding(300, 16, padding_idx=0)
        self.int8 = QuantizedEmbedding(300, 16, "int8", padding_idx=0, weight=weight, packed=True)
        self.int4 = QuantizedEmbedding(300, 16, "int4", weight=weight, packed=True)
        self.bf16 = QuantizedEmbedding(300, 16, "bf16", weight=weight, packed=True)
        self.hashed = HashEmbedding(300, 16, 64, num_hashes=2, combine="mean", padding_idx=0)
        self.qr = QREmbedding(300, 16, 20)

    def table_fields(self):
        return {"dense": "f0", "int8": "f1", "int4": "f2", "bf16": "f3", "hashed": "f4", "qr": "f5"}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tables")
    model = Tables()
    import pyarrow as pa
    vocabulary = Vocabulary.build("f0", pa.table({"value": [f"v{i}" for i in range(299)],
                                                  "count": list(range(299, 0, -1))}))
    export_tables(model, folder, {"f0": vocabulary}, {"f0": "vocabulary", "f4": "hash"})
    return model, folder


def test_every_kind_reopens_to_the_rows_the_layers_look_up(exported):
    model, folder = exported
    manifest = json.loads((folder / "tables.json").read_text())["tables"]
    assert {n: e["kind"] for n, e in manifest.items()} == {
        "dense": "rows", "int8": "packed", "int4": "packed", "bf16": "packed", "hashed": "hashed", "qr": "rows"}
    ids = np.array([0, 1, 17, 299, 150])
    stores = open_tables(folder)
    layers = dict(model.named_sublayers())
    for name in model.table_fields():
        layer = layers[name]
        expected = layer(paddle.to_tensor(ids)).numpy()
        np.testing.assert_allclose(stores[name].rows(ids), expected, rtol=1e-6, atol=1e-7, err_msg=name)
    assert (stores["dense"].rows([0]) == 0).all()
    big = np.array([2**40, 12345678901])  # a hash table takes any id
    np.testing.assert_allclose(stores["hashed"].rows(big), model.hashed(paddle.to_tensor(big)).numpy(), rtol=1e-6)
    int8_file = (folder / "int8.bin").stat().st_size
    assert 300 * (16 + 4) <= int8_file < 300 * (16 + 4) + 512  # codes and fp16 scale + bias a row, and a header


def test_rows_by_raw_value_and_unknown_values(exported):
    _, folder = exported
    store = TableStore.open(folder, "dense")
    ids, known = store.ids_of_values(["v0", "v5", "never"])
    assert ids.tolist() == [1, 6, 0] and known.tolist() == [True, True, False]  # unknown -> id 0
    assert store.value_of(6) == "v5" and store.value_of(0) is None
    hashed = TableStore.open(folder, "hashed")
    from paddle_edo.data.hashing import stable_hash
    import pyarrow as pa
    assert hashed.ids_of_values(["a"])[0].tolist() == stable_hash(pa.array(["a"])).tolist()
    with pytest.raises(EdoKeyError, match="exported without its values"):
        TableStore.open(folder, "qr").ids_of_values(["a"])


def test_bad_ids_names_and_damaged_files_are_refused(exported, tmp_path):
    _, folder = exported
    store = TableStore.open(folder, "int4")
    with pytest.raises(EdoIndexError, match=r"table 'int4': id 300 is out of range \[0, 300\)"):
        store.rows([1, 300])
    with pytest.raises(EdoKeyError, match="has no table 'nope'"):
        TableStore.open(folder, "nope")
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in folder.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    data = bytearray((copy / "dense.npy").read_bytes())
    data[-1] ^= 0xFF
    (copy / "dense.npy").write_bytes(bytes(data))
    TableStore.open(copy, "dense")  # opening is lazy
    with pytest.raises(DataError, match="dense.npy does not match its checksum"):
        TableStore.open(copy, "dense", verify=True)
    (copy / "qr.npy").write_bytes((copy / "qr.npy").read_bytes()[:200])
    with pytest.raises(DataError, match="qr.npy is truncated or damaged"):
        TableStore.open(copy, "qr")


def test_reopening_is_a_mapping_not_a_copy(tmp_path):
    rows = np.random.default_rng(0).normal(size=(200_000, 64)).astype(np.float32)  # 51 MB
    model = paddle.nn.Layer()
    model.table = DenseEmbedding(200_000, 64)
    model.table.weight.set_value(rows)
    export_tables(model, tmp_path)
    store = TableStore.open(tmp_path, "table")
    assert store.resident_bytes() < 1 << 20
    np.testing.assert_array_equal(store.rows([5, 199_999]), rows[[5, 199_999]])
    assert 0 < store.resident_bytes() < 1 << 20  # only the pages read


def test_the_store_needs_no_paddle(exported):
    _, folder = exported
    code = (f"import sys; from paddle_edo.serving import TableStore, open_tables; s = open_tables({str(folder)!r}); "
            f"print(s['int8'].rows([1, 2]).shape, s['dense'].ids_of_values(['v1'])[0].tolist()); "
            f"print('paddle' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["(2, 16) [2]", "False"]


def test_a_text_vocabulary_maps_unseen_words_to_its_unk_row(tmp_path):
    from paddle_edo.text import Vocab

    model = paddle.nn.Layer()
    model.words = DenseEmbedding(4, 8, padding_idx=0)
    model.table_fields = lambda: {"words": "words"}
    export_tables(model, tmp_path, {"words": Vocab(["[PAD]", "[UNK]", "电脑", "手机"])})
    store = TableStore.open(tmp_path)
    ids, known = store.ids_of_values(["手机", "量子计算机"])
    assert ids.tolist() == [3, 1] and known.tolist() == [True, False]
    assert store.value_of(2) == "电脑"
