import contextlib
import fcntl
import os
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("GLOG_minloglevel", "2")
# the kernels serve wherever they can, untimed: the tests compare them with the composite ops, bit for bit
# (tests/kernels/test_calibration.py times them as users' processes do)
os.environ.setdefault("PADDLE_EDO_KERNEL_PATHS", "fused")


@contextlib.contextmanager
def one_job_at_a_time() -> Iterator[None]:
    """Multi-process jobs of the suite one at a time across its xdist workers: launchers started at once on one
    machine hand out the same free ports (a rank's gloo connection is then refused)."""
    with open(Path(tempfile.gettempdir()) / "paddle_edo_tests_jobs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def small_synthetic_config(output_dir, **train):
    """A config that trains in seconds on planted synthetic data."""
    from paddle_edo.config import load_config

    overrides = {
        "data": {"name": "synthetic",
                 "synthetic": {"num_samples": 12000, "num_fields": 4, "rows_per_field": 500, "seed": 3}},
        "model": {"hidden_units": [16]},
        "embedding": {"type": "dense", "dim": 8},
        "train": {"epochs": 2, "batch_size": 256, "learning_rate": 0.01, "num_threads": 1,
                  "output_dir": str(output_dir), "log_every_steps": 1000, **train},
    }
    return load_config(base=overrides)


@pytest.fixture
def synthetic_config(tmp_path):
    return lambda **train: small_synthetic_config(tmp_path / "run", **train)


@pytest.fixture(scope="session")
def movielens():
    from paddle_edo.data import load_movielens

    return load_movielens()
