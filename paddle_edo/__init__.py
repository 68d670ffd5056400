"""paddle_edo: embedding tables that cost less memory, for PaddlePaddle."""
from . import nn
from .config import load_config
from .memory import memory_report
from .nn.convert import dequantize_model, quantize
from .schema import ConfigError

__version__ = "0.1.0"

__all__ = ["ConfigError", "load_config", "dequantize_model", "memory_report", "nn", "quantize", "__version__"]
