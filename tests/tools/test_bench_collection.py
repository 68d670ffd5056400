import json

from tools.bench_collection import ENGINE_RUNS, main_collection, markdown


def test_every_candidate_steps_and_the_table_names_them(tmp_path):
    result = main_collection(cap=300, batch=32, dim=4, repeats=1, threads=1, peers=None, folder=tmp_path)
    measured = result["ms"]
    assert sum(name.endswith("[26 tables]") for name in measured) == 7
    assert sum(name.endswith("[100 tables]") for name in measured) == 7
    assert {"paddle_edo DeepFM, collection, fused lazy Adam", "paddle_edo DeepFM, per-table layers, Paddle lazy Adam"} \
        <= set(measured)
    assert all(value > 0 for value in measured.values())
    table = markdown(json.loads(json.dumps(result)))
    assert all(f"| {name} |" in table for name in measured)
    assert "criteo-synthetic" not in table  # the engine's runs only when asked (engine_rows)
    assert set(ENGINE_RUNS) == {"fp32 tables, collection", "fp32 tables, per-table layers", "1 MiB plan, collection",
                                "1 MiB plan, per-table layers"}
