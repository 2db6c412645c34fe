# Two commands on a fresh machine: `make demo` and `make test`. Each creates or updates .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
UV_VERSION := 0.13.9

.PHONY: demo test bench install lock clean

install: $(STAMP)

# Reinstall whenever the dependency declaration or the lock changes.
$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check "uv==$(UV_VERSION)"
	$(BIN)/uv pip install -q --python $(BIN)/python -r requirements.lock
	$(BIN)/uv pip install -q --python $(BIN)/python --no-deps -e .
	touch $(STAMP)

demo: $(STAMP)
	. ./.ci/env.sh && $(BIN)/python -m dpstream.demo

test: $(STAMP)
	. ./.ci/env.sh && $(BIN)/python -m pytest -q tests

bench: $(STAMP)
	. ./.ci/env.sh && $(BIN)/python -m benchmarks

# Regenerate the lock after changing pyproject.toml (needs the package registry).
lock: $(STAMP)
	$(BIN)/uv pip compile pyproject.toml --extra test --extra bench --python-version 3.11 \
	  --no-header --annotation-style line -o requirements.lock

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .demo .bench
