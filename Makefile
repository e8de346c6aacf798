# Two commands on a fresh machine:
#   make demo   set up, then build shards from bundled photos and run the loader on the CPU
#   make test   set up, then run every test (what .ci/run runs)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

FUZZ_SECONDS ?= 60

.PHONY: setup setup-demo demo test test-fuzz-replay test-fuzz-and-types test-kernels bench sysdeps clean fuzz fuzz-replay gpu-check ops-table

# libjpeg-turbo's headers are needed to build gpudecode._native; libpng's are used where found.
sysdeps:
	@if [ ! -f /usr/include/jpeglib.h ] && ! ls /usr/include/*/jpeglib.h >/dev/null 2>&1; then \
	  if command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -q && apt-get install -y -q libjpeg62-turbo-dev || apt-get install -y -q libjpeg-turbo8-dev; \
	  else echo "install libjpeg-turbo's development headers (libjpeg-turbo-devel / libjpeg62-turbo-dev)"; exit 1; fi; \
	fi
	@# libpng's headers (optional: PNG decoded natively, GIL released; else through pyspng)
	@if [ ! -f /usr/include/png.h ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get install -y -q libpng-dev || echo "libpng-dev not installed: PNG will go through pyspng"; \
	fi
	@# libdeflate's headers (optional: PNG's image data inflated about twice as fast as zlib does)
	@if [ ! -f /usr/include/libdeflate.h ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get install -y -q libdeflate-dev || echo "libdeflate-dev not installed: PNG is inflated by zlib"; \
	fi

$(BIN)/python:
	@echo "==> creating the virtualenv $(VENV)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# pip runs quietly; a line before says what comes and what it cost here, a line after how long it took
TEST_EXTRAS := test,gpu,dali,formats,lightning
TIMED = start=$$(date +%s); $(1) && echo "==> done in $$(( $$(date +%s) - start )) s"

# A real install (not editable): the tests import what `pip install .` produced, with every
# optional backend (their CPU builds are tested here). The modules' bytecode is compiled after the
# install on every core (pip compiles on one), not left to the first imports (where
# PYTHONDONTWRITEBYTECODE is set, every process would compile what it imports again); a file
# that does not compile is left to its import, as pip leaves it (bench/RESULTS.md has the times).
# A user's `pip install gpudecode` is the CPU path alone; extras: [gpu] (numba-cuda,
# nvImageCodec, torchcodec), [dali].
setup: sysdeps $(BIN)/python
	@echo "==> pip install '.[test,gpu,dali,formats,lightning]': gpudecode (its C++ module is built: about 1 min), torch, numba, the GPU"
	@echo "    backends' CPU builds (DALI, nvImageCodec, torchcodec, CuPy) and the test tools; a first install took"
	@echo "    about 2 min and 7.3 GB here, wheels from a local cache (3.7 GB of it CUDA libraries); later runs seconds"
	@$(call TIMED,$(BIN)/pip install -q --no-compile ".[$(TEST_EXTRAS)]" && { $(BIN)/python -m compileall -qq -j 0 \
	  "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || true; })

# The demo needs the CPU path and scikit-image's photos only.
setup-demo: sysdeps $(BIN)/python
	@echo "==> pip install '.[demo]': gpudecode (its C++ module is built: about 1 min), torch, numba, Pillow and"
	@echo "    scikit-image (its photos); a first install took about 2 min and 5.8 GB here (3.0 GB of it the CUDA"
	@echo "    libraries torch's Linux wheel brings: the README says how to avoid them), later runs seconds"
	@$(call TIMED,$(BIN)/pip install -q ".[demo]")

demo: setup-demo
	$(BIN)/gpudecode demo --workdir demo_data

# pytest runs on TEST_WORKERS processes (pytest-xdist; the longest tests first, see
# tests/conftest.py), under coverage; one kernel cache for the run, made empty at its start
# (tests/warm_kernels.py compiles the main kernels into it first; the suite, its GPU rehearsal
# and the scripts they start load them from there).
TEST_WORKERS ?= 2
TEST_CACHE := $(CURDIR)/bench/_out/test-kernel-cache
# each of make test's steps before pytest prints when it ends (GNU make 4.0 and later can)
SYNC_OUTPUT := $(if $(filter output-sync,$(.FEATURES)),--output-sync=target,)
test: setup
	$(BIN)/ruff check gpudecode kernels tests bench examples
	rm -rf $(TEST_CACHE) .coverage
	@# two at a time, a core each (each prints when it ends): the fuzz replay, then mypy; the CPU kernels
	@# compiled into the run's cache (tests/warm_kernels.py), so that the tests load them (about as long)
	@$(MAKE) --no-print-directory -j2 $(SYNC_OUTPUT) test-fuzz-and-types test-kernels
	cd tests && GPUDECODE_CACHE_DIR=$(TEST_CACHE) COVERAGE_FILE=../.coverage ../$(BIN)/python -m pytest -q -rs \
	  -p no:cacheprovider --durations=25 -n $(TEST_WORKERS) --dist worksteal --cov --cov-config=../pyproject.toml \
	  --cov-report=
	$(BIN)/python -m coverage report --rcfile=pyproject.toml --data-file=.coverage | grep -E '^(Name|TOTAL)'

# make test's steps before pytest (no set-up of their own: make test ran it). The GPU machine's
# first run (make gpu-check, DALI and torchcodec hidden) is rehearsed in the suite:
# tests/test_gpu_call.py.
test-fuzz-replay:
	$(call TIMED,$(BIN)/python tests/fuzz/run.py replay)
test-fuzz-and-types: test-fuzz-replay
	$(call TIMED,$(BIN)/mypy gpudecode kernels)
test-kernels:
	$(call TIMED,GPUDECODE_CACHE_DIR=$(TEST_CACHE) $(BIN)/python tests/warm_kernels.py)

# The saved fuzzing inputs through the C++ harnesses under g++'s ASan + UBSan (also in `make test`).
fuzz-replay: setup
	@$(MAKE) --no-print-directory test-fuzz-replay

# libFuzzer (clang) and atheris harnesses, FUZZ_SECONDS each (tests/fuzz/run.py; needs clang and
# libclang-rt-14-dev: apt-get install clang libclang-rt-14-dev).
fuzz: setup
	$(BIN)/pip install -q ".[fuzz]"
	$(BIN)/python tests/fuzz/run.py fuzz --seconds $(FUZZ_SECONDS)

bench: setup
	$(BIN)/python bench/reader.py
	$(BIN)/python bench/kernels.py
	$(BIN)/python bench/loader.py
	$(BIN)/python bench/formats.py
	$(BIN)/python bench/png.py
	$(BIN)/python bench/tensors.py

# On any CUDA machine: the GPU tests and bench/gpu.py, reports in $(OUT) (or bench/_out/gpu).
# PART=preflight|kernels|pipeline|bench runs one part (each fits a 10-minute call; the
# default, all, runs them in turn), BUDGET=seconds cuts a part that would run past it.
# Uses this repository's venv when `make setup` made one, else $(PYTHON) as it is (a machine
# where gpudecode is installed already, e.g. the GPU machine's own Python). Without CUDA
# it says so and runs the same checks on the CPU (kernels under the simulator).
GPU_PY := $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
gpu-check:
	$(GPU_PY) bench/gpu_check.py $(if $(OUT),--out $(OUT),) $(if $(PART),--part $(PART),) \
	  $(if $(BUDGET),--budget $(BUDGET),)

# `gpudecode ops`' listing and the README's, regenerated from the transforms' declarations (after adding an op)
ops-table: setup
	cd tests && ../$(BIN)/python -c "from gpudecode.transforms.ops_table import write_table; write_table('../gpudecode/_ops_table.py', '../README.md', '../gpudecode/transforms/__init__.py', '../kernels')"

clean:
	rm -rf build dist *.egg-info demo_data bench/_out
