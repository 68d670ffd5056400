"""paddle_edo: embedding tables that cost less memory, for PaddlePaddle."""
from . import nn
from .config import load_config
from .memory import memory_report
from .schema import ConfigError

__version__ = "0.1.0"

__all__ = ["ConfigError", "load_config", "memory_report", "nn", "__version__"]
