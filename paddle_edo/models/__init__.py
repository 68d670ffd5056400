"""Reference models whose embedding tables come from the registry."""
from .ctr import DeepFM

MODELS = {"deepfm": DeepFM}


def build_model(fields, config):
    """The model a validated config names, for these fields."""
    return MODELS[config["model"]["name"]].from_config(fields, config)


__all__ = ["DeepFM", "MODELS", "build_model"]
