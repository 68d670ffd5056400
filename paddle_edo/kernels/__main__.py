"""python -m paddle_edo.kernels: build the fused lookup kernels now (the Makefile does, at setup)."""
from . import fused_ops

print(f"fused lookup kernels: {'ready' if fused_ops() is not None else 'unavailable (composite ops serve)'}")
