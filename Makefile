# Two commands for a fresh machine with python3 and pip:  make demo   and   make test
# The platform is Paddle 2.6.2 (.venv); `make test` runs the suite on it and again on Paddle 3.3.1 (.venv-paddle3).
PYTHON ?= python3
VENV ?= .venv
VENV3 ?= .venv-paddle3
VENV_PEERS ?= .venv-peers
PY := $(VENV)/bin/python
PY3 := $(VENV3)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt setup.py | cksum | cut -d' ' -f1)
STAMP3 := $(VENV3)/.installed-$(shell cat requirements-paddle3.txt setup.py | cksum | cut -d' ' -f1)
# the suite runs in one worker process per core (pytest-xdist), each test file in one worker
PYTEST_WORKERS ?= $(shell nproc 2>/dev/null || echo 2)
PYTEST_ARGS ?=

.PHONY: setup setup-paddle3 setup-peers data kernels redis-server demo test test-paddle26 test-paddle3 docs clean

$(STAMP): requirements.txt setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -r requirements.txt
	$(PY) -m pip install --disable-pip-version-check -q --no-deps -e .
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

$(STAMP3): requirements-paddle3.txt setup.py
	$(PYTHON) -m venv $(VENV3)
	$(PY3) -m pip install --disable-pip-version-check -q -r requirements-paddle3.txt
	$(PY3) -m pip install --disable-pip-version-check -q --no-deps -e .
	rm -f $(VENV3)/.installed-*
	touch $(STAMP3)

# the tests also cover the paddlenlp interop (extra `nlp`, beside Paddle 2.6 only)
TEST_STAMP := $(VENV)/.installed-nlp-$(shell cat requirements.txt setup.py | cksum | cut -d' ' -f1)

$(TEST_STAMP): $(STAMP)
	$(PY) -m pip install --disable-pip-version-check -q -e ".[nlp]" -c requirements.txt
	touch $(TEST_STAMP)

setup: $(STAMP)

setup-paddle3: $(STAMP3)

# torch and FBGEMM for the peer columns of `tools/bench.py lookups` (benchmarks only)
setup-peers:
	$(PYTHON) -m venv $(VENV_PEERS)
	$(VENV_PEERS)/bin/python -m pip install --disable-pip-version-check -q -r requirements-peers.txt
	$(VENV_PEERS)/bin/python -m pip install --disable-pip-version-check -q --no-deps -r requirements-peers-torchrec.txt

data: $(STAMP)
	$(PY) tools/get_data.py movielens
	$(PY) tools/get_data.py chnsenti

kernels: $(STAMP)
	$(PY) -m paddle_edo.kernels

demo: data kernels
	$(PY) tools/train.py -c configs/movielens_dense.yaml

test: test-paddle26 test-paddle3

# the Redis tests start their own redis-server: installed here from Debian's packages when missing and
# possible (root with apt-get); elsewhere install Redis >= 6 yourself, or those tests are skipped saying so
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { apt-get install -y -q redis-server >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q redis-server >/dev/null 2>&1; }; }; } || \
	  echo "redis-server is not installed and could not be: the Redis tests will be skipped"

test-paddle26: data kernels redis-server $(TEST_STAMP)
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS) tests

test-paddle3: data redis-server $(STAMP3)
	$(PY3) -m paddle_edo.kernels
	$(PY3) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS) tests
	$(MAKE) docs

# the guides and the API reference (Sphinx, MyST for the Markdown guides) into docs/_build, warnings as
# errors; built in the Paddle 3.3.1 environment, the shorter test leg
DOCS_STAMP := $(VENV3)/.installed-docs-$(shell cat requirements-docs.txt | cksum | cut -d' ' -f1)

$(DOCS_STAMP): $(STAMP3) requirements-docs.txt
	$(PY3) -m pip install --disable-pip-version-check -q -r requirements-docs.txt
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(PY3) -m sphinx -W --keep-going -q -b html docs docs/_build

clean:
	rm -rf $(VENV) $(VENV3) $(VENV_PEERS) output .pytest_cache docs/_build
