"""Where and how computation runs: device chosen at run time, CPU threads, MKL's code path, seeds, AMP
availability, freed memory handed back, and the folder downloaded files are kept in."""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import random
import re
import warnings

from pathlib import Path
from typing import Iterator

import numpy as np
import paddle

from .errors import EdoRuntimeError, EdoValueError


MKL_CPU_TYPE = "MKL_DEBUG_CPU_TYPE"   # which code path the MKL that Paddle ships (mklml) takes
MKL_AVX2 = "5"                        # that variable's value for its AVX2 code


def mkl_cpu_type_for(cpuinfo: str) -> str | None:
    """The MKL_DEBUG_CPU_TYPE for the CPU that /proc/cpuinfo's text describes: MKL's AVX2 code for an AMD CPU
    with AVX2, which Paddle's MKL would otherwise serve from its generic SSE code; None for other CPUs (MKL
    picks its best code on Intel's by itself)."""
    vendor = re.search(r"^vendor_id\s*:\s*(\S+)", cpuinfo, re.MULTILINE)
    flags = re.search(r"^flags\s*:(.*)$", cpuinfo, re.MULTILINE)
    if vendor and vendor.group(1) == "AuthenticAMD" and flags and "avx2" in flags.group(1).split():
        return MKL_AVX2
    return None


def _first_cpu(path: str = "/proc/cpuinfo") -> str:
    """The first processor's lines of /proc/cpuinfo ('' where there is none)."""
    lines = []
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            for line in file:
                if not line.strip():
                    break
                lines.append(line)
    except OSError:
        pass
    return "".join(lines)


@functools.lru_cache(maxsize=None)  # read once: the kernels' calibration keys every lookup by it
def processor_name(path: str = "/proc/cpuinfo") -> str:
    """The CPU's model name and widest vector ISA, as /proc/cpuinfo gives them ("unknown" without it)."""
    cpu = _first_cpu(path)
    if not cpu:
        return "unknown"
    model = re.search(r"^model name\s*:\s*(.*)$", cpu, re.MULTILINE)
    flags = re.search(r"^flags\s*:(.*)$", cpu, re.MULTILINE)
    flag_set = set(flags.group(1).split()) if flags else set()
    widest = "AVX-512" if "avx512f" in flag_set else "AVX2 only" if "avx2" in flag_set else "no AVX2"
    return f"{model.group(1).strip() if model else '?'}, {widest}"


def use_mkl_avx2_on_amd() -> str | None:
    """Point MKL at its AVX2 code on an AMD CPU with AVX2 (MKL_DEBUG_CPU_TYPE=5), unless the variable is set
    (any value keeps MKL's own choice). MKL reads it at its first call, so this runs when the module is
    imported: after ``import paddle``, before Paddle's first matrix product. Measured on a 2-core AMD EPYC
    (Zen 4), both Paddles: a [512, 128] x [128, 256] Linear 0.91 -> 0.39 ms, and MovieLens DeepFM's training
    4.6 -> 3.5 s. Returns the variable's value (None: unset)."""
    if MKL_CPU_TYPE not in os.environ:
        chosen = mkl_cpu_type_for(_first_cpu())
        if chosen is not None:
            os.environ[MKL_CPU_TYPE] = chosen
    return os.environ.get(MKL_CPU_TYPE)


use_mkl_avx2_on_amd()  # on import: MKL reads the variable at its first call


def gpu_available() -> bool:
    return paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0


def select_device(preference: str = "auto") -> str:
    """'gpu:0' when asked for (or 'auto') and present, else 'cpu'; sets it as Paddle's device."""
    if preference not in ("auto", "cpu", "gpu"):
        raise EdoValueError(f"train.device = {preference!r}; expected 'auto', 'cpu' or 'gpu'")
    if preference == "gpu" and not gpu_available():
        raise EdoRuntimeError("train.device = 'gpu' but this Paddle build sees no GPU "
                              "(install paddlepaddle-gpu==2.6.2 on a CUDA machine, or use train.device=auto)")
    device = "gpu:0" if preference != "cpu" and gpu_available() else "cpu"
    paddle.set_device(device)
    return device


_threads: list[int | None] = [None]   # what set_num_threads set


def available_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cpu_threads() -> int:
    """The CPU threads set by ``set_num_threads``, else the cores this process may run on."""
    return _threads[0] or available_cores()


def set_num_threads(n: int) -> None:
    """CPU math threads. ``import paddle`` pins OMP_NUM_THREADS to 1 when unset; this sets them after import,
    for Paddle's kernels (Intel OpenMP) and paddle_edo's native kernels: on Paddle's Intel OpenMP as well
    where Paddle ships it (kernels/__init__.py links them to it), else on GNU OpenMP, which Paddle's
    setting does not reach (measured: they then took every core whatever train.num_threads said).

    On the CPU, static programs (to_static) also run their ops one after another: Paddle 2.6's
    multi-threaded executor over-subscribes a few cores, and lookups under to_static measured 3-10x
    slower with it on 2 cores.
    """
    paddle.base.core.set_num_threads(int(n))
    _threads[0] = int(n)
    try:
        ctypes.CDLL("libgomp.so.1").omp_set_num_threads(int(n))  # kernels built without Intel OpenMP use it
    except OSError:  # no GNU OpenMP here: no native kernels either
        pass
    if paddle.get_device() == "cpu":
        paddle.set_flags({"FLAGS_new_executor_serial_run": True})


PADDLE_OPENMP = Path(paddle.__file__).parent / "libs" / "libiomp5.so"  # Intel's, where Paddle ships it


@functools.cache
def _paddles_openmp() -> ctypes.CDLL | None:
    """The Intel OpenMP runtime Paddle ships (and the native kernels link), or None where it ships none."""
    return ctypes.CDLL(str(PADDLE_OPENMP)) if PADDLE_OPENMP.exists() else None


@contextlib.contextmanager
def openmp_threads_kept() -> Iterator[None]:
    """Within, code may change the calling thread's OpenMP threads; after, they are as before. A Paddle
    Inference predictor's run leaves them at 1 whatever its config says (measured on 2.6.2), which put every
    later op and native kernel of the thread on one core."""
    runtime = _paddles_openmp()
    before = runtime.omp_get_max_threads() if runtime is not None else None
    try:
        yield
    finally:
        if before is not None and runtime.omp_get_max_threads() != before:
            paddle.base.core.set_num_threads(before)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    paddle.seed(seed)


_warned_amp = False


def amp_enabled(requested: bool, device: str) -> bool:
    """AMP only on a GPU: on CPU paddle.amp does nothing, so say so once and run in fp32."""
    global _warned_amp
    if requested and not device.startswith("gpu"):
        if not _warned_amp:
            warnings.warn("train.amp.enable = true needs a GPU; this run is on the CPU and stays in fp32",
                          RuntimeWarning, stacklevel=2)
            _warned_amp = True
        return False
    return requested


def default_cache_dir() -> Path:
    """Where fetched data and jieba's parsed dictionary are kept: ``$PADDLE_EDO_CACHE``, else
    ``~/.cache/paddle_edo``."""
    return Path(os.environ.get("PADDLE_EDO_CACHE", Path.home() / ".cache" / "paddle_edo"))


def release_freed_memory() -> None:
    """Hand memory that was freed back to the system: glibc keeps freed heap pages (a packed table's
    fp32 master, gone, still counted as resident: 538 MiB held for a 259 MiB int8 table, measured) until
    ``malloc_trim``; a GPU allocator keeps freed blocks cached until emptied."""
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
    if gpu_available():
        paddle.device.cuda.empty_cache()
