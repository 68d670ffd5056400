"""Every narrower instruction set's kernels (PADDLE_EDO_MAX_CPU_ISA, kernels/cpu_isa.h) give the composite
ops' bits too: the bit-for-bit kernel tests run again, in a process whose kernels are capped."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

import paddle_edo.kernels as kernels
from paddle_edo.errors import EdoValueError

TESTS = Path(__file__).resolve().parents[1]
BIT_FOR_BIT = [  # the tests that compare kernels with the composite ops, each path's rows and tails
    "kernels/test_fused_decode.py::test_fused_decode_equals_the_composite_decode_bit_for_bit",
    "kernels/test_fused_decode.py::test_half_outputs_are_the_composite_rounding_bit_for_bit",
    "kernels/test_fused_decode.py::test_fp16_outputs_round_ties_away_from_zero_in_every_binade",
    "kernels/test_fake_quant.py",
    "nn/test_bag.py::test_the_kernels_and_the_composite_ops_pool_the_same_bits",
    "nn/test_shared.py::test_fused_lookups_equal_the_composite_ops",
]


@pytest.mark.parametrize("isa", ["avx2", "portable"])
def test_capped_kernels_give_the_composite_bits(isa):
    env = {**os.environ, "PADDLE_EDO_MAX_CPU_ISA": isa, "OMP_NUM_THREADS": "2"}
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
