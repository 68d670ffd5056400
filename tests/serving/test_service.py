from concurrent.futures import ThreadPoolExecutor

import numpy as np
import paddle
import pyarrow as pa
import pytest

from paddle_edo.data.vocabulary import Vocabulary
from paddle_edo.nn import DenseEmbedding
from paddle_edo.serving import IndexSpec, NeighbourIndex, ServiceSettings, create_app, export_tables, open_tables

from http_helpers import call, serving


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("served")
    model = paddle.nn.Layer()
    model.items = DenseEmbedding(500, 8, padding_idx=0)
    rng = np.random.default_rng(0)
    model.items.weight.set_value(rng.normal(size=(500, 8)).astype("float32"))
    model.table_fields = lambda: {"items": "item"}
    vocabulary = Vocabulary.build("item", pa.table({"value": [f"item{i}" for i in range(499)],
                                                    "count": list(range(499, 0, -1))}))
    export_tables(model, folder, {"item": vocabulary}, {"item": "vocabulary"})
    tables = open_tables(folder, verify=True)
    index = NeighbourIndex.build(tables["items"].all_rows(), IndexSpec("cosine", "flat"), table="items")
    app = create_app(tables, {"items": index}, ServiceSettings(max_ids=100, max_body_bytes=4096,
                                                               batch_window_ms=5.0))
    with serving(app) as url:
        yield url, tables["items"], model.items.weight.numpy()


def test_rows_by_id_and_by_value(server):
    url, _, weight = server
    status, answer = call(url, "/rows", {"table": "items", "ids": [3, 0, 499]})
    assert status == 200 and answer["ids"] == [3, 0, 499]
    np.testing.assert_allclose(answer["rows"], weight[[3, 0, 499]], rtol=1e-6)
    status, answer = call(url, "/rows", {"values": ["item2", "never-seen"]})  # one table: the name is optional
    assert status == 200 and answer["ids"] == [3, 0] and answer["known"] == [True, False]


def test_neighbours_by_id_value_and_vector(server):
    url, _, weight = server
    unit = weight / np.maximum(np.linalg.norm(weight, axis=1, keepdims=True), 1e-12)
    truth = [i for i in np.argsort(-(unit @ unit[7])) if i != 7][:5]
    status, answer = call(url, "/neighbors", {"table": "items", "id": 7, "k": 5})
    assert status == 200 and [n["id"] for n in answer["neighbors"]] == truth
    assert answer["neighbors"][0]["value"] == f"item{truth[0] - 1}"
    status, by_value = call(url, "/neighbors", {"value": "item6", "k": 5})
    assert [n["id"] for n in by_value["neighbors"]] == truth
    status, by_vector = call(url, "/neighbors", {"vector": weight[7].tolist(), "k": 6})
    assert [n["id"] for n in by_vector["neighbors"]] == [7, *truth]


@pytest.mark.parametrize("path,body,raw,status,message", [
    ("/rows", None, b"{not json", 400, "the body is not JSON"),
    ("/rows", [1, 2], None, 400, "must be a JSON object"),
    ("/rows", {"table": "users", "ids": [1]}, None, 404, "table 'users' is not served"),
    ("/rows", {"ids": [1, 500]}, None, 404, r"id 500 is not in [0, 500)"),
    ("/rows", {"ids": [1.5]}, None, 400, "'ids' must hold integers only"),
    ("/rows", {"ids": []}, None, 400, "must be a non-empty list"),
    ("/rows", {"ids": [1], "values": ["a"]}, None, 400, "give either 'ids'"),
    ("/rows", {"ids": list(range(101))}, None, 413, "101 ids in one request; at most 100"),
    ("/rows", {"values": ["x" * 5000]}, None, 413, "at most 4,096"),
    ("/neighbors", {"id": 1, "k": 500}, None, 400, "k = 500 must be an integer in [1, 499]"),
    ("/neighbors", {"vector": [1, 2], "k": 3}, None, 400, "'vector' must be a list of 8 numbers"),
    ("/neighbors", {"k": 3}, None, 400, "give one of 'id', 'value' or 'vector'"),
])
def test_malformed_requests_get_4xx_and_the_service_keeps_serving(server, path, body, raw, status, message):
    url = server[0]
    got, answer = call(url, path, body, raw)
    assert got == status and message in answer["error"]
    assert call(url, "/health")[0] == 200


def test_concurrent_requests_share_batches_and_stats_report_them(server):
    url, store, weight = server
    before = call(url, "/stats")[1]
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda i: call(url, "/rows", {"ids": [i]}), range(1, 161)))
    assert all(s == 200 and np.allclose(a["rows"][0], weight[a["ids"][0]]) for s, a in answers)
    stats = call(url, "/stats")[1]
    batches = stats["batches"] - before["batches"]
    assert batches < 160  # some requests were answered together
    assert stats["failed"] == 0 and stats["latency_ms"]["p99"] > 0
    assert stats["tables"]["items"]["rows"] == 500 and stats["tables"]["items"]["resident_bytes"] > 0
