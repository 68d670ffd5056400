"""Collective (DataParallel) training: two real processes on localhost under tools/launch.py."""
import os
import re
import subprocess
import sys

import pytest

from paddle_edo.config import load_config
from paddle_edo.engine import Engine
from paddle_edo.schema import ConfigError

from conftest import ROOT, one_job_at_a_time

CONFIG = ROOT / "configs" / "collective_movielens.yaml"


@pytest.fixture(autouse=True)
def _one_job_at_a_time():
    with one_job_at_a_time():
        yield



def test_two_ranks_train_in_step_and_match_one_process(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "launch.py"), "-c", str(CONFIG),
                             "-o", f"train.output_dir={tmp_path / 'dp'}"], cwd=ROOT, capture_output=True, text=True,
                            timeout=300, env={**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-3000:]
    logs = [(tmp_path / "dp" / "log" / f"workerlog.{rank}").read_text() for rank in (0, 1)]
    aucs = [float(re.search(r"^test auc (\S+)", log, re.M).group(1)) for log in logs]
    assert aucs[0] == aucs[1]  # the ranks hold the same parameters
    assert (tmp_path / "dp" / "checkpoints" / "last.pdckpt").is_file()
    assert not (tmp_path / "dp" / "train.rank1.log").read_text().count("error")
    single = Engine(load_config(CONFIG, [f"train.output_dir={tmp_path / 'one'}", "distributed.mode=none"])).fit()
    assert abs(aucs[0] - single["test_auc"]) < 0.01


def test_collective_mode_refuses_sparse_gradients_and_a_missing_launcher(tmp_path):
    with pytest.raises(ConfigError, match="needs embedding.sparse = false: .* does not all-reduce sparse"):
        load_config(CONFIG, ["embedding.sparse=true"])
    with pytest.raises(ConfigError, match="runs under the launcher"):
        Engine(load_config(CONFIG, [f"train.output_dir={tmp_path}"]))
