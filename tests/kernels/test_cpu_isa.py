"""Every narrower instruction set's kernels (PADDLE_EDO_MAX_CPU_ISA, kernels/cpu_isa.h) give the composite
ops' bits too, and so do outputs written with streaming stores (PADDLE_EDO_STREAMING_STORES,
kernels/streaming_stores.h): the bit-for-bit kernel tests run again, in a process whose kernels are capped, or
stream every output (the tests' outputs are far below the size that streams by default)."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import paddle_edo.kernels as kernels
from paddle_edo.errors import EdoValueError

TESTS = Path(__file__).resolve().parents[1]
BIT_FOR_BIT = [  # the tests that compare kernels with the composite ops, each path's rows and tails
    "kernels/test_fused_decode.py::test_fused_decode_equals_the_composite_decode_bit_for_bit",
    "kernels/test_fused_decode.py::test_half_outputs_are_the_composite_rounding_bit_for_bit",
    "kernels/test_fused_decode.py::test_fp16_outputs_round_ties_away_from_zero_in_every_binade",
    "kernels/test_fused_decode.py::test_fp16_outputs_at_the_edges_of_the_subnormal_rounding",
    "kernels/test_fake_quant.py",
    "kernels/test_lookups.py",
    "nn/test_bag.py::test_the_kernels_and_the_composite_ops_pool_the_same_bits",
    "nn/test_shared.py::test_fused_lookups_equal_the_composite_ops",
]


@pytest.mark.parametrize("setting", [{"PADDLE_EDO_MAX_CPU_ISA": "avx2"}, {"PADDLE_EDO_MAX_CPU_ISA": "portable"},
                                     {"PADDLE_EDO_STREAMING_STORES": "always"},
                                     {"PADDLE_EDO_STREAMING_STORES": "always", "PADDLE_EDO_MAX_CPU_ISA": "avx2"}],
                         ids=["avx2", "portable", "streaming", "avx2-streaming"])
def test_capped_or_streaming_kernels_give_the_composite_bits(setting):
    env = {**os.environ, **setting, "OMP_NUM_THREADS": "2"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          *[str(TESTS / test) for test in BIT_FOR_BIT]],
                         env=env, cwd=TESTS.parent, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "skipped" not in run.stdout.splitlines()[-1]


def test_an_unknown_instruction_set_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv("PADDLE_EDO_MAX_CPU_ISA", "sse4")
    monkeypatch.delitem(kernels._loaded, kernels.NAME, raising=False)
    with pytest.raises(EdoValueError, match=r"PADDLE_EDO_MAX_CPU_ISA='sse4': expected one of avx512, avx2, portable"):
        kernels.fused_ops()


def test_an_unknown_streaming_setting_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv("PADDLE_EDO_STREAMING_STORES", "yes")
    monkeypatch.delitem(kernels._loaded, kernels.NAME, raising=False)
    with pytest.raises(EdoValueError, match=r"PADDLE_EDO_STREAMING_STORES='yes': expected one of always, never"):
        kernels.fused_ops()


def test_outputs_are_aligned_for_streaming_stores():
    """The kernels stream only into outputs aligned for AVX-512's 64-byte stores: Paddle's CPU buffers are,
    so the streaming runs above take that path."""
    import paddle
    assert all(paddle.empty([rows, 64]).data_ptr() % 64 == 0 for rows in (1, 3, 300, 106496))


STATES_SCRIPT = """
import sys, numpy as np, paddle
from paddle_edo.nn import DenseEmbedding, EmbeddingCollection
from paddle_edo.optim import TableOptimizer
dims = {"a": 16, "b": 64, "c": 7, "d": 1, "e": 33}  # vector bodies, tails, a single value a row
found = {}
for rule in ("adam", "rowwise_adam", "adagrad"):
    paddle.seed(0)
    collection = EmbeddingCollection({k: DenseEmbedding(300, d) for k, d in dims.items()})
    collection.bind_optimizer(TableOptimizer(rule, 0.05, state_dtype="int8"))
    rng = np.random.default_rng(1)
    for _ in range(6):  # gradients from 1e-12 to 1e2: codes below 2^-15 of a row's largest too
        ids = [paddle.to_tensor(rng.integers(0, 300, 512)) for _ in dims]
        scale = 10.0 ** rng.integers(-12, 3, (512, 1))
        grad = paddle.to_tensor((rng.standard_normal((512, sum(dims.values()))) * scale).astype("float32"))
        (collection(ids) * grad).sum().backward()
    found.update({f"{rule}.{k}": v.numpy() for k, v in collection.state_dict().items()})
    found.update({f"{rule}.state.{k}": v for k, v in collection.optimizer_state().items()})
np.savez(sys.argv[1], **found)
"""


def test_8_bit_optimizer_states_are_the_same_bits_on_every_path(tmp_path):
    """The 8-bit state codes, vectorised per instruction set, are written and read the same on each path."""
    if kernels.fused_ops() is None:
        pytest.skip("the native kernels cannot be built here")
    runs = {}
    for isa in ("avx512", "avx2", "portable"):
        env = {**os.environ, "PADDLE_EDO_MAX_CPU_ISA": isa, "PYTHONPATH": str(TESTS.parent)}
        run = subprocess.run([sys.executable, "-c", STATES_SCRIPT, str(tmp_path / f"{isa}.npz")], env=env,
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]
        runs[isa] = dict(np.load(tmp_path / f"{isa}.npz"))
    assert len(runs["avx512"]) == 65
    for isa in ("avx2", "portable"):
        for key, value in runs["avx512"].items():
            assert value.tobytes() == runs[isa][key].tobytes(), (isa, key)
