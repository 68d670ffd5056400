import numpy as np
import paddle

from paddle_edo import memory_report
from paddle_edo.data import FieldSpec
from paddle_edo.memory import held_bytes
from paddle_edo.models import DeepFM
from paddle_edo.nn import DenseEmbedding


def state_bytes(layer):
    return sum(np.asarray(v.numpy()).nbytes for v in layer.state_dict().values())


def test_estimate_equals_held_bytes_for_every_table_of_a_model():
    fields = [FieldSpec("user", 1000), FieldSpec("item", 300), FieldSpec("tags", 50, max_len=4)]
    model = DeepFM(fields, {"type": "dense", "dim": 16, "sparse": True, "init_std": 0.01}, hidden_units=[8])
    report = memory_report(model)
    names = [t.name for t in report.tables]
    assert names == ["embeddings.user", "embeddings.item", "embeddings.tags",
                     "first_order.user", "first_order.item", "first_order.tags"]
    for table in report.tables:
        assert table.estimated_bytes == table.held_bytes
    assert report.tables[0].held_bytes == 1000 * 16 * 4
    assert report.tables[3].held_bytes == 1000 * 1 * 4
    assert report.held_bytes == report.estimated_bytes == sum(t.held_bytes for t in report.tables)
    # held bytes agree with an independent count over the tables' state dicts
    assert report.held_bytes == sum(state_bytes(layer) for layer in model.embeddings.values()) + sum(
        state_bytes(layer) for layer in model.first_order.values())
    text = str(report)
    assert "embeddings.user" in text and "total" in text and "62.50 KiB" in text


def test_plain_paddle_embedding_is_reported_and_shared_tensors_count_once():
    class Model(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.plain = paddle.nn.Embedding(100, 8)
            self.mine = DenseEmbedding(20, 4)
            self.alias = self.mine  # the same layer reachable twice

    report = memory_report(Model())
    assert [(t.name, t.kind, t.dtype) for t in report.tables] == [
        ("plain", "paddle.nn.Embedding", "float32", ), ("mine", "dense", "float32")]
    assert report.tables[0].estimated_bytes == report.tables[0].held_bytes == 3200
    assert held_bytes(paddle.nn.Sequential(DenseEmbedding(5, 2), DenseEmbedding(5, 2))) == 80


def test_model_without_embeddings_gives_an_empty_report():
    report = memory_report(paddle.nn.Linear(3, 2))
    assert report.tables == [] and report.held_bytes == 0


def test_the_report_says_what_the_process_holds_beside_the_tables():
    report = memory_report(paddle.nn.Sequential(DenseEmbedding(1000, 16)))
    process = report.process
    assert process.resident_bytes >= process.baseline_resident_bytes > 0
    assert process.device_allocated_bytes == process.device_reserved_bytes == 0 or paddle.is_compiled_with_cuda()
    line = str(report).splitlines()[-1]
    assert line.startswith("process: ") and "resident = the overhead at import" in line and "tables 62.50 KiB" in line
    assert report.to_dict()["process"]["resident_bytes"] == process.resident_bytes
