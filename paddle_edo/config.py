"""Experiment configs: one YAML per experiment, ``-o a.b=c`` overrides, validated before any work."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Iterable

import yaml

from .nn.char_word import FUSIONS
from .nn.ps_table import PSEmbedding
from .nn.registry import check_embedding_section, embedding_class
from .schema import ConfigError, Option, check_section

OPTIMIZERS = ("adam", "adagrad", "sgd", "momentum", "rmsprop")

SCHEMA: dict[str, dict[str, Any]] = {
    "data": {
        "name": Option("movielens", str, choices=("movielens", "synthetic", "csv", "chnsenti"),
                       doc="which data set"),
        "cache_dir": Option(None, str, nullable=True, doc="where fetched data is unpacked"),
        "split": Option([0.8, 0.1, 0.1], list, item_kind=float, low=0.0, high=1.0,
                        doc="train / valid / test fractions"),
        "seed": Option(2024, int, low=0, doc="seed of the split"),
        "synthetic": {
            "num_samples": Option(200_000, int, low=10),
            "num_fields": Option(8, int, low=1),
            "rows_per_field": Option(100_000, int, low=2),
            "zipf_alpha": Option(1.05, float, low=0.0),
            "seed": Option(7, int, low=0),
        },
        "csv": {
            "path": Option(None, str, nullable=True, doc="CSV file with a header row"),
            "label": Option("label", str, doc="label column (0/1)"),
            "fields": Option({}, dict, doc="column name -> vocabulary size"),
            "multi_value_separator": Option("|", str),
        },
        "text": {  # data.name: chnsenti (Chinese review sentiment): segmentation and vocabularies
            "max_words": Option(48, int, low=1, doc="words kept per sentence"),
            "max_chars_per_word": Option(4, int, low=1, doc="characters kept per word"),
            "min_freq": Option(1, int, low=1, doc="training-split count a word needs to enter the vocabulary"),
            "max_word_vocab": Option(None, int, low=3, nullable=True, doc="cap on word ids, [PAD] and [UNK] included"),
            "max_char_vocab": Option(None, int, low=3, nullable=True, doc="cap on character ids"),
            "hmm": Option(True, bool, doc="jieba's HMM for words missing from its dictionary"),
            "user_dicts": Option([], list, item_kind=str, doc="jieba user dictionaries"),
        },
    },
    "model": {
        "name": Option("deepfm", str, choices=("deepfm", "text_classifier", "click_and_rating")),
        "hidden_units": Option([256, 128], list, item_kind=int, low=1),
        "dropout": Option(0.0, float, low=0.0, high=0.95),
        "first_order": Option(True, bool, doc="per-id first-order weights (tables of dim 1)"),
        "fm": Option(True, bool, doc="factorisation-machine pairwise term"),
        "pooling": Option("mean", str, choices=("mean", "sum"), doc="pooling of multi-valued fields"),
        "fusion": Option("gate", str, choices=FUSIONS, doc="text_classifier: how word and character vectors fuse"),
        "word_dropout": Option(0.0, float, low=0.0, high=0.95,
                               doc="text_classifier: share of known training words treated as unknown"),
        "task_weights": {  # click_and_rating: the loss is click x BCE + rating x MSE
            "click": Option(1.0, float, low=0.0, doc="click_and_rating: weight of the click (BCE) loss"),
            "rating": Option(0.5, float, low=0.0, doc="click_and_rating: weight of the rating (MSE) loss"),
        },
        "pretrained": {  # text_classifier: a user's word2vec files (text, or binary when named .bin)
            "words": Option(None, str, nullable=True, doc="vectors for the word table"),
            "chars": Option(None, str, nullable=True, doc="vectors for the character table"),
        },
    },
    "embedding": {},  # validated by the registry: common keys plus the chosen type's own
    "monitor": {
        "enable": Option(False, bool, doc="VisualDL monitoring of sparse gradients and memory"),
        "every_n_steps": Option(10, int, low=1),
        "logdir": Option(None, str, nullable=True, doc="default: <train.output_dir>/vdl"),
        "memory": Option(True, bool, doc="also log bytes per table and cache statistics"),
        "memory_every_n_steps": Option(100, int, low=1, doc="interval of the memory figures, which change slowly"),
        "histogram_every_n_steps": Option(100, int, low=0, doc="row-gradient norm histograms (0: none)"),
        "background": Option(None, bool, nullable=True,
                             doc="merge, summarise and write on a worker thread, the training thread only "
                                 "copying a logged step's rows (null: when a core is free beside "
                                 "train.num_threads)"),
        "alerts": {
            "nan": Option(True, bool),
            "norm_factor": Option(10.0, float, low=1.0, doc="alert when a max row norm exceeds this x its median"),
            "dense_gradient": Option(True, bool),
            "coverage_patience": Option(2000, int, low=1, doc="steps without a newly updated row"),
            "norm_window": Option(50, int, low=5),
        },
    },
    "distributed": {
        "mode": Option("none", str, choices=("none", "ps", "collective"),
                       doc="ps: Fleet parameter servers; collective: DataParallel (under paddle.distributed.launch)"),
        "ps_mode": Option("async", str, choices=("async", "geo", "sync"), doc="sync is refused (segfaults in 2.6.2)"),
        "k_steps": Option(100, int, low=1, doc="geo: local steps between pushes"),
        "pull_dense_every": Option(10, int, low=1, doc="async: steps between pulls of the dense parameters"),
        # feature admission and table kind: the PS table layer's own options
        **{k: v for k, v in PSEmbedding.config_options.items() if k != "geo"},
        "show_click_threshold": Option(10.0, float, low=0.0,
                                       doc="entry show_click: the score an id needs (Paddle's embedx_threshold)"),
        "nonclick_coeff": Option(0.1, float, low=0.0, doc="entry show_click: score of a show without a click"),
        "click_coeff": Option(1.0, float, low=0.0, doc="entry show_click: score of a click"),
        "sparse_learning_rate": Option(None, float, low=0.0, nullable=True,
                                       doc="servers' rate for the tables (default: the tables' rate)"),
        "shard_num": Option(4, int, low=1, doc="shards per sparse table on the servers"),
        "timeout_s": Option(1800, int, low=10, doc="every process of the job exits non-zero after this long"),
        "init_timeout_s": Option(120, int, low=10,
                                 doc="a trainer whose fleet.init_worker() has not returned after this long exits "
                                     "non-zero"),
    },
    "export": {
        "dir": Option(None, str, nullable=True, doc="where tools/export_model.py writes (default: <output_dir>/inference)"),
        "batch_size": Option(4096, int, low=1, doc="batch size of tools/infer.py"),
        "fused_kernels": Option(False, bool, doc="shared tables' lookups as paddle_edo's fused CPU kernels in the "
                                                 "saved program (faster CPU serving; the predictor must load "
                                                 "paddle_edo's kernels)"),
    },
    "train": {
        "epochs": Option(3, int, low=1),
        "batch_size": Option(512, int, low=1),
        "optimizer": Option("adam", str, choices=OPTIMIZERS),
        "learning_rate": Option(0.001, float, low=0.0),
        "embedding_learning_rate": Option(None, float, low=0.0, nullable=True,
                                          doc="learning rate of embedding tables (default: learning_rate)"),
        "seed": Option(2024, int, low=0),
        "num_threads": Option(2, int, low=1, doc="CPU math threads"),
        "device": Option("auto", str, choices=("auto", "cpu", "gpu")),
        "output_dir": Option("output/default", str),
        "resume": Option(False, (bool, str), doc="true: last checkpoint in output_dir; or a path"),
        "checkpoint_every_steps": Option(0, int, low=0, doc="0: only at epoch ends"),
        "log_every_steps": Option(50, int, low=1),
        "to_static": Option(False, bool, doc="train and evaluate the model under paddle.jit.to_static (SOT: the "
                                             "tables run in dynamic graph, the rest is compiled)"),
        "amp": {
            "enable": Option(False, bool),
            "level": Option("O1", str, choices=("O1", "O2")),
            "dtype": Option("float16", str, choices=("float16", "bfloat16")),
        },
    },
}


def validate(raw: dict[str, Any]) -> dict[str, Any]:
    """Return a complete config (defaults filled) or raise ConfigError naming the bad key."""
    if not isinstance(raw, dict):
        raise ConfigError(f"a config must be a mapping of sections ({', '.join(SCHEMA)}), got {type(raw).__name__}")
    unknown = [k for k in raw if k not in SCHEMA]
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown section; allowed sections: {', '.join(SCHEMA)}")
    optimizer = (raw.get("train") or {}).get("optimizer") if isinstance(raw.get("train"), dict) else None
    if isinstance(optimizer, str) and optimizer.lower() == "adamw":
        raise ConfigError("train.optimizer = 'adamw' is refused: Paddle 2.6.2's AdamW aborts the process on "
                          "sparse embedding gradients; use 'adam' (lazy mode, row-wise) or another of "
                          + ", ".join(repr(o) for o in OPTIMIZERS))
    config = {}
    for section, options in SCHEMA.items():
        if section == "embedding":
            config[section] = check_embedding_section(section, raw.get(section))
        else:
            config[section] = check_section(section, raw.get(section), options)
    embedding_class(config["embedding"]["type"]).check_config(config)
    split = config["data"]["split"]
    if len(split) != 3 or abs(sum(split) - 1.0) > 1e-6 or min(split) <= 0:
        raise ConfigError(f"data.split = {split} must be three positive fractions that add up to 1")
    if config["model"]["name"] == "text_classifier" and config["data"]["name"] != "chnsenti":
        raise ConfigError(f"model.name = 'text_classifier' needs text data (data.name: chnsenti), "
                          f"not data.name = {config['data']['name']!r}")
    if config["model"]["name"] == "click_and_rating" and config["data"]["name"] != "movielens":
        raise ConfigError(f"model.name = 'click_and_rating' needs rating targets (data.name: movielens), "
                          f"not data.name = {config['data']['name']!r}")
    if config["distributed"]["mode"] == "ps":
        from .distributed.ps import check_ps_config

        check_ps_config(config)
    if config["distributed"]["mode"] == "collective" and config["embedding"]["sparse"]:
        raise ConfigError("distributed.mode = 'collective' needs embedding.sparse = false: Paddle 2.6.2's "
                          "DataParallel does not all-reduce sparse embedding gradients on CPU (the ranks' "
                          "tables drift apart silently); or use distributed.mode = 'ps'")
    if config["train"]["to_static"] and config["distributed"]["mode"] != "none":
        raise ConfigError(f"train.to_static = true works with distributed.mode = 'none', not "
                          f"{config['distributed']['mode']!r} (parameter servers build their own static program; "
                          f"collective ranks train in dynamic graph)")
    if config["data"]["name"] == "csv":
        csv = config["data"]["csv"]
        if not csv["path"]:
            raise ConfigError("data.csv.path = null: data.name 'csv' needs the path of a CSV file")
        for name, size in csv["fields"].items():
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ConfigError(f"data.csv.fields.{name} = {size!r} must be a vocabulary size >= 1")
        if not csv["fields"]:
            raise ConfigError("data.csv.fields = {}: name at least one id column and its vocabulary size")
    return config


CHECKPOINT_SECTIONS = ("data", "model", "embedding")  # what a checkpoint must have been trained with


def checkpoint_sections(config: dict[str, Any]) -> dict[str, Any]:
    """The sections a checkpoint records, to check a resume against."""
    return {section: config[section] for section in CHECKPOINT_SECTIONS}


def section_with_defaults(section: str, values: Any) -> Any:
    """A config section as this version validates it (options added since it was written get their
    defaults), or the values unchanged when they no longer validate."""
    try:
        if section == "embedding":
            return check_embedding_section(section, values)
        return check_section(section, values, SCHEMA[section])
    except ConfigError:
        return values


def checkpoint_difference(saved: dict[str, Any], config: dict[str, Any]) -> str | None:
    """The first difference between the sections a checkpoint recorded and this config's ("embedding.dim
    was 8, now 4"), both as this version validates them, so that a checkpoint from before an option existed
    still resumes; None when they agree."""
    for section in CHECKPOINT_SECTIONS:
        before, now = section_with_defaults(section, saved.get(section)), section_with_defaults(section, config[section])
        if before != now:
            return _first_difference(section, before, now)
    return None


def _first_difference(path: str, old: Any, new: Any) -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            if old.get(key) != new.get(key):
                return _first_difference(f"{path}.{key}", old.get(key), new.get(key))
    return f"{path} was {old!r}, now {new!r}"


def apply_override(raw: dict[str, Any], text: str) -> None:
    """Apply one ``a.b.c=value`` override; the value is parsed as YAML (so 3 is an int, [1,2] a list)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like key.path=value")
    path, value_text = text.split("=", 1)
    keys = path.strip().split(".")
    if not all(keys):
        raise ConfigError(f"override {text!r}: the key path {path!r} has an empty part")
    try:
        value = yaml.safe_load(value_text) if value_text.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {text!r}: the value is not valid YAML ({exc.problem})") from None
    node = raw
    for depth, key in enumerate(keys[:-1]):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {text!r}: {'.'.join(keys[:depth + 1])} is not a section")
        node = child
    node[keys[-1]] = value


def load_config(path: str | Path | None = None, overrides: Iterable[str] = (),
                base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Read a YAML experiment (or start from ``base``), apply overrides, validate."""
    raw: dict[str, Any] = copy.deepcopy(base) if base else {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping of sections, got {type(loaded).__name__}")
        raw.update(loaded or {})
    for text in overrides:
        apply_override(raw, text)
    try:
        return validate(raw)
    except ConfigError as exc:
        where = f"{path}: " if path is not None else ""
        raise ConfigError(f"{where}{exc}") from None


def export_prefix(config: dict[str, Any]) -> Path:
    """Path prefix of the exported model (``.pdmodel`` / ``.pdiparams`` are added)."""
    folder = config["export"]["dir"] or str(Path(config["train"]["output_dir"]) / "inference")
    return Path(folder) / "model"


def dump_config(config: dict[str, Any]) -> str:
    return yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
