import json
import subprocess
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "serving"))
from redis_fixtures import redis_server  # noqa: E402


def test_the_redis_bench_runs_in_a_fresh_folder(tmp_path):
    redis_server().close()  # skips when there is no redis-server
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "bench.py"), "redis", "--rows", "3000",
                             "--lookups", "30", "--repeats", "1", "--seconds", "0", "--out", str(tmp_path)],
                            capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr
    written = json.loads((tmp_path / "redis.json").read_text())
    export = written["export"]
    assert 3.6 < export["fp32_vs_int8_redis_bytes"] < 3.9  # 256 against 68 bytes a row, and the blocks' slack
    assert 256 <= export["fp32"]["bytes_per_row"] < 262 and 68 <= export["int8"]["bytes_per_row"] < 70
    assert {(r["format"], r["ids"], r["store"]) for r in written["lookups"]} == {
        (f, n, s) for f in ("fp32", "int8") for n in (1, 10, 100) for s in ("redis", "mmap")}
    table = (tmp_path / "redis.md").read_text()
    assert table.startswith("Processor: ") and "service: not measured (seconds is 0)" in table
