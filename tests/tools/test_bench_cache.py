import json

from tools.bench import cache_benchmark


def test_the_step_times_alone_run_in_a_fresh_folder(tmp_path):
    assert cache_benchmark(quick=True, skip_hit_rates=True, threads=1, out=tmp_path) == 0
    written = json.loads((tmp_path / "cache_quick.json").read_text())
    assert written["hit_rates"] == {"hit_rates": []} and written["step_time"][0]["settings"]["rows"] == 100_000
    machine = written["machine"]  # the JSON report names its machine, as the markdown one opens with it
    assert machine["kernel_isa"] in ("avx512", "avx2", "portable") and machine["threads"] == 1
    assert machine["processor"] and machine["copy_gb_per_s"] > 0 and machine["paddle"]
    table = (tmp_path / "cache_quick.md").read_text()
    assert table.startswith("Processor: ") and "kernels' " in table and "copy bandwidth" in table
    assert "\n\n| device | rows | cache |" in table and "Belady" not in table
