"""Every Python example in the README runs as written."""
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)


def test_the_readme_has_examples():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, tmp_path):
    result = subprocess.run([sys.executable, "-c", BLOCKS[index]], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": str(ROOT)}, timeout=600)
    assert result.returncode == 0, f"README example {index}:\n{BLOCKS[index]}\n{result.stderr[-3000:]}"
