"""Quantization: storage formats, codecs (pure functions on tensors); model conversion in quant.convert."""
from .formats import FORMATS, QuantFormat, get_format

__all__ = ["FORMATS", "QuantFormat", "get_format"]
