import pytest

from paddle_edo.compat import has_parameter_servers
from paddle_edo.config import load_config, validate
from paddle_edo.errors import EdoDeprecationWarning
from paddle_edo.schema import ConfigError

from conftest import ROOT

CONFIG = ROOT / "configs" / "movielens_dense.yaml"


def error_of(*overrides, path=CONFIG):
    with pytest.raises(ConfigError) as info:
        load_config(path, list(overrides))
    return str(info.value)


def test_every_shipped_config_validates():
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        if path.name.startswith("ps_") and not has_parameter_servers():
            with pytest.raises(ConfigError, match="needs a Paddle build with parameter-server support.*2.6.2"):
                load_config(path)
            continue
        config = load_config(path)
        assert set(config) == {"data", "model", "embedding", "monitor", "distributed", "export", "train"}


def test_defaults_are_filled_and_overrides_are_typed_by_yaml():
    config = load_config(CONFIG, ["train.epochs=1", "model.hidden_units=[8, 4]", "train.learning_rate=1e-2",
                                  "embedding.type=dense", "train.resume=true"])
    assert config["train"]["epochs"] == 1
    assert config["model"]["hidden_units"] == [8, 4]
    assert config["train"]["learning_rate"] == pytest.approx(0.01)
    assert config["train"]["resume"] is True
    assert config["train"]["amp"] == {"enable": False, "level": "O1", "dtype": "float16"}
    assert config["embedding"] == {"type": "dense", "dim": 16, "sparse": True, "min_rows": 0, "collection": True,
                                   "tables": {}, "init_std": 0.01, "deduplicate": True}


def test_integer_given_for_a_float_is_widened():
    assert load_config(CONFIG, ["train.learning_rate=1"])["train"]["learning_rate"] == 1.0


def test_unknown_key_names_the_path_and_the_allowed_keys():
    message = error_of("train.epochz=3")
    assert "train.epochz" in message and "unknown key" in message and "epochs" in message
    assert str(CONFIG) in message


def test_unknown_section():
    assert "trainer: unknown section" in error_of("trainer.epochs=3")


def test_wrong_type_names_key_value_and_type():
    message = error_of("train.epochs=abc")
    assert "train.epochs = 'abc'" in message and "an integer" in message


def test_out_of_range_value():
    message = error_of("train.learning_rate=-0.5")
    assert "train.learning_rate = -0.5" in message and ">= 0.0" in message


def test_choice_lists_the_allowed_values():
    message = error_of("train.device=tpu")
    assert "train.device = 'tpu'" in message and "'cpu'" in message and "'gpu'" in message


def test_list_items_are_checked():
    assert "model.hidden_units" in error_of("model.hidden_units=[8, 0]")
    assert "item of the wrong type" in error_of("model.hidden_units=[8, x]")


def test_embedding_type_comes_from_the_registry():
    message = error_of("embedding.type=nonesuch")
    assert "embedding.type = 'nonesuch'" in message and "'dense'" in message


def test_embedding_keys_depend_on_the_type():
    message = error_of("embedding.storage_format=int8")
    assert "embedding.storage_format: unknown key" in message and "init_std" in message


def test_adamw_is_refused_with_the_reason():
    message = error_of("train.optimizer=adamw")
    assert "adamw" in message and "sparse" in message and "'adam'" in message


def test_split_must_add_up_to_one():
    assert "data.split" in error_of("data.split=[0.5, 0.1, 0.1]")


def test_files_data_needs_a_path_and_columns():
    assert "data.files.path" in error_of("data.name=csv")
    assert "data.files.categorical" in error_of("data.name=csv", "data.files.path=x.csv")
    assert "data.files.categorical.user.min_count = 0" in error_of(
        "data.name=csv", "data.files.path=x.csv", "data.files.categorical={user: {min_count: 0}}")
    assert "data.files.categorical.user.num_embeddings" in error_of(
        "data.name=csv", "data.files.path=x.csv", "data.files.categorical={user: {ids: given}}")
    assert "data.files.label" in error_of("data.name=csv", "data.files.path=x.csv", "data.files.categorical=[a]",
                                          "data.files.label='rating >= high'")
    assert "data.files.categorical.a.colour: unknown key" in error_of(
        "data.name=csv", "data.files.path=x.csv", "data.files.categorical={a: {colour: 1}}")


def test_hashed_ids_need_a_table_that_takes_any_id():
    message = error_of("data.name=csv", "data.files.path=x.csv", "data.files.categorical=[a]", "data.files.ids=hash")
    assert "column 'a' has hashed ids" in message and "'hash'" in message and "'dense'" in message
    config = load_config(None, ["data.name=csv", "data.files.path=x.csv", "data.files.categorical=[a]",
                                "embedding.type=hash"])
    assert config["data"]["files"]["ids"] == "hash"  # auto: hashed for a table that takes any id


def test_the_old_csv_section_moves_to_data_files_with_a_warning():
    with pytest.warns(EdoDeprecationWarning, match="data.csv is deprecated"):
        config = load_config(None, ["data.name=csv", "data.csv.path=x.csv", "data.csv.fields={user: 5, tags: 8}",
                                    "data.csv.label=click"])
    files = config["data"]["files"]
    assert files["path"] == "x.csv" and files["label"] == "click"
    assert files["categorical"]["user"] == {"ids": "given", "num_embeddings": 5, "separator": "|"}
    with pytest.warns(EdoDeprecationWarning):
        assert "data.csv.fields.user = 0" in error_of("data.name=csv", "data.csv.path=x.csv",
                                                      "data.csv.fields={user: 0}")


def test_missing_file_and_malformed_overrides(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    assert "must look like key.path=value" in error_of("train.epochs")
    assert "empty part" in error_of("train..epochs=1")
    assert "is not a section" in error_of("train.epochs.x=1")
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_validate_rejects_a_non_mapping():
    with pytest.raises(ConfigError, match="mapping"):
        validate([1, 2])


QUANT = ROOT / "configs" / "movielens_int8.yaml"


def test_quantized_embedding_keys_are_validated():
    config = load_config(QUANT, ["embedding.storage_format=int4", "embedding.mode=qat"])
    assert config["embedding"]["storage_format"] == "int4" and config["embedding"]["mode"] == "qat"
    assert "'int3' is not allowed" in error_of("embedding.storage_format=int3", path=QUANT)
    assert "embedding.mode = 'fast'" in error_of("embedding.mode=fast", path=QUANT)


def test_the_old_key_dtype_still_reads_with_a_warning():
    with pytest.warns(EdoDeprecationWarning, match="embedding.dtype is now embedding.storage_format"):
        config = load_config(None, ["embedding.type=quantized", "embedding.dtype=int4"])
    assert config["embedding"]["storage_format"] == "int4" and "dtype" not in config["embedding"]
    assert "give only embedding.storage_format" in error_of("embedding.dtype=int4", path=QUANT)


def test_low_precision_refuses_pairs_that_cannot_train():
    message = error_of("embedding.mode=low_precision", "train.optimizer=adam", path=QUANT)
    assert "train.optimizer = 'adam'" in message and "'sgd', 'adagrad'" in message
    message = error_of("embedding.mode=low_precision", "embedding.storage_format=int4", "train.optimizer=sgd", path=QUANT)
    assert "embedding.storage_format = 'int4'" in message and "qat" in message
    message = error_of("embedding.mode=low_precision", "train.optimizer=sgd", "train.amp.enable=true", path=QUANT)
    assert "train.amp.enable" in message
    load_config(QUANT, ["embedding.mode=low_precision", "train.optimizer=adagrad"])


def test_concat_tables_are_refused_with_first_order_tables():
    message = error_of("embedding.type=qr", "embedding.operation=concat")
    assert "embedding.operation = 'concat'" in message and "model.first_order" in message
    assert "embedding.combine = 'concat'" in error_of("embedding.type=hash", "embedding.combine=concat")
    load_config(CONFIG, ["embedding.type=qr", "embedding.operation=concat", "model.first_order=false"])


def test_single_tables_take_their_own_sections():
    config = load_config(CONFIG, ["embedding.tables={embeddings.item_id: {type: hash, num_buckets: 64, "
                                  "storage_format: int8}, first_order.zip3: {type: quantized, storage_format: fp16}}"])
    tables = config["embedding"]["tables"]
    assert tables["embeddings.item_id"]["num_buckets"] == 64 and tables["embeddings.item_id"]["num_hashes"] == 2
    assert tables["first_order.zip3"]["mode"] == "ptq" and "dim" not in tables["first_order.zip3"]


@pytest.mark.parametrize("entry,message", [
    ("{embeddings.item_id: {type: hash, dim: 4}}", "embedding.tables.embeddings.item_id.dim: a single table cannot set it"),
    ("{embeddings.item_id: {type: zip}}", "embedding.tables.embeddings.item_id.type = 'zip' is not a registered"),
    ("{embeddings.item_id: {type: hash, num_bucket: 4}}", "embedding.tables.embeddings.item_id.num_bucket: unknown key"),
    ("{embeddings.item_id: 3}", "embedding.tables.embeddings.item_id = 3 must be a mapping"),
    ("{embeddings.item_id: {type: quantized, storage_format: int4, mode: low_precision}}",
     "embedding.storage_format = 'int4' cannot train in mode 'low_precision'"),
])
def test_bad_single_table_sections_are_refused_naming_the_key(entry, message):
    assert message in error_of(f"embedding.tables={entry}")


def test_a_table_the_model_does_not_have_is_refused_with_its_tables(tmp_path):
    from paddle_edo.engine import Engine

    config = load_config(CONFIG, [f"train.output_dir={tmp_path}", "embedding.tables={embeddings.items: {type: hash}}"])
    with pytest.raises(ConfigError, match="embedding.tables.embeddings.items: DeepFM has no table of that name; its "
                                          "tables: embeddings.user_id, "):
        Engine(config)


def test_models_that_build_tables_from_one_section_refuse_single_sections():
    message = error_of("model.name=click_and_rating", "embedding.tables={embeddings.item_id: {type: hash}}")
    assert "model.name = 'click_and_rating' builds its tables from the embedding section alone" in message
