"""numpy arrays over CPU tensors' own memory: reading and writing a tensor in place, without the copy
``Tensor.numpy`` and ``set_value`` make."""
from __future__ import annotations

import ctypes
import math

import numpy as np
import paddle


def host_view(tensor: paddle.Tensor) -> np.ndarray:
    """A numpy array over a float32 CPU tensor's own memory, without a copy (``Tensor.numpy`` copies, at
    three times the cost); the array keeps the tensor alive. It shows the values as they are when read:
    read a gradient before the optimizer step, and copy what must outlive a change. Writing to it writes
    the tensor."""
    shape = tensor.shape
    size = math.prod(shape)
    if not size:
        return np.empty(shape, dtype=np.float32)
    buffer = (ctypes.c_float * size).from_address(tensor.data_ptr())
    buffer.owner = tensor
    return np.frombuffer(buffer, dtype=np.float32).reshape(shape)


def on_host(tensor: paddle.Tensor | None) -> bool:
    """Whether ``host_view`` can show this tensor (float32, in CPU memory)."""
    return tensor is not None and tensor.dtype == paddle.float32 and tensor.place.is_cpu_place()
