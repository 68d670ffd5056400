# Two commands for a fresh machine with python3 and pip:  make demo   and   make test
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt setup.py | cksum | cut -d' ' -f1)
PYTEST_ARGS ?=

.PHONY: setup data kernels demo test clean

$(STAMP): requirements.txt setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -r requirements.txt
	$(PY) -m pip install --disable-pip-version-check -q --no-deps -e .
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

# the tests also cover the paddlenlp interop (extra `nlp`)
TEST_STAMP := $(VENV)/.installed-nlp-$(shell cat requirements.txt setup.py | cksum | cut -d' ' -f1)

$(TEST_STAMP): $(STAMP)
	$(PY) -m pip install --disable-pip-version-check -q -e ".[nlp]"
	touch $(TEST_STAMP)

setup: $(STAMP)

data: $(STAMP)
	$(PY) tools/get_data.py movielens
	$(PY) tools/get_data.py chnsenti

kernels: $(STAMP)
	$(PY) -m paddle_edo.kernels

demo: data kernels
	$(PY) tools/train.py -c configs/movielens_dense.yaml

test: data kernels $(TEST_STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS) tests

clean:
	rm -rf $(VENV) output .pytest_cache
