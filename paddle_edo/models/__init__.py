"""Reference models whose embedding tables come from the registry."""
from .ctr import DeepFM
from .multitask import ClickAndRating
from .text import TextClassifier

MODELS = {"deepfm": DeepFM, "text_classifier": TextClassifier, "click_and_rating": ClickAndRating}


def build_model(fields, config, frequencies=None):
    """The model a validated config names, for these fields (``frequencies``: id counts per field)."""
    return MODELS[config["model"]["name"]].from_config(fields, config, frequencies)


__all__ = ["ClickAndRating", "DeepFM", "MODELS", "TextClassifier", "build_model"]
