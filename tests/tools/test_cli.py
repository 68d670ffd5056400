"""The command-line tools, run as a user runs them."""
import os
import subprocess
import sys

from paddle_edo.export import program_file

from conftest import ROOT

ENV = {**os.environ, "GLOG_minloglevel": "2"}


def run(tool, *args, cwd=ROOT):
    return subprocess.run([sys.executable, str(ROOT / "tools" / tool), *args], capture_output=True, text=True,
                          cwd=cwd, env=ENV, timeout=600)


def error_lines(result):
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def test_bad_config_key_stops_before_any_work_with_one_line(tmp_path):
    out = tmp_path / "out"
    result = run("train.py", "-c", "configs/movielens_dense.yaml", "-o", "train.epochz=1",
                 "-o", f"train.output_dir={out}")
    assert result.returncode == 2
    assert error_lines(result) == [result.stderr.strip().splitlines()[-1]]
    assert "train.epochz: unknown key" in result.stderr
    assert not out.exists()


def test_missing_config_file(tmp_path):
    result = run("train.py", "-c", str(tmp_path / "none.yaml"))
    assert result.returncode == 2 and "does not exist" in error_lines(result)[0]


def test_out_of_range_id_in_a_data_file_names_file_field_and_value(tmp_path):
    data = tmp_path / "clicks.csv"
    data.write_text("label,user,item\n1,1,2\n0,2,7\n")
    out = tmp_path / "out"
    result = run("train.py", "-c", "configs/movielens_dense.yaml", "-o", "data.name=csv",
                 "-o", f"data.files.path={data}", "-o", "data.files.ids=given",
                 "-o", "data.files.categorical={user: {num_embeddings: 5}, item: {num_embeddings: 5}}",
                 "-o", f"train.output_dir={out}")
    assert result.returncode == 2
    (line,) = error_lines(result)
    assert f"{data}: line 3, column 'item': '7' is not an integer id in [0, 5)" in line
    assert not out.exists()


def test_train_eval_export_infer_on_synthetic_csv_data(tmp_path):
    data = tmp_path / "synthetic.csv"
    made = run("get_data.py", "synthetic", "--out", str(data), "--num-samples", "6000", "--num-fields", "3",
               "--rows-per-field", "300")
    assert made.returncode == 0, made.stderr
    out = tmp_path / "out"
    args = ["-c", "configs/movielens_dense.yaml", "-o", "data.name=csv", "-o", f"data.files.path={data}",
            "-o", "data.files.ids=given", "-o", "data.files.categorical={f0: {num_embeddings: 300}, "
            "f1: {num_embeddings: 300}, f2: {num_embeddings: 300}}", "-o", "train.epochs=2",
            "-o", "model.hidden_units=[16]", "-o", f"train.output_dir={out}", "-o", "train.learning_rate=0.01",
            "-o", "embedding.type=quantized", "-o", "embedding.storage_format=int4", "-o", "embedding.mode=qat"]
    trained = run("train.py", *args)
    assert trained.returncode == 0, trained.stderr
    lines = trained.stdout.strip().splitlines()
    assert lines[-2].startswith("test auc ") and lines[-1].startswith("test logloss ")
    assert float(lines[-2].split()[-1]) > 0.6
    assert "estimated" in trained.stdout and "embeddings.f0" in trained.stdout
    (line,) = [l for l in trained.stdout.splitlines() if l.startswith("memory embeddings.f0 ")]
    assert "held (int4); optimizer state" in line  # the results table shows the packed table, after training
    assert "held (adam (by rows)); row gradients" in line  # the state its rows trained with (monitors read
    assert line.endswith("at their peak")                  # gradients), and the row gradients of a step
    evaluated = run("eval.py", *args)
    assert evaluated.returncode == 0, evaluated.stderr
    assert evaluated.stdout.strip().splitlines()[-2:] == lines[-2:]
    exported = run("export_model.py", *args)
    assert exported.returncode == 0, exported.stderr
    assert program_file(out / "inference" / "model").is_file() and (out / "inference" / "model.pdiparams").is_file()
    served = run("infer.py", *args)
    assert served.returncode == 0, served.stderr
    assert served.stdout.strip().splitlines()[-2:] == lines[-2:]  # Paddle Inference scores as training did


def test_every_error_of_the_toolkit_is_one_line_and_debug_shows_the_traceback(tmp_path):
    args = ("-c", "configs/movielens_dense.yaml", "-o", "train.device=gpu", "-o", f"train.output_dir={tmp_path}")
    result = run("train.py", *args)  # a layer-level error, not a config key: this machine has no GPU
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert error_lines(result) == [result.stderr.strip().splitlines()[-1]]
    assert "train.device = 'gpu'" in error_lines(result)[0]
    debug = run("train.py", *args, "--debug")
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "EdoRuntimeError" in debug.stderr


def test_the_package_raises_only_its_own_errors():
    import re

    from paddle_edo.errors import EdoError  # every kind derives from it and from the matching built-in

    builtin = re.compile(r"raise (ValueError|TypeError|IndexError|KeyError|RuntimeError|FileNotFoundError)\(")
    found = [f"{path.relative_to(ROOT)}:{number}" for path in sorted((ROOT / "paddle_edo").rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if builtin.search(line)]
    assert found == [] and issubclass(EdoError, Exception)


def test_a_raw_csv_trains_evaluates_exports_and_serves_raw_rows(tmp_path):
    made = run("get_data.py", "csv-example", "--out", str(tmp_path), "--rows", "6000")
    assert made.returncode == 0, made.stderr
    data = tmp_path / "clicks.csv"
    out = tmp_path / "out"
    args = ["-c", "configs/csv_example.yaml", "-o", f"data.files.path={data}", "-o", f"train.output_dir={out}",
            "-o", "train.epochs=2"]
    trained = run("train.py", *args)
    assert trained.returncode == 0, trained.stderr
    test_lines = trained.stdout.strip().splitlines()[-2:]
    assert float(test_lines[0].split()[-1]) > 0.6
    assert sorted(p.name for p in (out / "data").iterdir()) == [
        "plan.json", "vocabulary.city.parquet", "vocabulary.device.parquet", "vocabulary.tags.parquet",
        "vocabulary.user.parquet"]
    evaluated = run("eval.py", *args)
    assert evaluated.returncode == 0, evaluated.stderr
    assert evaluated.stdout.strip().splitlines()[-2:] == test_lines
    exported = run("export_model.py", *args)
    assert exported.returncode == 0, exported.stderr
    assert (out / "inference" / "data" / "plan.json").is_file()
    served = run("infer.py", *args)
    assert served.returncode == 0, served.stderr
    assert served.stdout.strip().splitlines()[-2:] == test_lines  # Paddle Inference == dygraph
    rows = tmp_path / "rows.csv"  # rows to score as a service gets them: no label, unseen values
    rows.write_text("user,city,device,tags,price,age,hour\nu00001,北京,ios,科技|游戏,12.5,33,20\n"
                    "new-user,火星,watch,,,,\n", encoding="utf-8")
    scored = run("infer.py", *args, "--input", str(rows), "--output", str(tmp_path / "p.npy"))
    assert scored.returncode == 0, scored.stderr
    assert f"{rows}: 2 rows scored" in scored.stdout and "auc" not in scored.stdout
    import numpy as np
    probabilities = np.load(tmp_path / "p.npy")
    assert probabilities.shape == (2,) and ((probabilities > 0) & (probabilities < 1)).all()
    bad = tmp_path / "bad.csv"
    bad.write_text("user,city,device,tags,price,age,hour\nu1,北京,ios,,cheap,33,20\n", encoding="utf-8")
    refused = run("infer.py", *args, "--input", str(bad))
    assert refused.returncode == 2
    assert error_lines(refused) == [f"error: {bad}: line 2, column 'price': 'cheap' is not a number"]
    check_tables_export_retrieval_and_service(args, out / "tables")


def check_tables_export_retrieval_and_service(args, tables):
    """The trained run's tables as files, their neighbours, and the HTTP service over them."""
    exported = run("export_tables.py", *args)
    assert exported.returncode == 0, exported.stderr
    assert "embeddings.user: rows" in exported.stdout and "values by raw value" in exported.stdout
    assert (tables / "tables.json").is_file() and (tables / "values.user.parquet").is_file()
    near = run("retrieve.py", "--tables", str(tables), "--table", "embeddings.city", "--values", "北京,火星", "-k", "3")
    assert near.returncode == 0, near.stderr
    lines = near.stdout.splitlines()
    assert lines[0].startswith("built a flat index") and lines[1].startswith("北京 (id ")
    assert "火星 (id 0) (not in the vocabulary: its unknown row):" in near.stdout
    assert sum(line.startswith("  ") for line in lines) == 6
    again = run("retrieve.py", "--tables", str(tables), "--table", "embeddings.city", "--ids", "1", "-k", "2")
    assert not again.stdout.startswith("built")  # the saved index is loaded
    wrong = run("retrieve.py", "--tables", str(tables), "--table", "embeddings.city", "--ids", "99", "-k", "2")
    assert error_lines(wrong) == ["error: table 'embeddings.city': id 99 is out of range [0, 11)"]
    import json
    import socket
    import urllib.request
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, str(ROOT / "tools" / "serve_tables.py"), "--tables", str(tables),
                               "--index", "embeddings.city", "--port", str(port)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)
    try:
        assert "serving 10 tables (1 with neighbours)" in server.stdout.readline()
        body = json.dumps({"table": "embeddings.user", "values": ["u00001", "nobody"]}).encode()
        for _ in range(100):
            try:
                answer = json.loads(urllib.request.urlopen(urllib.request.Request(
                    f"http://127.0.0.1:{port}/rows", data=body), timeout=5).read())
                break
            except OSError:
                import time
                time.sleep(0.1)
        assert answer["known"] == [True, False] and answer["ids"][1] == 0 and len(answer["rows"][0]) == 8
    finally:
        server.terminate()
        rest, _ = server.communicate(timeout=30)
    assert "stopped cleanly after 1 requests" in rest


def test_plan_writes_a_config_that_fits_and_train_plans_an_auto_config_itself(tmp_path):
    import yaml

    config = tmp_path / "small.yaml"
    config.write_text(yaml.safe_dump({
        "data": {"name": "synthetic", "synthetic": {"num_samples": 6000, "num_fields": 3, "rows_per_field": 400}},
        "model": {"hidden_units": [16]}, "embedding": {"dim": 8},
        "train": {"epochs": 1, "batch_size": 256, "output_dir": str(tmp_path / "run"), "log_every_steps": 1000}}))
    budget = 3 * 400 * 9 * 4 // 8                                   # an eighth of the fp32 tables
    result = run("plan.py", "-c", str(config), "--budget", str(budget), "--out", str(tmp_path / "plan.yaml"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "embeddings.f0" in result.stdout and f"wrote {tmp_path / 'plan.yaml'}" in result.stdout
    planned = yaml.safe_load((tmp_path / "plan.yaml").read_text())
    assert planned["embedding"]["tables"] and planned["embedding"]["type"] == "dense"
    result = run("train.py", "-c", str(config), "-o", "embedding.type=auto", "-o", f"embedding.budget={budget}B")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "planned config:" in result.stdout and (tmp_path / "run" / "plan.yaml").is_file()
    assert "test auc" in result.stdout
    result = run("plan.py", "-c", str(config), "--budget", "0")
    assert error_lines(result) == ["error: budget = '0' must be at least one byte; expected a positive number of bytes, "
                                   "or a number with a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"]
    # for training: tables as they train, the table rule's state and the row gradients, and the rule in the config
    result = run("plan.py", "-c", str(config), "--budget", "60KiB", "--for", "training", "--no-checks",
                 "--out", str(tmp_path / "training.yaml"))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "of row gradients a step at most" in result.stdout
    assert yaml.safe_load((tmp_path / "training.yaml").read_text())["train"]["table_optimizer"]["name"]


def test_a_trained_movielens_run_serves_from_redis_as_from_its_files(tmp_path):
    """export_tables.py --redis on a trained int8 MovieLens run, then serve_tables.py --redis: rows
    bit-identical to the file store's, found by raw value (films by title), neighbours named."""
    import json
    import socket
    import time
    import urllib.error
    import urllib.request

    import numpy as np

    from paddle_edo.serving import open_tables

    sys.path.insert(0, str(ROOT / "tests" / "serving"))
    from redis_fixtures import redis_server

    server = redis_server()
    args = ["-c", "configs/movielens_int8.yaml", "-o", "train.epochs=1", "-o", f"train.output_dir={tmp_path}"]
    try:
        trained = run("train.py", *args)
        assert trained.returncode == 0, trained.stderr
        exported = run("export_tables.py", *args, "--redis", server.url, "--namespace", "films")
        assert exported.returncode == 0, exported.stderr
        assert "embeddings.item_id: packed 1,683 x 16 int8" in exported.stdout
        assert f"redis: version 1 of namespace 'films' at {server.url} is current" in exported.stdout
        files = open_tables(tmp_path / "tables")
        assert files["embeddings.item_id"].value_of(1) == "Toy Story (1995)"
        wrong = run("serve_tables.py", "--redis", server.url, "--namespace", "nothing")
        assert error_lines(wrong) == [f"error: Redis at {server.url} holds no tables in namespace 'nothing': "
                                      f"tools/export_tables.py --redis writes them"]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        service = subprocess.Popen([sys.executable, str(ROOT / "tools" / "serve_tables.py"), "--redis", server.url,
                                    "--namespace", "films", "--index", "embeddings.item_id", "--port", str(port)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)

        def ask(path, body):
            for _ in range(100):
                try:
                    return json.loads(urllib.request.urlopen(urllib.request.Request(
                        f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode()), timeout=5).read())
                except urllib.error.HTTPError as refused:
                    return {"status": refused.code, **json.loads(refused.read())}
                except OSError:
                    time.sleep(0.1)
            raise AssertionError(f"{path} did not answer")

        try:
            assert f"serving {len(files)} tables (version 1) (1 with neighbours)" in service.stdout.readline()
            films = ["Toy Story (1995)", "GoldenEye (1995)"]
            answer = ask("/rows", {"table": "embeddings.item_id", "values": films})
            ids, known = files["embeddings.item_id"].ids_of_values(films)
            assert answer["ids"] == ids.tolist() and answer["known"] == [True, True]
            assert [files["embeddings.item_id"].value_of(i) for i in ids] == films
            rows = np.asarray(answer["rows"], dtype=np.float32)
            np.testing.assert_array_equal(rows, files["embeddings.item_id"].rows(ids))
            for name, store in files.items():
                some = np.arange(min(store.num_rows, 50))
                got = np.asarray(ask("/rows", {"table": name, "ids": some.tolist()})["rows"], dtype=np.float32)
                np.testing.assert_array_equal(got, store.rows(some), err_msg=name)
            assert ask("/rows", {"table": "embeddings.item_id", "values": ["no such film"]}) == {
                "status": 404, "error": "table 'embeddings.item_id': value 'no such film' has no id (and the table "
                                        "has no unknown row)"}
            near = ask("/neighbors", {"table": "embeddings.item_id", "value": "Toy Story (1995)", "k": 3})
            assert len(near["neighbors"]) == 3 and all(n["value"].endswith(")") for n in near["neighbors"])
        finally:
            service.terminate()
            service.communicate(timeout=30)
    finally:
        server.close()


def test_a_run_that_learns_nothing_says_so_and_fails(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)  # labels drawn apart from the ids: nothing to learn
    data = tmp_path / "noise.csv"
    rows = zip(rng.integers(0, 2, 20000), rng.integers(0, 50, 20000), rng.integers(0, 50, 20000))
    data.write_text("label,user,item\n" + "".join(f"{y},{u},{i}\n" for y, u, i in rows))
    result = run("train.py", "-c", "configs/movielens_dense.yaml", "-o", "data.name=csv", "-o", f"data.files.path={data}",
                 "-o", "data.files.ids=given", "-o", "data.files.categorical={user: {num_embeddings: 50}, "
                 "item: {num_embeddings: 50}}", "-o", "train.epochs=1", "-o", "monitor.enable=false",
                 "-o", f"train.output_dir={tmp_path / 'out'}")
    assert result.returncode == 1, result.stderr
    (line,) = error_lines(result)
    assert line.startswith("error: test AUC 0.") and "is no better than chance (scores that know nothing stay " \
                                                       "under 0.5" in line and "the run learned nothing" in line
    assert "test auc " in result.stdout  # the results are printed first
