"""Bags of tables sharded by rows, pooled after the exchange or at the owners, across 2 and 3 real processes
(gloo on localhost): both give what one process's collection gives, train the same rows with SGD and a
table rule, and pooling at the owners sends fewer bytes for long bags of rarely repeated ids, which ``auto``
then takes."""
import os
import subprocess
import sys

import numpy as np
import paddle
import pytest

from conftest import ROOT, one_job_at_a_time
from paddle_edo.nn import EmbeddingCollection

sys.path.insert(0, str(ROOT / "tests" / "distributed"))
from bags_job import LAYOUTS, OPTIMIZERS, POOLING, POOLINGS, optimizer_for, train, whole_tables  # noqa: E402

ENV = {**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module", params=[2, 3])
def job(request, tmp_path_factory):
    world = request.param
    root = tmp_path_factory.mktemp(f"bags{world}")
    with one_job_at_a_time():
        done = subprocess.run([sys.executable, "-m", "paddle.distributed.launch", "--nproc_per_node", str(world),
                               "--log_dir", str(root / "log"), str(ROOT / "tests" / "distributed" / "bags_job.py"),
                               str(root)], cwd=ROOT, capture_output=True, text=True, timeout=600, env=ENV)
    assert done.returncode == 0, "\n".join(p.read_text()[-3000:] for p in sorted((root / "log").glob("workerlog.*")))
    return root, world


def one_process(layout: str, name: str) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    tables = whole_tables()
    outputs = train(EmbeddingCollection(tables, POOLING), optimizer_for(name, tables), layout, slice(None))
    return outputs, {key: table.weight.numpy() for key, table in tables.items()}


@pytest.mark.parametrize("name", OPTIMIZERS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_ranks_pool_and_train_bags_as_one_process_does_wherever_they_pool(job, layout, name):
    root, world = job
    outputs, tables = one_process(layout, name)
    for pooling in POOLINGS:
        ranks = [np.load(root / f"{pooling}-{layout}-{name}.rank{rank}.npz") for rank in range(world)]
        for step, expected in enumerate(outputs):
            got = np.concatenate([r[f"out{step}"] for r in ranks])
            np.testing.assert_allclose(got, expected, rtol=0, atol=2e-6, err_msg=f"{pooling} step {step}")
        for key, whole in tables.items():  # rank r holds rows r, r + N, ...
            for rank, r in enumerate(ranks):
                np.testing.assert_allclose(r[f"table.{key}"], whole[rank::world], rtol=0, atol=2e-6,
                                           err_msg=f"{pooling} {key}")


def test_pooling_at_the_owners_sends_fewer_bytes_for_long_bags_and_auto_takes_the_fewer(job):
    root, world = job
    for layout in LAYOUTS:
        sent = {pooling: sum(int(np.load(root / f"{pooling}-{layout}-sgd.rank{rank}.npz")["bytes_sent"])
                             for rank in range(world)) for pooling in POOLINGS}
        assert sent["at_owner"] < sent["after_exchange"], sent
        # auto pools the long bags at their owners and fetches the short, repeated ones' few rows
        assert sent["auto"] < sent["at_owner"], sent
