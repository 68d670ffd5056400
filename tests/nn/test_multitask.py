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
    shared = MultiTaskEmbedding(50, 4, ["click", "rating"], table=table)
    ids = paddle.to_tensor([1, 7, 0])
    np.testing.assert_allclose(shared.for_task(ids, "click").numpy(), table(ids).numpy(), rtol=1e-6)
    np.testing.assert_array_equal(shared(ids).numpy(), table(ids).numpy())
    (shared.for_task(ids, "click").sum() + shared.for_task(ids, "rating").sum()).backward()
    grad = table.weight._grad_ivar()
    assert grad.is_selected_rows()  # both heads push sparse rows into the one table
    with pytest.raises(KeyError, match="unknown task 'ctr'; tasks: click, rating"):
        shared.for_task(ids, "ctr")
    with pytest.raises(ValueError, match="distinct names"):
        MultiTaskEmbedding(50, 4, ["a", "a"], table=table)


@pytest.mark.parametrize("collection", [True, False])
def test_the_shared_table_is_counted_once(collection):
    fields = [FieldSpec("user", 1000), FieldSpec("item", 500)]
    model = ClickAndRating(fields, {"type": "dense", "dim": 8, "collection": collection})
    report = memory_report(model)
    tables = (1000 + 500) * 8 * 4
    adapters = 2 * 2 * 8 * 8 * 4  # two fields x two tasks x dim^2 floats: the model's (collection) or the tables'
    assert report.held_bytes == report.estimated_bytes == tables + (0 if collection else adapters)
    held = model.adapters.parameters() if collection else [p for t in model.embeddings.values() for p in t.adapters.parameters()]
    assert sum(int(p.size) * 4 for p in held) == adapters
    click, rating = model([paddle.to_tensor([1, 2]), paddle.to_tensor([3, 4])])
    assert click.shape == [2] and rating.shape == [2]


def test_one_collection_lookup_gives_the_per_table_models_outputs():
    fields = [FieldSpec("user", 100), FieldSpec("genres", 20, max_len=4), FieldSpec("item", 50)]
    paddle.seed(2)
    batched = ClickAndRating(fields, {"type": "dense", "dim": 8})
    paddle.seed(2)
    per_table = ClickAndRating(fields, {"type": "dense", "dim": 8, "collection": False})
    for task in (0, 1):  # adapters away from the identity
        weights = np.random.default_rng(task).standard_normal((3, 8, 8)).astype("float32")
        batched.adapters[task].set_value(weights)
        for f, w in zip(fields, weights):
            per_table.embeddings[f.name].adapters[("click", "rating")[task]].weight.set_value(w)
    per_table.heads.set_state_dict(batched.heads.state_dict())
    for f in fields:
        per_table.embeddings[f.name].table.weight.set_value(batched.embeddings[f.name].weight.numpy())
    rng = np.random.default_rng(3)
    ids = [paddle.to_tensor(rng.integers(0, 100, 16)), paddle.to_tensor(rng.integers(0, 20, (16, 4))),
           paddle.to_tensor(rng.integers(0, 50, 16))]
    ids[1][0] = 0  # a bag of padding only
    with paddle.no_grad():
        for got, expected in zip(batched(ids), per_table(ids)):
            np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_the_engine_trains_both_tasks_from_a_config_and_exports_the_click_head(tmp_path):
    from paddle_edo.config import load_config
    from paddle_edo.engine import Engine
    from paddle_edo.export import Predictor, export_model, input_specs

    config = load_config(ROOT / "configs" / "movielens_multitask.yaml",
                         [f"train.output_dir={tmp_path}", "train.epochs=1", "monitor.enable=false"])
    engine = Engine(config)
    results = engine.fit()
    assert results["test_auc"] > 0.75 and results["test_rating_rmse"] < 1.0  # the mean predicts 1.13
    assert "valid_rating_rmse" in engine.history[0]
    report = engine.memory_report()
    assert [t.name for t in report.tables] == [f"embeddings.{f.name}" for f in engine.fields]  # each table once
    # the loss is exactly click BCE + 0.5 x rating MSE
    batch = {k: paddle.to_tensor(v[:64]) for k, v in
             {**engine.splits.test.ids, "label": engine.splits.test.labels, **engine.splits.test.targets}.items()}
    engine.model.eval()
    click, rating = engine.model([batch[f.name] for f in engine.fields])
    expected = (paddle.nn.functional.binary_cross_entropy_with_logits(click, batch["label"])
                + 0.5 * paddle.nn.functional.mse_loss(rating, batch["rating"].astype("float32")))
    assert float(engine.model.create_loss((click, rating), batch)) == pytest.approx(float(expected), rel=1e-6)
    prefix = export_model(engine.model, input_specs(engine.fields), tmp_path / "inference" / "model")
    logits = Predictor(prefix).run([engine.splits.test.ids[f.name][:256] for f in engine.fields])
    np.testing.assert_allclose(1 / (1 + np.exp(-logits)), engine.predict(engine.splits.test)[:256], atol=1e-5)


def test_multitask_configs_refuse_data_without_ratings_and_parameter_servers(tmp_path):
    from paddle_edo.config import load_config
    from paddle_edo.schema import ConfigError

    with pytest.raises(ConfigError, match="model.name = 'click_and_rating' needs rating targets"):
        load_config(ROOT / "configs" / "movielens_multitask.yaml", ["data.name=synthetic"])
    with pytest.raises(ConfigError, match="model.name = 'click_and_rating' is not supported with distributed"):
        load_config(ROOT / "configs" / "movielens_multitask.yaml", ["distributed.mode=ps"])
