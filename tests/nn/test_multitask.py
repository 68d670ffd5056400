import subprocess
import sys

import numpy as np
import paddle
import pytest

from paddle_edo import memory_report
from paddle_edo.data import FieldSpec
from paddle_edo.models import ClickAndRating
from paddle_edo.nn import DenseEmbedding, MultiTaskEmbedding

from conftest import ROOT


def test_tasks_share_one_table_and_start_from_the_same_vectors():
    table = DenseEmbedding(50, 4, padding_idx=0, init_std=0.5)
    shared = MultiTaskEmbedding(table, ["click", "rating"])
    ids = paddle.to_tensor([1, 7, 0])
    np.testing.assert_allclose(shared.for_task(ids, "click").numpy(), table(ids).numpy(), rtol=1e-6)
    np.testing.assert_array_equal(shared(ids).numpy(), table(ids).numpy())
    (shared.for_task(ids, "click").sum() + shared.for_task(ids, "rating").sum()).backward()
    grad = table.weight._grad_ivar()
    assert grad.is_selected_rows()  # both heads push sparse rows into the one table
    with pytest.raises(KeyError, match="unknown task 'ctr'; tasks: click, rating"):
        shared.for_task(ids, "ctr")
    with pytest.raises(ValueError, match="distinct names"):
        MultiTaskEmbedding(table, ["a", "a"])


def test_the_shared_table_is_counted_once():
    fields = [FieldSpec("user", 1000), FieldSpec("item", 500)]
    model = ClickAndRating(fields, {"type": "dense", "dim": 8})
    report = memory_report(model)
    tables = (1000 + 500) * 8 * 4
    adapters = 2 * 2 * 8 * 8 * 4  # two fields x two tasks x dim^2 floats
    assert report.held_bytes == report.estimated_bytes == tables + adapters
    click, rating = model([paddle.to_tensor([1, 2]), paddle.to_tensor([3, 4])])
    assert click.shape == [2] and rating.shape == [2]


def test_the_movielens_multitask_example_learns_both_tasks():
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "movielens_multitask.py"), "--epochs", "1",
                             "--dtype", "int8"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert float(lines[-2].split()[-1]) > 0.75   # test click auc
    assert float(lines[-1].split()[-1]) < 1.0    # test rating rmse (predicting the mean gives 1.13)
    assert "int8" in result.stdout
