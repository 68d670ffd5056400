"""export_to_redis against a real redis-server: every kind and format read back bit-identical to the file
store, versions switched atomically and old ones removed, readers never see a mix, and failures half-way
leave the current version as it was."""
import threading
import time

import numpy as np
import pytest
import redis

from paddle_edo.errors import EdoKeyError, EdoValueError, StoreUnavailableError
from paddle_edo.serving import export_to_redis, open_redis_tables, open_tables
from paddle_edo.serving.redis_layout import version_prefix

from redis_fixtures import export_folder, redis_server


@pytest.fixture(scope="module")
def server():
    running = redis_server()
    yield running
    running.close()


@pytest.fixture(scope="module")
def two_exports(tmp_path_factory):
    """Two export folders of the same tables with different weights."""
    first, second = tmp_path_factory.mktemp("v1"), tmp_path_factory.mktemp("v2")
    export_folder(first, seed=3)
    export_folder(second, seed=4)
    return first, second


def keys_of(server, namespace, version):
    client = redis.Redis.from_url(server.url)
    return list(client.scan_iter(match=version_prefix(namespace, version) + "*"))


def test_every_kind_and_format_reads_back_bit_identical(server, two_exports):
    folder = two_exports[0]
    done = export_to_redis(folder, server.url, namespace="identical")
    assert (done.version, done.current, done.removed) == (1, True, ())
    files, stores = open_tables(folder), open_redis_tables(server.url, "identical")
    assert set(stores) == set(files) and len(files) == 11
    ids = np.concatenate([np.arange(300), [5, 5, 0, 299]])
    for name, store in stores.items():
        assert (store.kind, store.format, store.dim, store.num_rows) == \
               (files[name].kind, files[name].format, files[name].dim, files[name].num_rows)
        np.testing.assert_array_equal(store.rows(ids), files[name].rows(ids), err_msg=name)
    big = np.array([2**40, 12345678901, 0])  # a hash table takes any id
    for name in ("hashed", "concat"):
        np.testing.assert_array_equal(stores[name].rows(big), files[name].rows(big), err_msg=name)
    for values in (["item0", "item5", "never", None], [7, "item298"]):
        for got, want in zip(stores["int8"].ids_of_values(values), files["int8"].ids_of_values(values)):
            np.testing.assert_array_equal(got, want)
    assert stores["dense"].values_of([6, 0, 299]) == [files["dense"].value_of(i) for i in (6, 0, 299)] == \
           ["item5", None, "item298"]
    np.testing.assert_array_equal(stores["hashed"].ids_of_values(["a"])[0], files["hashed"].ids_of_values(["a"])[0])
    with pytest.raises(EdoKeyError, match="exported without its values"):
        stores["qr"].ids_of_values(["a"])
    np.testing.assert_array_equal(stores["int4"].all_rows(chunk=128), files["int4"].all_rows())


def test_packed_rows_cost_redis_what_they_cost_on_disk(server, tmp_path):
    import paddle

    from paddle_edo.nn import DenseEmbedding, QuantizedEmbedding
    from paddle_edo.serving import export_tables

    model = paddle.nn.Layer()
    model.fp32 = DenseEmbedding(20000, 64)
    model.int8 = QuantizedEmbedding(20000, 64, "int8", weight=model.fp32.weight, packed=True)
    export_tables(model, tmp_path)
    export_to_redis(tmp_path, server.url, "sizes")
    stores = open_redis_tables(server.url, "sizes")
    fp32, int8 = stores["fp32"].held_bytes(), stores["int8"].held_bytes()
    assert 20000 * 256 <= fp32 < 20000 * 256 * 1.02  # blocks, not a key per row: under 2% overhead
    assert 20000 * 68 <= int8 < 20000 * 68 * 1.02
    assert fp32 / int8 > 3.7  # 3.76x as on disk
    assert stores["int8"].info()["redis_bytes"] == int8


def test_versions_switch_atomically_and_old_ones_go(server, two_exports):
    first, second = two_exports
    namespace = "versions"
    for _ in range(3):
        done = export_to_redis(first, server.url, namespace, keep=2)
    assert (done.version, done.removed) == (3, (1,))
    assert keys_of(server, namespace, 1) == [] and keys_of(server, namespace, 2) and keys_of(server, namespace, 3)
    pinned = open_redis_tables(server.url, namespace, version=2)["dense"]
    following = open_redis_tables(server.url, namespace)["dense"]
    assert (pinned.follow, following.follow, following.version) == (False, True, 3)
    old_rows = open_tables(first)["dense"].rows(np.arange(300))
    new_rows = open_tables(second)["dense"].rows(np.arange(300))
    done = export_to_redis(second, server.url, namespace, keep=3)
    assert (done.version, done.removed) == (4, ())
    np.testing.assert_array_equal(following.rows(np.arange(300)), old_rows)  # this answer: its version, whole
    np.testing.assert_array_equal(following.rows(np.arange(300)), new_rows)  # then the new current one
    assert following.version == 4
    np.testing.assert_array_equal(pinned.rows(np.arange(300)), old_rows)  # a pinned reader keeps its version
    export_to_redis(second, server.url, namespace, keep=1)
    with pytest.raises(Exception, match="version 2 .* no longer whole"):
        pinned.rows([1])
    assert keys_of(server, namespace, 2) == [] and keys_of(server, namespace, 4) == []
    with pytest.raises(EdoKeyError, match="has no version 2; it has 5"):
        open_redis_tables(server.url, namespace, version=2)


def test_a_reader_during_an_export_reads_one_version_whole(server, two_exports):
    first, second = two_exports
    namespace = "consistent"
    export_to_redis(first, server.url, namespace)
    ids = np.arange(300)
    versions = {tuple(open_tables(folder)[name].rows(ids).ravel()[:64]) for folder in two_exports
                for name in ("int8",)}
    expected = [open_tables(folder)["int8"].rows(ids) for folder in two_exports]
    store = open_redis_tables(server.url, namespace)["int8"]
    answers, stop = [], threading.Event()

    def read():
        while not stop.is_set():
            answers.append(store.rows(ids))

    reader = threading.Thread(target=read)
    reader.start()
    try:  # small blocks and a pause after each write: the reader runs many times during the export
        export_to_redis(second, server.url, namespace, block_rows=16, progress=lambda *_: time.sleep(0.002))
        time.sleep(0.05)
    finally:
        stop.set()
        reader.join()
    assert len(versions) == 2 and len(answers) > 20
    kinds = [next(i for i, rows in enumerate(expected) if np.array_equal(answer, rows)) for answer in answers]
    assert kinds[0] == 0 and kinds[-1] == 1 and kinds == sorted(kinds)  # old ones, then new ones: never a mix


def test_a_block_redis_refuses_leaves_the_current_version(two_exports, tmp_path):
    first, large = two_exports[0], tmp_path
    export_folder(large, rows=20000)
    small = redis_server(**{"proto-max-bulk-len": "1mb"})
    try:
        export_to_redis(first, small.url, "faults")
        with pytest.raises(EdoValueError) as failure:
            export_to_redis(large, small.url, "faults", block_rows=20000)  # a 1.28 MB block: too large
        message = str(failure.value)
        assert "\n" not in message and "version 2 stopped" in message and "version 1 stays current" in message
        assert "table 'dense': a block of 1,280,000 bytes is larger than this Redis takes in one value " \
               "(proto-max-bulk-len 1,048,576)" in message
        assert "it had written nothing" in message and keys_of(small, "faults", 2) == []
        stores = open_redis_tables(small.url, "faults")
        assert stores["dense"].version == 1
        np.testing.assert_array_equal(stores["dense"].rows(np.arange(300)), open_tables(first)["dense"].rows(np.arange(300)))
    finally:
        small.close()


def test_redis_stopping_mid_export_leaves_the_current_version(two_exports):
    first, second = two_exports
    server = redis_server()
    try:
        export_to_redis(first, server.url, "stopped")

        def stop_after_a_table(table, written, blocks):
            if table == "int8":
                server.stop()

        with pytest.raises(StoreUnavailableError) as failure:
            export_to_redis(second, server.url, "stopped", progress=stop_after_a_table, lease_s=0.5)
        message = str(failure.value)
        assert "\n" not in message and "unreachable" in message and "version 1 stays current" in message
        assert "will be removed by the next export" in message
        server.start()  # its append-only file brings the data back
        assert keys_of(server, "stopped", 2)  # the partial version is still there
        stores = open_redis_tables(server.url, "stopped")
        assert stores["int8"].version == 1
        np.testing.assert_array_equal(stores["int8"].rows(np.arange(300)), open_tables(first)["int8"].rows(np.arange(300)))
        time.sleep(0.6)  # the failed export's lease runs out
        done = export_to_redis(second, server.url, "stopped")
        assert done.version == 3 and keys_of(server, "stopped", 2) == []
        np.testing.assert_array_equal(stores["int8"].rows([1]), open_tables(first)["int8"].rows([1]))
        np.testing.assert_array_equal(stores["int8"].rows(np.arange(300)), open_tables(second)["int8"].rows(np.arange(300)))
    finally:
        server.close()


def test_an_export_leaves_the_version_another_export_is_writing(server, two_exports):
    first, second = two_exports
    namespace = "concurrent"
    export_to_redis(first, server.url, namespace)
    started, go_on = threading.Event(), threading.Event()

    def wait_midway(table, written, blocks):
        if table == "int8" and not started.is_set():
            started.set()
            go_on.wait(30)

    results = []
    slow = threading.Thread(target=lambda: results.append(export_to_redis(second, server.url, namespace,
                                                                          progress=wait_midway)))
    slow.start()
    started.wait(30)
    try:
        done = export_to_redis(first, server.url, namespace)  # version 3, while version 2 is half written
        assert done.version == 3 and keys_of(server, namespace, 2)  # version 2's keys stayed
    finally:
        go_on.set()
        slow.join()
    (late,) = results  # version 2 finished after 3 was current: it is not served, and its keys go
    assert (late.version, late.current, 2 in late.removed) == (2, False, True) and keys_of(server, namespace, 2) == []
    assert open_redis_tables(server.url, namespace)["int8"].version == 3


def test_bad_urls_names_and_arguments_get_one_line(server, two_exports):
    folder = two_exports[0]
    with pytest.raises(EdoValueError, match=r"Redis URL 'http://127.0.0.1:6379': it must start with redis://"):
        export_to_redis(folder, "http://127.0.0.1:6379")
    with pytest.raises(StoreUnavailableError, match=r"Redis at redis://127.0.0.1:1/0 is unreachable"):
        open_redis_tables("redis://127.0.0.1:1/0")
    with pytest.raises(EdoValueError, match="namespace 'a b'"):
        export_to_redis(folder, server.url, "a b")
    with pytest.raises(EdoValueError, match="keep = 0"):
        export_to_redis(folder, server.url, keep=0)
    with pytest.raises(EdoValueError, match="block_rows = 0"):
        export_to_redis(folder, server.url, block_rows=0)
    with pytest.raises(EdoKeyError, match="holds no tables in namespace 'nothing-here'"):
        open_redis_tables(server.url, "nothing-here")
    export_to_redis(folder, server.url, "named")
    with pytest.raises(EdoKeyError, match="has no table 'missing'; it has dense"):
        open_redis_tables(server.url, "named", names=["missing"])
    with pytest.raises(EdoValueError, match="version = 0"):
        open_redis_tables(server.url, "named", version=0)
    client = redis.Redis.from_url(server.url)
    client.set("future:current", 1)
    client.set("future:v1:manifest", '{"layout": 99, "tables": {}}')
    with pytest.raises(Exception, match="has Redis layout 99; this paddle_edo reads layout 1"):
        open_redis_tables(server.url, "future")
    with pytest.raises(Exception, match="id 300 is out of range"):
        open_redis_tables(server.url, "named")["dense"].rows([300])
