"""The README is a front page and the guides are the manual: every guide is linked from the README, every
link resolves, every public name has a docstring, and every Python example in the README and the guides
runs as written."""
import importlib
import inspect
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "guides").glob("*.md"))]
BLOCKS = [(page.relative_to(ROOT), block) for page in PAGES
          for block in re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)]
PUBLIC_MODULES = ["paddle_edo", "paddle_edo.nn", "paddle_edo.optim", "paddle_edo.serving", "paddle_edo.quant",
                  "paddle_edo.text", "paddle_edo.data", "paddle_edo.planner", "paddle_edo.cache", "paddle_edo.monitor",
                  "paddle_edo.models", "paddle_edo.distributed.sharded"]


def test_the_readme_is_a_front_page_linking_every_guide():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    assert "make demo" in readme and "make test" in readme
    for guide in sorted((ROOT / "docs" / "guides").glob("*.md")):
        assert f"docs/guides/{guide.name}" in readme, f"the README does not link {guide.name}"
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("page", [p.relative_to(ROOT) for p in [*PAGES, ROOT / "docs" / "benchmarks.md",
                                                                 ROOT / "CHANGELOG.md"]], ids=str)
def test_every_relative_link_resolves(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        assert ((ROOT / page).parent / target).exists(), f"{page}: link to {target} resolves to nothing"


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_public_name_has_a_docstring(module):
    loaded = importlib.import_module(module)
    names = getattr(loaded, "__all__", [])
    assert names, f"{module} declares no public names (__all__)"
    missing = [name for name in names if not inspect.getdoc(getattr(loaded, name))]
    assert not missing, f"{module}: public names without a docstring: {missing}"


@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=[f"{page}:{i}" for i, (page, _) in enumerate(BLOCKS)])
def test_every_example_runs(index, tmp_path):
    page, block = BLOCKS[index]
    result = subprocess.run([sys.executable, "-c", block], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "GLOG_minloglevel": "2", "PYTHONPATH": str(ROOT)}, timeout=600)
    assert result.returncode == 0, f"{page} example {index}:\n{block}\n{result.stderr[-3000:]}"
