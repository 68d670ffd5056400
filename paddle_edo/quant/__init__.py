"""Quantization: storage formats and codecs (pure functions on tensors); model conversion is nn.convert."""
from .formats import FORMATS, QuantFormat, get_format

__all__ = ["FORMATS", "QuantFormat", "get_format"]
