"""Fused CPU lookups for the shared tables: a Paddle custom-operator extension built from lookups.cc.

The composite Paddle ops stay the reference, and the path for training (sparse row gradients), static
programs and exports (a saved model needs nothing but Paddle) and accelerators. A dynamic-graph forward
pass on the CPU that needs no gradient (evaluation, serving) takes the fused kernel: one pass writes
each output row, where the composite ops write the whole output once per gather and once per combine.

The extension is compiled at first use (about 20 s, once per machine and version of this source: it
is kept under ~/.cache/paddle_extensions) and needs a C++ compiler; without one, or with
PADDLE_EDO_FUSED_KERNELS=0, every layer keeps its composite path.
"""
from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import sys
from pathlib import Path
from types import ModuleType

import paddle

logger = logging.getLogger("paddle_edo")

SOURCE = Path(__file__).with_name("lookups.cc")
NAME = "paddle_edo_lookups"
FLAGS = ["-O3", "-fopenmp"]
_loaded: dict[str, ModuleType | None] = {}


def fused_ops() -> ModuleType | None:
    """The extension's ops (built or loaded once per process), or None when they cannot be had."""
    if NAME not in _loaded:
        _loaded[NAME] = _build()
    return _loaded[NAME]


def _build() -> ModuleType | None:
    """Load the extension built for this source, flags and Paddle, building it first if need be.
    (paddle.utils.cpp_extension.load recompiles on every call, 20 s a process; a build is kept under a
    name that carries its key instead.)"""
    if os.environ.get("PADDLE_EDO_FUSED_KERNELS", "1") == "0":
        return None
    from paddle.utils.cpp_extension import load
    from paddle.utils.cpp_extension.extension_utils import _import_module_from_library, get_build_directory

    key = hashlib.sha256(SOURCE.read_bytes() + repr((FLAGS, paddle.__version__, sys.version)).encode()).hexdigest()
    name = f"{NAME}_{key[:12]}"
    quiet = logging.getLogger("utils.cpp_extension")  # Paddle logs each load at INFO
    level = quiet.level
    try:
        root = Path(get_build_directory())
        root.mkdir(parents=True, exist_ok=True)
        quiet.setLevel(logging.WARNING)
        with open(root / f"{NAME}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # processes starting together build once, the others load
            if (root / name / f"{name}.so").exists():
                return _import_module_from_library(name, str(root / name))
            return load(name=name, sources=[str(SOURCE)], build_directory=str(root), extra_cxx_cflags=FLAGS,
                        extra_ldflags=["-fopenmp"])
    except Exception as exc:  # a missing compiler, a read-only cache: the composite ops still work
        logger.warning("paddle_edo: the fused lookup kernels could not be built (%s); composite Paddle ops "
                       "serve instead", exc)
        return None
    finally:
        quiet.setLevel(level)


def can_fuse(ids: paddle.Tensor, *weights: paddle.Tensor) -> bool:
    """Whether a lookup may take a fused kernel: dynamic graph, no gradient wanted, ids and float32
    weights on the CPU, and the extension at hand."""
    if not paddle.in_dynamic_mode() or not ids.place.is_cpu_place():
        return False
    if paddle.is_grad_enabled() and not all(w.stop_gradient for w in weights):
        return False
    if any(w.dtype != paddle.float32 or not w.place.is_cpu_place() for w in weights):
        return False
    return fused_ops() is not None

