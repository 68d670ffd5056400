"""A large packed table moves onto transparent huge pages when a kernel first reads it (kernels/huge_pages.h)."""
import os
from pathlib import Path

import numpy as np
import paddle
import pytest

import paddle_edo.kernels as kernels
from paddle_edo.nn import DenseEmbedding, QuantizedEmbedding

HUGE_PAGE = 2 << 20
THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def collapses_on_request() -> bool:
    """Whether this system lets a process ask for huge pages and collapse a range into them (Linux 6.1)."""
    if not THP.exists() or "[never]" in THP.read_text():
        return False
    major, minor = (int(part) for part in os.uname().release.split(".")[:2])
    return (major, minor) >= (6, 1)


def mapping_of(address: int) -> dict[str, str]:
    """The /proc/self/smaps fields of the mapping that holds ``address``."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        bounds = line.split()[0]
        if "-" in bounds and all(c in "0123456789abcdef-" for c in bounds):
            low, high = (int(part, 16) for part in bounds.split("-"))
            if low <= address < high:
                fields = {}
                for field in lines[i + 1:]:
                    name, _, value = field.partition(":")
                    if " " in name or "-" in name:
                        break
                    fields[name] = value.strip()
                return fields
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not collapses_on_request(), reason="no transparent huge pages on request here")
@pytest.mark.parametrize("dtype", ["int8", "fp16"])
def test_a_large_packed_table_is_on_huge_pages_after_its_first_lookup_with_the_same_values(dtype):
    assert kernels.fused_ops() is not None  # built by `make test`
    paddle.seed(0)
    table = QuantizedEmbedding.from_embedding(DenseEmbedding(120_000, 64), dtype)  # 7.7 / 15.4 MB of codes
    table.eval()
    codes = table.codes.numpy().copy()
    start = table.codes.data_ptr()
    first_whole_page = (start + HUGE_PAGE - 1) // HUGE_PAGE * HUGE_PAGE
    with paddle.no_grad():
        rows = table(paddle.to_tensor(np.arange(0, 120_000, 7, dtype=np.int64))).numpy()
    mapping = mapping_of(first_whole_page)
    assert "hg" in mapping["VmFlags"].split()
    assert int(mapping["AnonHugePages"].split()[0]) * 1024 >= HUGE_PAGE
    np.testing.assert_array_equal(table.codes.numpy(), codes)
    with paddle.no_grad():
        again = table(paddle.to_tensor(np.arange(0, 120_000, 7, dtype=np.int64))).numpy()
    np.testing.assert_array_equal(again, rows)
