import json

from tools import bench_sharded


def test_a_peer_run_reports_both_ranks_or_the_first_error(tmp_path):
    (tmp_path / "run.0.json").write_text(json.dumps({"step_ms": 10.0}))
    (tmp_path / "run.1.json").write_text(json.dumps({"step_ms": 12.5}))
    assert bench_sharded._ranks(tmp_path / "run") == {"step_ms_by_rank": [10.0, 12.5]}
    (tmp_path / "run.1.json").write_text(json.dumps({"error": "RuntimeError: no sharding", "trace": "..."}))
    assert bench_sharded._ranks(tmp_path / "run") == {"error": "RuntimeError: no sharding"}
    (tmp_path / "run.0.json").unlink()
    assert bench_sharded._ranks(tmp_path / "run") == {"error": "no result (the rank died)"}


def test_the_peer_table_gives_the_slower_ranks_examples_per_second_and_refusals():
    rows = [{"side": "TorchRec", "placement": "row_wise", "batch": 4096, "error": "RuntimeError: no sharding"},
            {"side": "paddle_edo", "placement": "row", "batch": 4096, "step_ms_by_rank": [20.0, 25.0]}]
    table = bench_sharded.peers_markdown(rows, "4 tables")
    assert "| TorchRec | row_wise | refused: RuntimeError: no sharding | |" in table
    assert "| paddle_edo | row | 20.0 ms / 25.0 ms | 163,840 |" in table


def test_both_sides_of_the_peer_run_draw_the_same_ids():
    first, again = bench_sharded.zipf_ids(1000, (4, 8), 7), bench_sharded.zipf_ids(1000, (4, 8), 7)
    assert (first == again).all() and first.max() < 1000 and first.min() >= 1
