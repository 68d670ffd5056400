"""Experiment configs: one YAML per experiment, ``-o a.b=c`` overrides, validated before any work."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Iterable

import yaml

from .data.columns import categorical_columns
from .data.options import DATA_OPTIONS, TABULAR_NAMES, check_data_section, upgrade_data_section
from .distributed.options import DISTRIBUTED_OPTIONS, check_distributed_config
from .models import model_class, model_section_options, table_section_models
from .models.optimizers import OPTIMIZERS
from .optim import FUSED_RULES, STATE_DTYPES
from .nn.registry import AUTO, check_embedding_section, embedding_class, field_tables, table_classes
from .schema import ConfigError, Option, check_section

# Each section's keys are declared by the package that reads them; this module assembles them.
SCHEMA: dict[str, dict[str, Any]] = {
    "data": DATA_OPTIONS,
    "model": model_section_options(),
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
    "distributed": DISTRIBUTED_OPTIONS,
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
        "table_optimizer": {  # the rule paddle_edo's kernels apply to tables, outside Paddle's optimizer
            "name": Option(None, str, nullable=True, choices=tuple(FUSED_RULES),
                           doc="the rule of the fp32, QAT and low_precision tables (a collection's in its backward, "
                               "the others from their own gradients): sgd, adagrad, rowwise_adagrad (one fp32 per row), adam, "
                               "rowwise_adam (a moment per value, none with beta1 0, and one fp32 per row); null: "
                               "train.optimizer where it is fused (low_precision tables: its row rule, sgd or "
                               "adagrad)"),
            "beta1": Option(0.9, float, low=0.0, high=0.999999, doc="adam, rowwise_adam (0: no first moment)"),
            "beta2": Option(0.999, float, low=0.0, high=0.999999, doc="adam, rowwise_adam"),
            "weight_decay": Option(0.0, float, low=0.0, doc="L2 on the batch's rows (g + weight_decay x w)"),
            "state_dtype": Option("float32", str, choices=tuple(STATE_DTYPES),
                                  doc="the state in fp32; bfloat16 / float16 (half the bytes) or int8 (8 bits a "
                                      "value and an fp32 scale a row), stochastically rounded"),
        },
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
    raw = {**raw, "data": upgrade_data_section(raw.get("data"))}
    for section, options in SCHEMA.items():
        if section == "embedding":
            config[section] = check_embedding_section(section, raw.get(section))
        else:
            config[section] = check_section(section, raw.get(section), options)
    check_data_section(config["data"])
    embedding = config["embedding"]
    classes = table_classes(embedding)
    any_id = embedding["type"] != AUTO and embedding_class(embedding["type"]).takes_any_id
    if config["data"]["name"] in TABULAR_NAMES:
        files = config["data"]["files"]
        if files["ids"] == "auto":
            files["ids"] = "hash" if any_id else "vocabulary"
        hashed = [c.name for c in categorical_columns(files) if c.ids == "hash"]
        if hashed and (embedding["type"] == AUTO or not all(cls.takes_any_id for cls in classes)):
            raise ConfigError(f"data.files: column {hashed[0]!r} has hashed ids, which only tables that take any id "
                              f"read ({', '.join(repr(t) for t in field_tables() if embedding_class(t).takes_any_id)}); embedding.type = "
                              f"{config['embedding']['type']!r} needs ids from a vocabulary")
    sections = ([] if embedding["type"] == AUTO else [embedding]) + list(embedding["tables"].values())
    for section in sections:  # each layer checks the config with its own section as the embedding section
        embedding_class(section["type"]).check_config({**config, "embedding": section})
    model = model_class(config["model"]["name"])
    if embedding["tables"] and not model.table_sections:
        raise ConfigError(f"embedding.tables: model.name = {config['model']['name']!r} builds its tables from the "
                          f"embedding section alone; single tables' sections work with "
                          f"{', '.join(repr(n) for n in table_section_models())}")
    model.check_config(config)
    check_distributed_config(config)
    return config


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
    """Path prefix of the exported model (``.pdiparams`` and ``.json`` or ``.pdmodel`` are added)."""
    folder = config["export"]["dir"] or str(Path(config["train"]["output_dir"]) / "inference")
    return Path(folder) / "model"


def dump_config(config: dict[str, Any]) -> str:
    return yaml.safe_dump(config, sort_keys=False, allow_unicode=True)
