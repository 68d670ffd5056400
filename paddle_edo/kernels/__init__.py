"""Native CPU kernels: fused lookups for the shared tables (Paddle custom operators, lookups.cc), the
table-batched lookup of a collection's tables and its backward with the optimizer fused in (collection.cc), the
distinct ids of a batch for deduplicated training lookups (a custom operator, unique_ids.cc), the
monitor's row-gradient summaries and keyed random draws (C functions called through ctypes, row_norms.cc and
keyed_random.cc), built as one extension.

The composite Paddle ops stay the reference, and the path for training (sparse row gradients),
accelerators, and static programs and exports by default (a saved model needs nothing but Paddle). A
dynamic-graph forward pass on the CPU that needs no gradient (evaluation, serving) takes the fused
kernel: one pass writes each output row, where the composite ops write the whole output once per gather
and once per combine. Exports may take them too (``export.fused_kernels``), for CPU serving with Paddle
Inference.

The extension is compiled at first use (about 20 s, once per machine and version of these sources: it
is kept under ~/.cache/paddle_extensions) and needs a C++ compiler; without one, or with
PADDLE_EDO_FUSED_KERNELS=0, every layer keeps its composite path and the monitor its numpy path.
PADDLE_EDO_MAX_CPU_ISA (avx512, avx2 or portable) caps the instruction set the kernels use (cpu_isa.h):
each narrower path gives the same bits, and can be run on a machine that has the widest.
Outputs past half the last-level cache are written with streaming stores (streaming_stores.h);
PADDLE_EDO_STREAMING_STORES (always or never) overrides that rule, the values the same either way.
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import logging
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterator

import numpy as np
import paddle

from ..errors import EdoIndexError, EdoValueError
from ..runtime import PADDLE_OPENMP

logger = logging.getLogger("paddle_edo")

SOURCES = [Path(__file__).with_name(name)
           for name in ("lookups.cc", "quantized.cc", "bags.cc", "collection.cc", "fake_quant.cc", "unique_ids.cc",
                        "row_norms.cc", "openmp.cc", "keyed_random.cc")]
HEADERS = [Path(__file__).with_name(name)  # included by the sources: part of a build's key
           for name in ("packed_rows.h", "half_rows.h", "huge_pages.h", "cpu_isa.h", "prefetch.h", "fake_quant.h",
                         "optimizer_states.h", "keyed_random.h", "streaming_stores.h")]
NAME = "paddle_edo_lookups"
# -ffp-contract=off: no fused multiply-adds (the composite ops' exact roundings). -fno-tree-loop-distribute-patterns:
# GCC turns the bags' loops over their registers' accumulators (zeroing them, storing them) into memset and
# memcpy of a stack array, so that each bag's sum goes through memory (a `rep stos` and sixteen 16-byte copies a
# bag: fp32 bags of one id took 1.5x a plain gather on a 2-core AMD EPYC Zen 3).
FLAGS = ["-O3", "-fopenmp", "-ffp-contract=off", "-fno-tree-loop-distribute-patterns"]
CPU_ISAS = ("avx512", "avx2", "portable")  # PADDLE_EDO_MAX_CPU_ISA's values, widest first
STREAMING_STORES = ("always", "never")  # PADDLE_EDO_STREAMING_STORES's values (unset: by the output's size)
_loaded: dict[str, tuple[ModuleType, Path] | None] = {}
_C_FUNCTIONS = {  # row_norms.cc's, openmp.cc's and keyed_random.cc's functions: (result, argument types)
    "edo_summarize_groups": (ctypes.c_int64, [ctypes.c_int64, ctypes.c_int64, *[ctypes.c_void_p] * 11]),
    "edo_save_rows": (None, [ctypes.c_int64, *[ctypes.c_void_p] * 5]),
    "edo_update_ratios": (None, [ctypes.c_int64, *[ctypes.c_void_p] * 6]),
    "edo_running_medians": (None, [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                   *[ctypes.c_void_p] * 3]),
    "edo_mark_rows": (ctypes.c_int64, [ctypes.c_int64, *[ctypes.c_void_p] * 9]),
    "edo_openmp_threads": (ctypes.c_int64, []),
    "edo_kernel_isa": (ctypes.c_int64, []),
    "edo_keyed_uniform": (None, [ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]),
    "edo_keyed_normal": (None, [ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_double,
                                ctypes.c_void_p]),
}
_functions: dict[str, object] = {}  # each C function, once looked up (None: unavailable)
_static_fusion = [False]            # whether to_static programs take the fused kernels (fused_static_programs)
_FLOAT32 = int(paddle.float32)


@paddle.jit.not_to_static  # plain Python when to_static traces a layer's lookup
def fused_ops() -> ModuleType | None:
    """The extension's ops (built or loaded once per process), or None when they cannot be had."""
    if NAME not in _loaded:
        _loaded[NAME] = _build()
    built = _loaded[NAME]
    return None if built is None else built[0]


def library_path() -> Path | None:
    """The built extension's library (its folder keeps what belongs to this build), or None without one."""
    fused_ops()
    built = _loaded[NAME]
    return None if built is None else built[1]


def c_function(name: str):
    """One of the plain C functions (the keys of _C_FUNCTIONS) as a ctypes function, or None when the
    extension cannot be had."""
    if name not in _functions:
        fused_ops()
        built = _loaded[NAME]
        function = None
        if built is not None:
            function = getattr(ctypes.CDLL(str(built[1])), name)
            function.restype, function.argtypes = _C_FUNCTIONS[name]
        _functions[name] = function
    return _functions[name]


def address(array: np.ndarray) -> int:
    """Where a C-contiguous array's data starts, to pass to a C function (ctypes' from_buffer takes a
    third of the time of ``array.ctypes.data``, which a logged step calls dozens of times)."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    except (TypeError, ValueError):  # read-only or empty (callers pass C-contiguous arrays only)
        return array.ctypes.data


def _build() -> tuple[ModuleType, Path] | None:
    """Load the extension built for these sources, flags and Paddle, building it first if need be; with
    the path of its library. (paddle.utils.cpp_extension.load recompiles on every call, 20 s a process; a
    build is kept under a name that carries its key instead.)"""
    if os.environ.get("PADDLE_EDO_FUSED_KERNELS", "1") == "0":
        return None
    isa = os.environ.get("PADDLE_EDO_MAX_CPU_ISA")
    if isa is not None and isa not in CPU_ISAS:
        raise EdoValueError(f"PADDLE_EDO_MAX_CPU_ISA={isa!r}: expected one of {', '.join(CPU_ISAS)}")
    streaming = os.environ.get("PADDLE_EDO_STREAMING_STORES") or None  # empty: unset
    if streaming is not None and streaming not in STREAMING_STORES:
        raise EdoValueError(f"PADDLE_EDO_STREAMING_STORES={streaming!r}: expected one of "
                            f"{', '.join(STREAMING_STORES)} (or unset: streaming stores for outputs past half "
                            f"the last-level cache)")
    from paddle.utils.cpp_extension import load
    from paddle.utils.cpp_extension.extension_utils import _import_module_from_library, get_build_directory

    sources = b"".join(source.read_bytes() for source in [*SOURCES, *HEADERS])
    link = _openmp_link_flags()
    key = hashlib.sha256(sources + repr((FLAGS, link, paddle.__version__, sys.version)).encode()).hexdigest()
    name = f"{NAME}_{key[:12]}"
    quiet = logging.getLogger("utils.cpp_extension")  # Paddle logs each load at INFO
    level = quiet.level
    try:
        root = Path(get_build_directory())
        root.mkdir(parents=True, exist_ok=True)
        quiet.setLevel(logging.WARNING)
        with open(root / f"{NAME}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # processes starting together build once, the others load
            library = root / name / f"{name}.so"
            if library.exists():
                return _import_module_from_library(name, str(root / name)), library
            module = load(name=name, sources=[str(source) for source in SOURCES], build_directory=str(root),
                          extra_cxx_cflags=FLAGS, extra_ldflags=link)
            return module, library
    except Exception as exc:  # a missing compiler, a read-only cache: the composite ops still work
        logger.warning("paddle_edo: the fused lookup kernels could not be built (%s); composite Paddle ops "
                       "serve instead (and numpy the monitor's row norms)", exc)
        return None
    finally:
        quiet.setLevel(level)


def _openmp_link_flags() -> list[str]:
    """Link the kernels' OpenMP calls to Paddle's own runtime (Intel's, which serves GNU's entry points too)
    where Paddle ships one: one pool of threads for Paddle's ops and these kernels. With GNU's runtime
    beside it, each runtime's idle threads spin while the other's work, and a training step that
    alternates them ran 2-3x slower (measured: a planner check run's step 26 ms, 9.4 ms on one runtime)."""
    if PADDLE_OPENMP.exists():
        libs = PADDLE_OPENMP.parent
        return [f"-L{libs}", f"-l:{PADDLE_OPENMP.name}", f"-Wl,-rpath,{libs}"]
    return ["-fopenmp"]


@contextlib.contextmanager
def fused_static_programs(enabled: bool = True) -> Iterator[None]:
    """Within, programs that to_static traces (``jit.save``) take the fused kernels too, as Paddle custom
    operators: a faster CPU serving path, which Paddle Inference runs on the CPU in a process that loaded
    this extension (``export.Predictor`` loads it). Outside, programs keep the composite ops: a saved
    model then needs nothing but Paddle."""
    before = _static_fusion[0]
    _static_fusion[0] = enabled
    try:
        yield
    finally:
        _static_fusion[0] = before


@paddle.jit.not_to_static
def kernels_serve(ids: paddle.Tensor, table: paddle.Tensor) -> bool:
    """Whether a kernel that has its own gradient, or reads a table that takes none (packed codes), may
    serve a lookup: ids and table on the CPU in dynamic graph, or a static program traced inside
    ``fused_static_programs``; and the extension at hand."""
    if not paddle.in_dynamic_mode():
        return _static_fusion[0] and fused_ops() is not None
    return ids.place.is_cpu_place() and table.place.is_cpu_place() and fused_ops() is not None


def ids_checked_by_kernel(owner: str, num_embeddings: int) -> contextlib.AbstractContextManager[None]:
    """A kernel's refusal of an id outside its table (raised before any read, so a layer need not scan
    its ids first) as the layer's own error: ``EdoIndexError`` naming the layer, the id and the range."""
    return _IdsCheckedByKernel(owner, num_embeddings)


class _IdsCheckedByKernel(contextlib.AbstractContextManager):
    """ids_checked_by_kernel's context (a class: a generator's context costs a microsecond more a lookup)."""

    def __init__(self, owner: str, num_embeddings: int) -> None:
        self.owner, self.num_embeddings = owner, num_embeddings

    def __exit__(self, kind, error, trace) -> None:
        if isinstance(error, OSError):
            found = re.search(r"(?:id|row) (-?\d+) is outside \[0, ", str(error))
            if found is not None:
                raise EdoIndexError(f"{self.owner}: id {found.group(1)} is out of range [0, {self.num_embeddings})"
                                    ) from None


@paddle.jit.not_to_static
def can_fuse(ids: paddle.Tensor, *weights: paddle.Tensor) -> bool:
    """Whether a lookup may take a fused kernel: dynamic graph, no gradient wanted, ids and float32
    weights on the CPU, and the extension at hand; or a static program traced inside
    ``fused_static_programs`` with float32 weights."""
    if not paddle.in_dynamic_mode():
        return _static_fusion[0] and all(is_float32(w) for w in weights) and fused_ops() is not None
    if not ids.place.is_cpu_place():
        return False
    training = paddle.is_grad_enabled()
    for weight in weights:
        if (training and not weight.stop_gradient) or not is_float32(weight) or not weight.place.is_cpu_place():
            return False
    return fused_ops() is not None


def is_float32(tensor: paddle.Tensor) -> bool:
    """Whether ``tensor`` holds float32 (compared as the dtypes' numbers: Paddle's dtype ``==`` costs a
    microsecond and a half, and lookups ask on every call)."""
    return int(tensor.dtype) == _FLOAT32


def kernel_isa() -> str:
    """The instruction set the kernels' code paths take here ("avx512", "avx2", "portable"; CPU_ISAS), or
    "none" without the extension."""
    function = c_function("edo_kernel_isa")
    return "none" if function is None else ("portable", "avx2", "avx512")[function()]
