"""The default experiment reaches its quality target on real data."""
from paddle_edo.config import load_config
from paddle_edo.engine import Engine

from conftest import ROOT


def test_default_movielens_experiment_reaches_auc_077(tmp_path):
    config = load_config(ROOT / "configs" / "movielens_dense.yaml", [f"train.output_dir={tmp_path}"])
    engine = Engine(config)
    report = engine.memory_report()
    assert all(t.estimated_bytes == t.held_bytes for t in report.tables)
    results = engine.fit()
    assert results["test_auc"] >= 0.77, results
