"""python -m paddle_edo.kernels: build the native kernels now (the Makefile does, at setup)."""
from . import fused_ops

print(f"native kernels: {'ready' if fused_ops() is not None else 'unavailable (composite ops and numpy serve)'}")
