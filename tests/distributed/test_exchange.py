"""The sharded step's exchanges across 2 and 3 real processes (gloo on localhost): each delivers every part to
its rank, bit for bit, empty parts included, and counts the bytes it sends."""
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, one_job_at_a_time

sys.path.insert(0, str(ROOT / "tests" / "distributed"))
from exchange_job import DTYPES, MESSAGES, part  # noqa: E402

ENV_KEYS = {"GLOG_minloglevel": "2", "PYTHONPATH": str(ROOT)}


@pytest.mark.parametrize("world", [2, 3])
def test_every_exchange_delivers_each_part_to_its_rank_and_counts_its_bytes(world, tmp_path):
    with one_job_at_a_time():
        done = subprocess.run([sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(world),
                               "--log_dir", str(tmp_path / "log"), str(ROOT / "tests" / "distributed" / "exchange_job.py"),
                               str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                              env={**os.environ, **ENV_KEYS})
    assert done.returncode == 0, "\n".join(p.read_text()[-2000:] for p in sorted((tmp_path / "log").glob("workerlog.*")))
    for name in ("pairwise", "all_gather", "all_to_all"):
        for rank in range(world):
            got = np.load(tmp_path / f"{name}.rank{rank}.npz")
            sent = 0
            for dtype in DTYPES:
                for message in range(MESSAGES):
                    for source in range(world):
                        expected = part(message, dtype, source, rank)
                        received = got[f"{dtype}.{message}.{source}"]
                        assert received.dtype == expected.dtype and np.array_equal(received, expected), (name, rank)
                    if name == "all_gather":  # every rank's parts, padded to the longest, to every other rank
                        longest = max(sum(part(message, dtype, s, d).size for d in range(world)) for s in range(world))
                        sent += (world - 1) * longest * np.dtype(dtype).itemsize
                    else:  # point to point: the parts meant for other ranks
                        sent += sum(part(message, dtype, rank, d).nbytes for d in range(world) if d != rank)
            assert int(got["bytes_sent"]) == sent, name
