"""Every script in examples/ runs as a user runs it (a subprocess, small sizes) and shows what it says."""
import re
import subprocess
import sys

import pytest

from paddle_edo.compat import PARAMETER_SERVER_BUILDS, has_parameter_servers

from conftest import ROOT

EXAMPLES = ROOT / "examples"


def run(script: str, *args: str, timeout: int = 900) -> str:
    result = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True,
                            timeout=timeout, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


def table_rows(output: str) -> dict[str, list[str]]:
    """Markdown table rows of the output by their first cell (the header row included)."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in output.splitlines()
            if line.startswith("| ")]
    return {row[0]: row[1:] for row in rows}


def number(text: str) -> float:
    return float(text.replace(",", "").rstrip("x"))


def test_every_example_is_tested_here():
    tested = set(re.findall(r'run\("(\w+\.py)"', (ROOT / "tests" / "examples" / "test_examples.py").read_text()))
    assert tested == {p.name for p in EXAMPLES.glob("*.py")}


def test_shared_tables_train_in_a_fraction_of_the_bytes():
    rows = table_rows(run("shared_tables.py", "--rows", "5000", "--samples", "20000", "--epochs", "1"))
    dense_auc = number(rows["dense"][0])
    assert dense_auc > 0.65
    assert number(rows["hash (10% of the rows)"][2]) == pytest.approx(10.0, abs=0.2)
    for name in ("hash (10% of the rows)", "qr (m = sqrt(N))", "mixed_dim (4 blocks)"):
        assert number(rows[name][0]) > dense_auc - 0.05 and number(rows[name][2]) > 2


def test_quantizing_a_trained_model_keeps_its_auc():
    rows = table_rows(run("quantize_trained_model.py", "--epochs", "1", "--formats", "int8", "int4"))
    assert number(rows["fp32"][0]) > 0.75
    assert abs(number(rows["int8"][1])) < 0.002 and abs(number(rows["int4"][1])) < 0.01
    assert number(rows["fp32"][2]) > number(rows["int8"][2]) > number(rows["int4"][2])


def test_a_cached_table_trains_as_the_resident_one():
    output = run("cached_table.py", "--rows", "100000", "--steps", "30")
    assert "on the device: 5,000 rows" in output
    assert "largest difference from the resident table after training: 0\n" in output
    assert 0.0 < float(re.search(r"hit rate ([\d.]+)", output).group(1)) < 1.0


@pytest.mark.skipif(not has_parameter_servers(), reason=f"parameter servers run on {PARAMETER_SERVER_BUILDS}")
def test_a_parameter_server_job_serves_its_pulled_tables():
    output = run("parameter_server_job.py", "--epochs", "1")
    trainer, pulled = map(float, re.search(r"test AUC ([\d.]+); .* one process: ([\d.]+)", output).groups())
    assert trainer > 0.74 and pulled == pytest.approx(trainer, abs=2e-4)


def test_char_word_embeddings_score_sentences_with_unseen_words():
    output = run("unseen_words.py", "--epochs", "1")
    rows = table_rows(output)
    for fusion in ("word", "gate"):
        assert number(rows[fusion][0]) > 0.75 and number(rows[fusion][1]) > 0.7
    assert len(re.findall(r"P\(positive\) word-only [\d.]+, char\+word [\d.]+ \(unseen words: ", output)) == 3


def test_new_words_are_scored_and_get_neighbours_from_their_characters():
    output = run("chinese_new_words.py", "--epochs", "1", "--words", "给力", "坑爹", "䶮䶮")
    rows = table_rows(output)
    for fusion in ("word", "gate"):
        assert number(rows[fusion][0]) > 0.75 and number(rows[fusion][1]) > 0.7 and int(rows[fusion][2]) > 50
    assert len(re.findall(r"P\(positive\) word-only [\d.]+, char\+word [\d.]+ \(words the table lacks: ", output)) == 4
    neighbours = dict(re.findall(r"^(\S+) \(unseen\) is nearest to: (.+)$", output, re.M))
    assert set(neighbours) == {"给力", "坑爹", "䶮䶮"} - set(re.findall(r"^(\S+) is known", output, re.M))
    assert neighbours["䶮䶮"] == "(no known character)"


def test_visualdl_monitoring_writes_the_series():
    output = run("visualdl_monitoring.py")
    assert int(re.search(r"(\d+) scalar series", output).group(1)) > 50
    assert float(re.search(r"sparse/embeddings.item_id/coverage_pct: ([\d.]+)", output).group(1)) > 50


def test_exports_serve_what_dygraph_computes():
    rows = table_rows(run("export_and_serve.py"))
    assert set(rows) == {"export", "int8, composite ops", "int8, fused kernels", "fp32"}
    for name in ("int8, composite ops", "int8, fused kernels", "fp32"):
        assert number(rows[name][2]) < 1e-5
    assert number(rows["int8, composite ops"][0]) < number(rows["fp32"][0])


def test_embedding_bags_pool_both_input_forms_and_train_sparse_rows():
    output = run("embedding_bag.py", "--rows", "20000", "--batch", "512")
    assert "padded and offsets forms agree: largest difference 0\n" in output
    assert "gradient: sparse True" in output and "increasing True" in output
    assert len(re.findall(r"EmbeddingBag (fp32|int8): [\d.]+ ms", output)) == 2


def test_the_multitask_example_learns_both_tasks():
    lines = run("movielens_multitask.py", "--epochs", "1", "--storage-format", "int8").strip().splitlines()
    assert float(lines[-2].split()[-1]) > 0.75   # test click auc
    assert float(lines[-1].split()[-1]) < 1.0    # test rating rmse (predicting the mean gives 1.13)


def test_criteo_files_stream_into_training_and_serve_raw_rows():
    output = run("criteo_files.py", "--rows", "40000")
    assert re.search(r"rows per split \{'train': 3\d{4}, 'valid': \d{4}, 'test': \d{4}\}", output)
    assert "dense features: I1, I2," in output
    assert float(re.search(r"test AUC ([\d.]+)", output).group(1)) > 0.6
    assert "scored 4 raw rows (labelled: False)" in output
    assert "the unseen value deadbeef maps to the unknown id: True" in output


def test_trained_tables_serve_rows_and_neighbours_without_paddle_objects():
    output = run("serve_tables.py", "--rows", "8000", "--epochs", "1")
    assert "embeddings.user (packed, int8)" in output
    assert re.search(r"user table: [\d,]+ x 8 int8, [\d,]+ bytes on disk, 0 resident after opening", output)
    assert "u00000 -> id 1, someone-new -> id 0 (known: [True, False])" in output
    nearest = re.search(r"users nearest to u00000: (u\d+) .*\nPOST /rows", output).group(1)
    assert f"POST /neighbors u00000 -> ['{nearest}'" in output
    assert "known [True, False]" in output and "0 failed" in output and "service stopped" in output


def test_tables_served_from_redis_equal_the_files_and_switch_versions_whole():
    sys.path.insert(0, str(ROOT / "tests" / "serving"))
    from redis_fixtures import redis_server

    redis_server().close()  # skips when there is no redis-server
    output = run("redis_serving.py", "--rows", "8000")
    assert "u00000 -> id 1, someone-new -> id 0 (known: [True, False]); every row equals the file store's: True" \
        in output
    assert re.search(r"Redis holds 1\d\.\d bytes a row of the int8 user table \(8 values\)", output)
    assert re.search(r"exported version 2 while a reader read \d+ times: every answer one version whole: True", output)
    assert "the reader now serves version 2: True" in output


def test_a_planned_model_fits_its_budget_where_int8_does_not():
    out = run("plan_memory_budget.py", "--fraction", "0.1", "--epochs", "1")
    rows = table_rows(out)
    assert rows["plan"][2] == "yes" and rows["int8 everywhere"][2] == "no"
    assert float(rows["plan"][0]) > 0.70
    assert "smallest reachable" in out and "embeddings.item_id" in out


def test_the_table_batched_collection_trains_as_per_table_layers():
    output = run("table_batched_collection.py", "--tables", "5", "--rows", "2000", "--batch", "256", "--steps", "4")
    assert "largest difference from the per-table layers after 4 steps: 0\n" in output
    rows = table_rows(output)
    assert number(rows["collection"][0]) > 0 and number(rows["layers"][0]) > 0


def test_sharded_tables_spread_rows_over_ranks_and_train_the_one_process_model():
    output = run("sharded_tables.py", "--rows", "20000", "--steps", "12")
    for rank, query in ((0, "the whole query table"), (1, "no query rows")):  # a hash table: whole on one rank
        assert (f"rank {rank} of 2: holds user rows 10,000 of 20,000, item rows 5,000 of 10,000, hour rows 24 "
                f"(whole), {query}") in output
    worst = float(re.search(r"largest difference from one process, relative to the weights: (\S+)", output).group(1))
    assert worst <= 5e-5
