# Two commands on a fresh machine: `make demo` and `make test`. Each creates or updates .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
RUNTIME_STAMP := $(VENV)/.runtime
UV_VERSION := 0.13.9

.PHONY: demo test test-lowest bench bench-scale bench-gpu bench-peers california install lock clean

install: $(STAMP)

# Two installs into one .venv: the runtime (`make demo`: requirements-runtime.lock, the core dependencies
# alone) and everything the suite and the benchmarks use (`make test`: requirements.lock, a superset at
# the same versions). Each reinstalls whenever the dependency declaration, its lock or the way they are
# installed changes.
UV_INSTALL = test -x $(BIN)/python || $(PYTHON) -m venv $(VENV); \
	$(BIN)/python -m pip install -q --disable-pip-version-check "uv==$(UV_VERSION)" && \
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -r $(1) && \
	$(BIN)/uv pip install -q --python $(BIN)/python --no-deps -e .

$(RUNTIME_STAMP): pyproject.toml requirements-runtime.lock Makefile
	$(call UV_INSTALL,requirements-runtime.lock)
	touch $(RUNTIME_STAMP)

$(STAMP): pyproject.toml requirements.lock Makefile
	$(call UV_INSTALL,requirements.lock)
	touch $(STAMP) $(RUNTIME_STAMP)

# Bytecode, written ahead: where PYTHONDONTWRITEBYTECODE is set (this machine, CI, the image) Python
# never caches what it compiles, so every process (each CLI command, each Dask worker) compiled its
# imports from source again: 2.5 of the 3.8 s of a small `dpstream validate`. The libraries'
# bytecode is written at install (--compile-bytecode above); ours here, only for changed sources, with
# the preprocessing loop's machine code (pipelines/preprocessing/range_map.py: one process fills Numba's cache).
BYTECODE := $(BIN)/python -m compileall -q -j 0 dpstream pipelines flows examples benchmarks \
	&& $(BIN)/python -c 'from dpstream.pipelines.preprocessing.range_map import compile_all; compile_all()'

demo: $(RUNTIME_STAMP)
	$(BYTECODE)
	. ./.ci/env.sh && $(BIN)/dpstream demo

# The real-data example: California housing, DP linear regression at epsilon = 1 (docs/lakes.md, "Real data: California housing").
california: $(STAMP)
	. ./.ci/env.sh && $(BIN)/python -m examples.california

# Lint and format check first (rules and their reasons in pyproject.toml), then the suite on
# TEST_WORKERS pytest-xdist processes: many tests wait on subprocesses, servers and a cron tick, so two
# workers on two cores took the suite from 15:14 to 9:58. TEST_WORKERS=0 runs it serially. The tests
# marked slow come first (tests/conftest.py) and --maxschedchunk=1 hands them out one at a time as a
# worker frees up; xdist's default sends each worker a quarter of the suite at once, so one worker
# got every long test and ran them one after another while the other stood idle.
TEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BYTECODE)
	. ./.ci/env.sh && $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --maxschedchunk=1 tests

bench: $(STAMP)
	$(BYTECODE)
	. ./.ci/env.sh && $(BIN)/python -m benchmarks

# A lake 20x the workers' memory end to end through the CLI: 3e8 rows x 16 features (24 GB of
# Parquet) on two 512 MiB workers, with dask-ml as the non-private peer. About 35 minutes on 2 cores and
# ~60 GB of disk under .bench/scale (the lake is kept between runs). BENCH_SCALE_ARGS="--rows 4000000"
# checks the whole path in a few minutes.
BENCH_SCALE_ARGS ?= --rows 300000000 --memory-limit 512MiB
bench-scale: $(STAMP)
	$(BYTECODE)
	. ./.ci/env.sh && $(BIN)/python -m benchmarks.scale $(BENCH_SCALE_ARGS)

# The CuPy backend on a CUDA machine: installs the gpu extra, runs tests/gpu (a skip fails there), the
# fused kernel's launch sweep and benchmarks/gpu_speed.py (markdown in .bench/). DPSTREAM_PYTHON=python3
# uses a prepared image.
bench-gpu:
	bash .ci/bench-gpu

# Peer libraries for comparisons only (not in the lock: torch is large). On the project's machines
# pip finds the CPU build of torch 2.13.0 locally; elsewhere it downloads it.
bench-peers: $(STAMP)
	$(BIN)/python -m pip install -q "torch==2.13.0" "opacus==1.6.0"
	. ./.ci/env.sh && $(BIN)/python -m benchmarks.opacus_compare

# Regenerate the locks after changing pyproject.toml (needs the package registry): the test lock, then
# at the same versions the runtime's (core alone), the flow image's (core, the lake extras, kubernetes)
# and the worker image's (what the scheduler and workers import: infra/docker/requirements-worker.in).
lock: $(STAMP)
	$(BIN)/uv pip compile pyproject.toml --extra test --extra bench --python-version 3.11 \
	  --no-header --annotation-style line -o requirements.lock
	$(BIN)/uv pip compile pyproject.toml -c requirements.lock --python-version 3.11 \
	  --no-header --annotation-style line -o requirements-runtime.lock
	$(BIN)/uv pip compile pyproject.toml --extra s3 --extra delta --extra iceberg --extra kubernetes \
	  -c requirements.lock --python-version 3.11 --no-header --annotation-style line -o requirements-image.lock
	$(BIN)/uv pip compile infra/docker/requirements-worker.in -c requirements-image.lock --python-version 3.11 \
	  --no-header --annotation-style line -o requirements-worker.lock
	grep -E '^(pytest|pytest-timeout|hypothesis)==' requirements.lock | cut -d' ' -f1 > .lock-test-tools.txt
	$(BIN)/uv pip compile pyproject.toml --extra test --resolution lowest-direct -c .lock-test-tools.txt \
	  --python-version 3.11 --no-header --annotation-style line -o requirements-lowest.lock
	rm -f .lock-test-tools.txt

# The lowest versions pyproject.toml allows (requirements-lowest.lock; the test tools at the lock's), in
# .venv-lowest, through the tests of the estimators, the privacy core, conversion, the CLI and a lake run
# (docs/development.md, "Installing"). About 6 minutes; not part of `make test`.
LOWEST_TESTS := tests/test_estimators.py tests/test_preprocessing.py tests/test_budget.py tests/test_search.py \
	tests/test_sklearn_docs.py tests/privacy tests/pipelines/test_convert.py tests/flows/test_cli.py \
	tests/flows/test_preprocess.py tests/test_packaging.py tests/test_newcomer.py tests/flows/test_single_pass_cli.py
test-lowest: requirements-lowest.lock
	test -x .venv-lowest/bin/python || $(PYTHON) -m venv .venv-lowest
	.venv-lowest/bin/python -m pip install -q --disable-pip-version-check "uv==$(UV_VERSION)"
	.venv-lowest/bin/uv pip install -q --python .venv-lowest/bin/python -r requirements-lowest.lock
	.venv-lowest/bin/uv pip install -q --python .venv-lowest/bin/python --no-deps -e .
	. ./.ci/env.sh && .venv-lowest/bin/python -m pytest -q -n $(TEST_WORKERS) $(LOWEST_TESTS)

clean:
	rm -rf $(VENV) .venv-lowest .pytest_cache .hypothesis .demo .california .bench
