"""RedisTableStore behind the HTTP service: answers as the file store does, 503 while Redis is down and
recovery when it returns, a new version followed between requests."""
import time

import numpy as np
import pytest

from paddle_edo.serving import ServiceSettings, create_app, export_to_redis, open_redis_tables, open_tables

from http_helpers import call, serving
from redis_fixtures import export_folder, redis_server


@pytest.fixture
def served(tmp_path):
    """A redis-server holding one export, and the service over it; yields (url, server, folders)."""
    folders = tmp_path / "v1", tmp_path / "v2"
    export_folder(folders[0], seed=3)
    export_folder(folders[1], seed=4)
    server = redis_server()
    export_to_redis(folders[0], server.url, "served")
    app = create_app(open_redis_tables(server.url, "served"), settings=ServiceSettings(batch_window_ms=1.0))
    try:
        with serving(app) as url:
            yield url, server, folders
    finally:
        server.close()


def test_the_service_answers_from_redis_as_from_the_files(served):
    url, _, folders = served
    files = open_tables(folders[0])
    for name, store in files.items():
        ids = list(range(0, 300, 7))
        status, answer = call(url, "/rows", {"table": name, "ids": ids})
        assert status == 200, answer
        np.testing.assert_array_equal(np.asarray(answer["rows"], dtype=np.float32), store.rows(ids), err_msg=name)
    status, answer = call(url, "/rows", {"table": "int2", "values": ["item4", "item298"]})
    assert (status, answer["ids"], answer["known"]) == (200, [5, 299], [True, True])
    status, stats = call(url, "/stats")
    assert stats["tables"]["int8"]["store"] == "redis" and stats["tables"]["int8"]["version"] == 1
    assert 300 * 20 <= stats["tables"]["int8"]["redis_bytes"] < 300 * 20 + 1024  # int8 at dim 16: 20 bytes a row
    assert call(url, "/rows", {"table": "nope", "ids": [1]})[0] == 404


def test_503_while_redis_is_down_then_it_recovers_by_itself(served):
    url, server, folders = served
    expected = open_tables(folders[0])["dense"].rows([1, 2])
    assert call(url, "/rows", {"table": "dense", "ids": [1, 2]})[0] == 200
    server.stop()
    status, answer = call(url, "/rows", {"table": "dense", "ids": [1, 2]})
    assert status == 503 and answer["error"].startswith(f"Redis at {server.url} is unreachable while reading "
                                                        f"table 'dense'")
    assert call(url, "/health")[0] == 503
    assert call(url, "/rows", {"table": "dense", "values": ["item0"]})[0] == 503
    server.start()  # the same port and data
    for _ in range(50):
        status, answer = call(url, "/rows", {"table": "dense", "ids": [1, 2]})
        if status == 200:
            break
        time.sleep(0.1)
    assert status == 200
    np.testing.assert_array_equal(np.asarray(answer["rows"], dtype=np.float32), expected)
    assert call(url, "/health")[0] == 200
    assert call(url, "/stats")[1]["unavailable"] >= 3


def test_a_new_version_is_served_from_the_next_request(served):
    url, server, folders = served
    old, new = (open_tables(folder)["int4"].rows(np.arange(300)) for folder in folders)
    assert np.array_equal(np.asarray(call(url, "/rows", {"table": "int4", "ids": list(range(300))})[1]["rows"],
                                     dtype=np.float32), old)
    export_to_redis(folders[1], server.url, "served")
    answers = [np.asarray(call(url, "/rows", {"table": "int4", "ids": list(range(300))})[1]["rows"], dtype=np.float32)
               for _ in range(2)]
    assert np.array_equal(answers[0], old) and np.array_equal(answers[1], new)
    assert call(url, "/stats")[1]["tables"]["int4"]["version"] == 2
