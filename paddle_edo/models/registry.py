"""Maps ``model.name`` to model classes; the ``model`` section's keys are the union of theirs."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ..errors import EdoValueError
from ..schema import ConfigError, Option
from .base import MODEL_OPTIONS, RecModel

#: Model classes by the name ``model.name`` takes (``register_model`` adds to it).
MODELS: dict[str, type[RecModel]] = {}


def register_model(name: str) -> Callable[[type], type]:
    """Class decorator: make a model available as ``model.name: <name>``."""
    def wrap(cls: type) -> type:
        if name in MODELS:
            raise EdoValueError(f"model {name!r} is registered twice")
        cls.registry_name = name
        MODELS[name] = cls
        return cls
    return wrap


def model_class(name: Any, path: str = "model.name") -> type[RecModel]:
    """The model class registered as ``name``; ConfigError naming ``path`` and the registered names else."""
    if name not in MODELS:
        raise ConfigError(f"{path} = {name!r} is not a registered model; expected one of "
                          f"{', '.join(repr(n) for n in sorted(MODELS))}")
    return MODELS[name]


def model_section_options() -> dict[str, Any]:
    """The ``model`` section's schema: the name, the keys every model reads, then each model's own (a
    key two models share must mean the same in both)."""
    options: dict[str, Any] = {"name": Option("deepfm", str, choices=tuple(MODELS), doc="which model"),
                               **MODEL_OPTIONS}
    for cls in MODELS.values():
        for key, option in cls.config_options.items():
            if key in options and options[key] != option:
                raise EdoValueError(f"{cls.__name__}.config_options[{key!r}] differs from another model's")
            options[key] = option
    return options


def table_section_models() -> list[str]:
    """The models that read single tables' sections (``embedding.tables``)."""
    return sorted(name for name, cls in MODELS.items() if cls.table_sections)


def build_model(fields, config: dict[str, Any], frequencies: dict[str, Any] | None = None,
                dense_features: Sequence[str] = ()) -> RecModel:
    """The model a validated config names, for these fields (``frequencies``: id counts per field) and
    dense features (numeric columns, by name)."""
    return model_class(config["model"]["name"]).from_config(fields, config, frequencies, dense_features)
