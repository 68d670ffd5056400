import numpy as np
import pytest

import paddle_edo.checkpoint as checkpoint_module
from paddle_edo.checkpoint import CheckpointError, DivergedError, load_checkpoint, save_checkpoint
from paddle_edo.data import make_synthetic_ctr
from paddle_edo.engine import Callback, Engine
from paddle_edo.metrics import auc
from paddle_edo.nn import DenseEmbedding

from conftest import small_synthetic_config


def params(engine):
    return {k: v.numpy().copy() for k, v in engine.model.state_dict().items()}


def test_training_learns_the_planted_rule_and_writes_its_outputs(synthetic_config):
    config = synthetic_config()
    table, logit = make_synthetic_ctr(**config["data"]["synthetic"], return_logit=True)
    best = auc(table.labels, logit)  # the planted rule itself
    engine = Engine(config)
    results = engine.fit()
    assert results["test_auc"] > 0.5 + 0.6 * (best - 0.5)
    assert engine.history[1]["loss"] < engine.history[0]["loss"]
    out = engine.output_dir
    assert (out / "checkpoints" / "last.pdckpt").is_file() and (out / "config.yaml").is_file()
    assert "epoch 2/2" in (out / "train.log").read_text()
    assert not list((out / "checkpoints").glob(".*tmp*"))


def test_runs_are_repeatable(tmp_path):
    a = Engine(small_synthetic_config(tmp_path / "a")).fit()
    b = Engine(small_synthetic_config(tmp_path / "b")).fit()
    assert a["test_auc"] == b["test_auc"] and a["test_logloss"] == b["test_logloss"]


class StopAt(Callback):
    """Interrupts a run after a given step, as a crash would."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, engine, step, logs):
        if step == self.step:
            raise KeyboardInterrupt


# An epoch here has 38 steps; checkpoints every 10 steps and at epoch ends. The crash comes inside
# step 60's callbacks, before that step's save.
@pytest.mark.parametrize("stop_step,saved_step", [(21, 20), (41, 40), (60, 50)])
def test_a_resumed_run_ends_exactly_like_an_uninterrupted_one(tmp_path, stop_step, saved_step):
    full = Engine(small_synthetic_config(tmp_path / "full", checkpoint_every_steps=10))
    expected = full.fit()
    interrupted = Engine(small_synthetic_config(tmp_path / "run", checkpoint_every_steps=10),
                         callbacks=[StopAt(stop_step)])
    with pytest.raises(KeyboardInterrupt):
        interrupted.fit()
    saved = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pdckpt")
    assert saved["global_step"] == saved_step
    resumed = Engine(small_synthetic_config(tmp_path / "run", checkpoint_every_steps=10, resume=True))
    results = resumed.fit()
    assert results["test_auc"] == expected["test_auc"]
    assert results["test_logloss"] == expected["test_logloss"]
    for key, value in params(full).items():
        np.testing.assert_array_equal(params(resumed)[key], value, err_msg=key)


def test_an_interrupted_save_keeps_the_last_good_checkpoint(synthetic_config, monkeypatch):
    engine = Engine(synthetic_config(epochs=1))
    engine.fit()
    path = engine.checkpoint_path
    before = path.read_bytes()

    def broken_save(state, file):
        with open(file, "wb") as f:
            f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_module.paddle, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        engine.save()
    assert path.read_bytes() == before
    assert load_checkpoint(path)["epoch"] == 1
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.pdckpt"]


@pytest.mark.parametrize("every", [0, 10], ids=["at the epoch's end", "at a mid-epoch checkpoint"])
def test_a_diverged_run_stops_before_saving(synthetic_config, every):
    engine = Engine(synthetic_config(epochs=2, optimizer="sgd", learning_rate=1e30, checkpoint_every_steps=every))
    where = "epoch 1 step 10" if every else "epoch 1"
    with pytest.raises(DivergedError, match=f"training, {where}: the mean loss is nan; training stopped before "
                                            f"saving, so the last checkpoint stays as it was"):
        engine.fit()
    assert not engine.checkpoint_path.exists()


def test_resuming_with_another_model_config_is_refused(tmp_path):
    Engine(small_synthetic_config(tmp_path / "run", epochs=1)).fit()
    config = small_synthetic_config(tmp_path / "run", epochs=2, resume=True)
    config["embedding"]["dim"] = 4
    with pytest.raises(CheckpointError, match=r"embedding.dim was 8, now 4"):
        Engine(config).fit()


@pytest.mark.parametrize("changed,key,before,after", [
    ({"name": "rowwise_adagrad"}, "name", "'adam'", "'rowwise_adagrad'"),
    ({"state_dtype": "bfloat16"}, "state_dtype", "'float32'", "'bfloat16'")])
def test_resuming_with_another_table_rule_or_state_format_is_refused(tmp_path, changed, key, before, after):
    Engine(small_synthetic_config(tmp_path / "run", epochs=1)).fit()
    config = small_synthetic_config(tmp_path / "run", epochs=2, resume=True,
                                    table_optimizer={"name": "adam", **changed})
    with pytest.raises(CheckpointError, match=rf"trained its tables with train.table_optimizer.{key} {before}, this "
                                              rf"run with {after}; resume it with the same train.table_optimizer"):
        Engine(config).fit()
    resumed = small_synthetic_config(tmp_path / "run", epochs=2, resume=True, table_optimizer={"name": "adam"})
    assert Engine(resumed).fit()["test_auc"] > 0.5  # the same rule, named or not, goes on


def test_damaged_checkpoint_is_reported(tmp_path):
    bad = tmp_path / "bad.pdckpt"
    bad.write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="cannot be read"):
        load_checkpoint(bad)
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "none")


def test_callbacks_see_every_step_and_epoch(synthetic_config):
    seen = {"steps": 0, "epochs": [], "begin": 0, "end": None}

    class Recorder(Callback):
        def on_train_begin(self, engine):
            seen["begin"] += 1

        def on_step_end(self, engine, step, logs):
            seen["steps"] += 1
            assert np.isfinite(logs["loss"])

        def on_epoch_end(self, engine, epoch, logs):
            seen["epochs"].append((epoch, round(logs["valid_auc"], 6)))

        def on_train_end(self, engine, logs):
            seen["end"] = logs

    engine = Engine(synthetic_config(), callbacks=[Recorder()])
    results = engine.fit()
    assert seen["begin"] == 1 and seen["steps"] == 2 * len(engine.train_batches)
    assert [e for e, _ in seen["epochs"]] == [1, 2] and seen["end"] is results


def test_amp_on_cpu_warns_and_trains_in_fp32(synthetic_config):
    with pytest.warns(RuntimeWarning, match="needs a GPU"):
        engine = Engine(synthetic_config(epochs=1, amp={"enable": True, "level": "O1", "dtype": "float16"}))
    assert engine.amp is False
    assert np.isfinite(engine.fit()["test_logloss"])


def quantized_config(tmp_path, name, **embedding):
    config = small_synthetic_config(tmp_path / name)
    config["embedding"] = {"type": "quantized", "dim": 8, "sparse": True, "init_std": 0.01, **embedding}
    return config


def test_ptq_run_reports_fp32_and_packed_test_metrics(tmp_path):
    fp32 = Engine(small_synthetic_config(tmp_path / "fp32")).fit()
    engine = Engine(quantized_config(tmp_path, "ptq", storage_format="int8", mode="ptq"))
    results = engine.fit()
    assert results["test_auc_before_packing"] == fp32["test_auc"]  # ptq trains exactly the fp32 model
    assert abs(results["test_auc"] - fp32["test_auc"]) < 0.002
    assert all(t.dtype == "int8" for t in engine.memory_report().tables)


def test_training_the_epochs_alone_leaves_the_tables_unpacked_and_matches_fit(tmp_path):
    fitted = Engine(quantized_config(tmp_path / "fit", "ptq", storage_format="int8", mode="ptq"))
    fitted.fit()
    engine = Engine(quantized_config(tmp_path / "epochs", "ptq", storage_format="int8", mode="ptq"))
    history = engine.train_epochs()
    assert [h["valid_auc"] for h in history] == [h["valid_auc"] for h in fitted.history]
    assert all(t.dtype == "float32" for t in engine.memory_report().tables)
    assert (tmp_path / "epochs" / "ptq" / "train.log").read_text().count("valid auc") == len(history)


def test_low_precision_training_learns_and_resumes_exactly(tmp_path):
    def config(name, **train):
        c = quantized_config(tmp_path, name, storage_format="int8", mode="low_precision")
        c["train"].update(optimizer="adagrad", learning_rate=0.05, checkpoint_every_steps=10, **train)
        return c

    full = Engine(config("full"))
    expected = full.fit()
    assert expected["test_auc"] > 0.7
    interrupted = Engine(config("run"), callbacks=[StopAt(45)])
    with pytest.raises(KeyboardInterrupt):
        interrupted.fit()
    resumed = Engine(config("run", resume=True))
    assert resumed.fit()["test_auc"] == expected["test_auc"]
    for key, value in full.model.state_dict().items():
        np.testing.assert_array_equal(resumed.model.state_dict()[key].numpy(), value.numpy(), err_msg=key)


def cached_config(output_dir, **train):
    config = small_synthetic_config(output_dir, **train)
    config["embedding"].update(type="cached", cache_ratio=0.6, policy="lfu", host="mmap",
                               path=str(output_dir / "tables"))
    return config


def test_a_cached_run_resumes_exactly_and_exports(tmp_path):
    full = Engine(cached_config(tmp_path / "full", checkpoint_every_steps=10))
    expected = full.fit()
    statistics = full.cache_statistics()["embeddings.f0"]
    assert 0 < statistics["hit_rate"] < 1 and statistics["evictions"] > 0
    interrupted = Engine(cached_config(tmp_path / "run", checkpoint_every_steps=10), callbacks=[StopAt(21)])
    with pytest.raises(KeyboardInterrupt):
        interrupted.fit()
    resumed = Engine(cached_config(tmp_path / "run", checkpoint_every_steps=10, resume=True))
    results = resumed.fit()
    assert (results["test_auc"], results["test_logloss"]) == (expected["test_auc"], expected["test_logloss"])
    for key, value in params(full).items():
        np.testing.assert_array_equal(params(resumed)[key], value, err_msg=key)
    assert expected["test_auc"] > 0.6
    assert sorted(resumed.load_for_serving(resumed.checkpoint_path))[:2] == ["embeddings.f0", "embeddings.f1"]
    assert all(isinstance(layer, DenseEmbedding) for layer in resumed.model.embeddings.values())
    assert resumed.evaluate("test")["auc"] == expected["test_auc"]


def test_a_checkpoint_from_before_an_option_existed_still_resumes(tmp_path):
    Engine(small_synthetic_config(tmp_path / "run", epochs=1)).fit()
    path = tmp_path / "run" / "checkpoints" / "last.pdckpt"
    state = load_checkpoint(path)
    del state["config"]["model"]["task_weights"]  # as written before model.task_weights was added
    save_checkpoint(state, path)
    engine = Engine(small_synthetic_config(tmp_path / "run", epochs=2, resume=True))
    engine.fit()
    assert engine.epoch == 2


def criteo_config(folder, output_dir, **files):
    from paddle_edo.config import load_config

    return load_config(base={
        "data": {"name": "criteo", "files": {"path": str(folder), **files}},
        "model": {"hidden_units": [32]}, "embedding": {"type": "dense", "dim": 8},
        "train": {"epochs": 2, "batch_size": 512, "learning_rate": 0.003, "num_threads": 1,
                  "output_dir": str(output_dir), "log_every_steps": 1000}})


@pytest.fixture(scope="module")
def criteo_files(tmp_path_factory):
    from paddle_edo.data import write_criteo_synthetic

    folder = tmp_path_factory.mktemp("criteo")
    write_criteo_synthetic(folder, 30_000, files=2, seed=5)
    return folder


def test_criteo_files_stream_or_load_and_learn_the_planted_signal(criteo_files, tmp_path):
    streamed = Engine(criteo_config(criteo_files, tmp_path / "s", in_memory=False, shuffle_buffer=4096))
    assert type(streamed.splits.train).__name__ == "StreamedSplit"
    streamed_results = streamed.fit()
    loaded = Engine(criteo_config(criteo_files, tmp_path / "m", in_memory=True))
    loaded_results = loaded.fit()
    assert streamed_results["test_auc"] > 0.66 and loaded_results["test_auc"] > 0.66
    assert abs(streamed_results["test_auc"] - loaded_results["test_auc"]) < 0.02  # same rows, another order
    # evaluation reads the same test rows either way
    assert streamed.evaluate("test")["auc"] == pytest.approx(streamed_results["test_auc"], abs=1e-12)
    resumed = Engine(criteo_config(criteo_files, tmp_path / "s", in_memory=False, shuffle_buffer=4096))
    resumed.load(streamed.checkpoint_path)
    assert resumed.evaluate("test")["auc"] == pytest.approx(streamed_results["test_auc"], abs=1e-7)


def test_the_same_criteo_file_through_a_csv_config_gives_the_same_model(criteo_files, tmp_path):
    via_criteo = Engine(criteo_config(criteo_files, tmp_path / "a")).fit()
    columns = ["label"] + [f"I{i}" for i in range(1, 14)] + [f"C{i}" for i in range(1, 27)]
    config = criteo_config(criteo_files, tmp_path / "b")
    config["data"] = {**config["data"], "name": "csv", "files": {
        **config["data"]["files"], "separator": "\t", "header": False, "column_names": columns,
        "label": "label", "categorical": columns[14:], "numeric": columns[1:14]}}
    via_csv = Engine(config).fit()
    assert via_csv["test_auc"] == via_criteo["test_auc"]


def test_dense_features_train_under_to_static_as_in_dygraph(criteo_files, tmp_path):
    dygraph = Engine(criteo_config(criteo_files, tmp_path / "d"))
    static_config = criteo_config(criteo_files, tmp_path / "t")
    static_config["train"]["to_static"] = True
    static = Engine(static_config)
    static.model.set_state_dict(dygraph.model.state_dict())
    batch = next(iter(dygraph.splits.test.iter_batches(256, shuffle=False, seed=0, epoch=0)))
    import paddle
    tensors = {k: paddle.to_tensor(v) for k, v in batch.items()}
    dygraph.model.eval()
    static.model.eval()
    np.testing.assert_allclose(static.model(static.model.inputs(tensors)).numpy(),
                               dygraph.model(dygraph.model.inputs(tensors)).numpy(), rtol=1e-5, atol=1e-6)
    assert static.fit()["test_auc"] > 0.6
