"""Sphinx configuration: the guides (Markdown, through MyST) and the API reference (autodoc from the
docstrings, napoleon reading their sections). ``make docs`` builds it into docs/_build, warnings as errors."""
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("GLOG_minloglevel", "2")

import paddle_edo  # noqa: E402

project = "paddle_edo"
version = release = paddle_edo.__version__
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "benchmarks/*"]
myst_heading_anchors = 3
suppress_warnings = ["myst.xref_missing"]  # links to files outside the site (configs/, examples/, tools/)
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
html_theme = "alabaster"
html_title = f"paddle_edo {release}"
