import os
import subprocess
import sys

import pytest

from conftest import ROOT
from paddle_edo.runtime import MKL_AVX2, MKL_CPU_TYPE, _first_cpu, mkl_cpu_type_for, processor_name

AMD_ZEN = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse sse2 avx avx2 fma avx512f\n"
AMD_OLD = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse sse2 avx\n"
INTEL = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse sse2 avx avx2 avx512f\n"


@pytest.mark.parametrize("cpuinfo, expected", [(AMD_ZEN, MKL_AVX2), (AMD_OLD, None), (INTEL, None), ("", None),
                                               ("vendor_id\t: AuthenticAMD\n", None)])
def test_mkls_avx2_code_is_chosen_for_amd_cpus_with_avx2_alone(cpuinfo, expected):
    assert mkl_cpu_type_for(cpuinfo) == expected


def test_the_first_cpus_lines_stop_at_the_blank_line(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(AMD_ZEN + "\n" + INTEL)
    assert _first_cpu(str(path)) == AMD_ZEN
    assert _first_cpu(str(tmp_path / "missing")) == ""


@pytest.mark.parametrize("cpuinfo, expected", [
    ("model name\t: AMD EPYC 7B13\n" + AMD_ZEN, "AMD EPYC 7B13, AVX-512"),
    ("model name\t: AMD EPYC 7B12\nflags\t\t: fpu avx avx2 fma f16c\n", "AMD EPYC 7B12, AVX2 only"),
    (AMD_OLD, "?, no AVX2")])
def test_the_processor_is_named_with_its_widest_vector_isa(tmp_path, cpuinfo, expected):
    path = tmp_path / "cpuinfo"
    path.write_text(cpuinfo)
    assert processor_name(str(path)) == expected
    assert processor_name(str(tmp_path / "missing")) == "unknown"


def _mkl_cpu_type_after_import(preset: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != MKL_CPU_TYPE}
    if preset is not None:
        env[MKL_CPU_TYPE] = preset
    code = f"import os, paddle, paddle_edo.runtime; print(os.environ.get({MKL_CPU_TYPE!r}))"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()[-1]


def test_importing_the_runtime_sets_mkls_code_path_for_this_cpu():
    assert _mkl_cpu_type_after_import(None) == str(mkl_cpu_type_for(_first_cpu()))


def test_a_users_own_mkl_setting_is_kept():
    assert _mkl_cpu_type_after_import("4") == "4"
