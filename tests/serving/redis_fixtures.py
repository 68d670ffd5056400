"""A real redis-server for the Redis tests (started on a free port, stopped after), and an export folder
holding one table of each kind and packed format."""
import paddle
import pyarrow as pa
import pytest

from paddle_edo.data.vocabulary import Vocabulary
from paddle_edo.nn import DenseEmbedding, HashEmbedding, QREmbedding, QuantizedEmbedding
from paddle_edo.serving import LocalRedisServer, export_tables
from paddle_edo.serving.redis_server import INSTALL_HINT

PACKED_FORMATS = ("int8", "int4", "int2", "ternary", "binary", "fp16", "bf16")


def redis_server(**settings):
    try:
        return LocalRedisServer(settings=settings).start()
    except FileNotFoundError:
        pytest.skip(f"redis-server is not installed ({INSTALL_HINT}); `make test` installs it where it can")


class Tables(paddle.nn.Layer):
    """One table of each exported kind and packed format, looked up by fields."""

    def __init__(self, seed=3, rows=300):
        super().__init__()
        paddle.seed(seed)
        weight = paddle.randn([rows, 16]) * 0.1
        self.dense = DenseEmbedding(rows, 16, padding_idx=0)
        self.dense.weight.set_value(weight)
        for storage_format in PACKED_FORMATS:
            setattr(self, storage_format, QuantizedEmbedding(rows, 16, storage_format, padding_idx=0, weight=weight,
                                                             packed=True))
        self.hashed = HashEmbedding(rows, 16, 64, num_hashes=2, combine="mean", padding_idx=0)
        self.concat = HashEmbedding(rows, 16, 64, num_hashes=2, combine="concat")
        self.qr = QREmbedding(rows, 16, 20)

    def table_fields(self):
        fields = {"dense": "item", **{f: "item" for f in PACKED_FORMATS}}
        return {**fields, "hashed": "tag", "concat": "tag", "qr": "user"}


def export_folder(folder, seed=3, rows=300):
    """Export Tables(seed) into folder, the item field with raw values; returns the model."""
    model = Tables(seed, rows)
    vocabulary = Vocabulary.build("item", pa.table({"value": [f"item{i}" for i in range(rows - 1)],
                                                    "count": list(range(rows - 1, 0, -1))}))
    export_tables(model, folder, {"item": vocabulary}, {"item": "vocabulary", "tag": "hash"})
    return model
