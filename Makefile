# nvtopy -- every command a developer or user needs. `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
ARGS   ?=

.PHONY: install demo run test test-collect test-fast lint format bench bench-peers screenshots device-wheels device-check clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

# Bytecode, as a pip-installed copy has it: start-up time is a feature of nvtopy, and
# an editable install under PYTHONDONTWRITEBYTECODE would recompile every module on every run.
install: $(STAMP)
	@$(BIN)/python -m compileall -q nvtopy

demo: install                 ## the TUI on simulated GPUs (no driver needed)
	$(BIN)/nvtopy --demo $(ARGS)

run: install                  ## the TUI on this machine's real GPUs
	$(BIN)/nvtopy $(ARGS)

# The timing tests measure against the clock: they run after the others, so the suite's own load cannot trip
# them, TIMING_WORKERS at a time (they mostly wait: about 12 s of CPU in 45 s of tests; on 2 cores 2 workers took
# 90 s, 4 took 54-59 s, passing three times while three other jobs loaded the machine), handed out one by one
# (--maxschedchunk 1: xdist's first hand-out, a sixth of them in a row, gave all six slow ones to one worker, 131 s
# of the pass's 155 s on a loaded machine; 90 s handed out one by one). --dist loadgroup keeps the
# tests of a module-scoped fixture (a real Prometheus) on one worker (tests/conftest.py groups them).
# TEST_WORKERS: three times as many workers as cores, as much of the suite waits on processes and servers (over a
# whole .ci/run the 2 cores were busy 53-57 %). Measured on the 2-core machine (main pass, back to back, same clone,
# 2026-11-30): 4 workers 166 s, 6 workers 135 s, 8 workers 140 s (docs/development.md).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) * 3 )))
TIMING_WORKERS ?= $(shell echo $$(( $$(nproc) * 2 )))
# The timing pass collects only the test files that say "mark.timing" (tests/conftest.py stops a run where a timing
# test's file does not): each of its workers collected all ~180 files before its first test, 3.1 s of CPU against
# 1.2 s for these 17, four workers at once on 2 cores. With PYTEST_ARGS (paths, -k) it collects all, as before.
TIMING_FILES = $(if $(PYTEST_ARGS),,$(shell grep -rl --include='test_*.py' 'mark\.timing' tests | sort))
# test-collect: on a fresh clone every xdist worker rewrote the asserts of all the test modules at once (about 15 s
# of CPU each; the cache in tests/**/__pycache__ is then warm): one collection first writes that cache once, beside
# lint's mypy, one core each (a fresh clone's main run started 22 s later without it). Errors are the main run's.
# A test's `nvtopy ...` run to its end is forked from a per-worker server that has imported nvtopy (tests/cli_runner.py:
# about 65 ms of CPU less a run, 410 runs a main pass); NVTOPY_TEST_SPAWN=1 spawns each as before, to compare.
test: install                 ## lint, then the whole test suite, on every core
	@$(MAKE) --no-print-directory -j2 lint test-collect
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=15 -m "not timing" $(PYTEST_ARGS)
	$(BIN)/python -m pytest -n $(TIMING_WORKERS) --maxschedchunk 1 --durations=15 -m timing $(PYTEST_ARGS) $(TIMING_FILES)

test-collect: install
	@$(BIN)/python -m pytest --collect-only -qq -p no:cacheprovider >/dev/null 2>&1 || true

test-fast: install            ## the inner loop: no slow test, no real server (markers: pyproject.toml)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not slow and not real_server" $(PYTEST_ARGS)

lint: install                 ## ruff, and mypy --strict on the package ([tool.mypy] in pyproject.toml)
	$(BIN)/ruff check nvtopy tests benchmarks screenshots examples devcheck
	$(BIN)/ruff format --check nvtopy tests benchmarks screenshots examples devcheck
	$(BIN)/mypy

format: install
	$(BIN)/ruff check --fix nvtopy tests benchmarks screenshots examples devcheck
	$(BIN)/ruff format nvtopy tests benchmarks screenshots examples devcheck

bench: install                ## the project's own benchmarks (simulated backend)
	$(BIN)/python benchmarks/bench_tui.py $(ARGS)
	$(BIN)/python benchmarks/bench_sampler.py $(ARGS)
	$(BIN)/python benchmarks/bench_host.py
	$(BIN)/python benchmarks/bench_fleet.py
	$(BIN)/python benchmarks/bench_ssh.py

bench-peers: install          ## nvtopy vs nvitop and gpustat on ../shared/fake-nvml (skips without it)
	$(BIN)/python benchmarks/bench_peers.py $(ARGS)
	$(BIN)/python benchmarks/bench_once.py -n 9

screenshots: install          ## regenerate screenshots/*.svg from the simulated backend (and web-demo.png: Chromium)
	$(BIN)/python screenshots/make_screenshots.py
	NVTOPY_WEB_SCREENSHOT=1 $(BIN)/python -m pytest -q -p no:cacheprovider tests/end_to_end/test_web_browser.py -k shows

device-wheels:                ## nvtopy's runtime dependencies as cp312 manylinux x86_64 wheels in .whl/ (needs a network)
	$(PYTHON) devcheck/device_check.py --download-wheels --wheels .whl

device-check:                 ## on a machine with a real GPU: nvtopy against it, torch and nvidia-smi (docs/device-check.md)
	$(PYTHON) devcheck/device_check.py $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache build dist .cache *.egg-info
