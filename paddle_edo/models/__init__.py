"""Reference models: each keeps the trainers' contract (``RecModel``) and is registered under a
``model.name``; their tables come from the embedding registry."""
from .base import RecModel
from .registry import (MODELS, build_model, model_class, model_section_options, register_model,
                       table_section_models)
from .ctr import DeepFM
from .multitask import ClickAndRating
from .text import TextClassifier

__all__ = ["ClickAndRating", "DeepFM", "MODELS", "RecModel", "TextClassifier", "build_model", "model_class",
           "model_section_options", "register_model", "table_section_models"]
