# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.graphdbg-installed
PYTEST_ARGS ?=
SHELL  := /bin/bash
# This machine's pip configuration names local package indexes that lack most
# packages; pip warns once per package. The filter keeps pip's exit status.
PIP_FILTER := grep -v "is ignored: it is neither a file nor a directory"

.PHONY: demo test test-fast test-torch-latest bench install install-torch-latest clean \
	install-torch-floor test-torch-floor gpu-wheels gpu-check

install: $(STAMP)

# Python writes bytecode for what it imports (these machines set
# PYTHONDONTWRITEBYTECODE; empty is unset to Python): graphdbg's own modules
# and pytest's rewritten tests are then compiled once, not in each of the
# suite's 300-odd processes (about 20 s of `make test`; `__pycache__` is
# ignored by git).
export PYTHONDONTWRITEBYTECODE :=

# The bytecode of graphdbg's runtime dependencies (torch, Textual, rich...),
# compiled on every core, as pip would compile them (uv does not): without
# it, where PYTHONDONTWRITEBYTECODE is set, each import of torch compiles it
# anew (4.4 s against 1.9 s). The test extra's packages (transformers, pandas:
# thousands of files, a few hundred imported) are compiled as the suite
# imports them: about 10 s less set-up (tools/bytecode.py).
BYTECODE = $(BIN)/python tools/bytecode.py

# The venv is python's own (pip in it, for the user); its packages are
# installed by uv (UV, installed by that pip):
# the same versions pip resolves, in 2-5 s against pip's 21-40 s here (pip
# asks the indexes one package at a time). uv reads no pip configuration: the
# folders of wheels pip is pointed at (PIP_FIND_LINKS, or pip's find-links
# setting; where the machine's torch 2.13 CPU build lies) are passed on, or it
# would fetch PyPI's CUDA build.
UV := uv==0.13.9
UV_FIND_LINKS_ARGS = $(foreach d,$(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null)),--find-links $(d))

# The oldest supported torch (constraints/oldest.txt), as CI's first leg.
$(STAMP): pyproject.toml constraints/oldest.txt constraints/tools.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	set -o pipefail; $(BIN)/python -m pip install -q '$(UV)' 2>&1 | { $(PIP_FILTER) || true; }
	$(BIN)/uv pip install -q --python $(BIN)/python $(UV_FIND_LINKS_ARGS) -c constraints/oldest.txt -e '.[test]'
	$(BYTECODE)
	touch $(STAMP)

# Runs samples/demo.py under `graphdbg run` (a miscompiled tanh, a graph break,
# a recompile; the aot_eager backend compiles in seconds) and prints the report
# at the terminal's width, then the command that opens the run in the TUI.
demo: $(STAMP)
	$(BIN)/graphdbg run -q -o demo.run samples/demo.py --backend aot_eager
	$(BIN)/graphdbg report demo.run
	@echo "next: source $(BIN)/activate, then graphdbg tui demo.run"

# graphdbg's overheads against peers and plain runs, one table (README's
# "Performance" says how long it takes; benchmarks/bench.py --help: --quick and
# --only SECTION for development, e.g. make bench BENCH_ARGS="--quick --only capture").
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python benchmarks/bench.py $(BENCH_ARGS)

# pytest exits 5 when it collected no test: we say so loudly but let every
# other non-zero status (failures, errors, interrupts) fail the target.
# Two xdist workers (one per core here); tests that read the same sample runs
# share a worker (--dist loadgroup, tests/conftest.py). $(2): the target's own
# paths and options, before PYTEST_ARGS (which adds to them, e.g. -x or -k).
define run_pytest
@$(1)/python -m pytest -q -rfEs -n 2 --dist loadgroup --durations=15 $(2) $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest ran no test (exit 5)"; exit 0; fi; exit $$rc
endef

# The tests are in tiers, one folder each (docs/development.md, "Tests"):
# tests/unit (no torch.compile, no program run), tests/capture (in-process
# torch.compile and Dynamo, cheap backends), tests/e2e (programs under
# `graphdbg run`, inductor, distributed, exports, the TUI, the pytest plugin).
# `make test` runs them all; `make test-fast` the unit tier, for the inner loop.
test: $(STAMP)
	$(call run_pytest,$(BIN))

test-fast: $(STAMP)
	$(call run_pytest,$(BIN),tests/unit)

# -- the newest supported torch (CI's second leg) ---------------------------------
# Its wheel is the CUDA build, several GB: torch and the other dependencies go
# into a venv kept outside the checkout, in the machine's cache, named by a hash
# of what it was made from, and made once. The checkout's own venv
# (.venv-torch-latest) is thin: it sees that venv's packages through a .pth
# file and holds only graphdbg's editable install (no pip or setuptools of its
# own to shadow the shared venv's), so a fresh clone sets up in seconds and
# never writes into the shared venv.
# pip on these machines is capped at torch 2.14.1 by a machine-wide constraint
# file; PIP_CONSTRAINT names ours instead for this install (an empty
# PIP_CONSTRAINT= would not lift the cap).
CI_CACHE     ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/graphdbg-ci
# the key: pyproject.toml's dependency lists and the constraints, nothing else of it
LATEST_KEY   := $(shell { sed -n '/^dependencies/,/^\[project.scripts\]/p' pyproject.toml; \
                  cat constraints/latest.txt constraints/tools.txt; } | sha1sum | cut -c1-12)
LATEST_BASE  := $(CI_CACHE)/venv-torch-latest-$(LATEST_KEY)
LATEST_VENV  := .venv-torch-latest
LATEST_STAMP := $(LATEST_VENV)/.graphdbg-installed-$(LATEST_KEY)

# A leg's venvs, made the same way for both legs: $(1) leg (latest | floor),
# $(2) the cached base venv, $(3) the checkout's thin venv, $(4) its stamp,
# $(5) the Python, $(6) the constraints file, $(7) the base's key.
define leg_venvs
$(2)/.complete:
	@echo "making the torch-$(1) venv in $(2) with $(5) (once per machine: a CUDA build of several GB)"
	rm -rf $(2)
	mkdir -p $$(CI_CACHE)
	$(5) -m venv $(2)
	set -o pipefail; PIP_CONSTRAINT=$$(CURDIR)/$(6) $(2)/bin/python -m pip install -q '.[test]' 2>&1 | { $$(PIP_FILTER) || true; }
	$(2)/bin/python -m pip uninstall -q -y graphdbg
	rm -rf build
	touch $$@
	@# venvs of earlier keys: several GB each
	find $$(CI_CACHE) -maxdepth 1 -name 'venv-torch-$(1)-*' ! -name 'venv-torch-$(1)-$(7)' -exec rm -rf {} +

$(4): $(2)/.complete
	rm -rf $(3)
	$(2)/bin/python -m venv --without-pip $(3)
	base=$$$$($(2)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))'); \
	own=$$$$($(3)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))'); \
	echo "import site; site.addsitedir('$$$$base')" > $$$$own/graphdbg-torch-$(1).pth
	@# the tools' executables (py-spy) where the tests look for them, beside python
	for f in $(2)/bin/*; do case $$$${f##*/} in pip*|python*|[aA]ctivate*) ;; \
	  *) [ -e $(3)/bin/$$$${f##*/} ] || ln -s $$$$f $(3)/bin/ ;; esac; done
	set -o pipefail; $(2)/bin/python -m pip --python $(3)/bin/python install -q --no-deps -e . 2>&1 | { $$(PIP_FILTER) || true; }
	$(3)/bin/python -c 'import sys, torch, graphdbg.hooks; print("torch", torch.__version__, "on Python", sys.version.split()[0], "for graphdbg")'
	touch $$@
endef

$(eval $(call leg_venvs,latest,$(LATEST_BASE),$(LATEST_VENV),$(LATEST_STAMP),$(PYTHON),constraints/latest.txt,$(LATEST_KEY)))

install-torch-latest: $(LATEST_STAMP)

test-torch-latest: $(LATEST_STAMP)
	$(call run_pytest,$(LATEST_VENV)/bin)

# -- the oldest supported torch, 2.11 (CI's third leg) ---------------------------
# The release the GPU machines we borrow carry (2.11.0+cu130, Python 3.12). Made
# as the torch-latest venv is (a cached base of several GB, a thin checkout venv),
# with Python 3.12 where the machine has one, so this leg is the GPU machines'
# torch and Python; it runs the version-sensitive subset, not the whole suite.
FLOOR_PYTHON ?= $(or $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12)),$(shell command -v python3.12 2>/dev/null),$(PYTHON))
FLOOR_KEY    := $(shell { sed -n '/^dependencies/,/^\[project.scripts\]/p' pyproject.toml; \
                  cat constraints/floor.txt constraints/tools.txt; \
                  $(FLOOR_PYTHON) --version 2>&1; } | sha1sum | cut -c1-12)
FLOOR_BASE   := $(CI_CACHE)/venv-torch-floor-$(FLOOR_KEY)
FLOOR_VENV   := .venv-torch-floor
FLOOR_STAMP  := $(FLOOR_VENV)/.graphdbg-installed-$(FLOOR_KEY)
# what changes between torch releases: the compat seam, every sample's findings
# at the same lines as on the other legs (tests/e2e/test_torch_versions.py runs the
# golden samples; the goldens' whole documents are 2.13's: on 2.11 transformers
# traces other masking code and torch's own source lines differ, so
# tests/e2e/test_golden.py is not in this leg), placement, exports, compile errors,
# the device statistics, the GPU check's CPU-safe parts and `graphdbg repro` (its
# scripts use torch's logs and Dynamo's guards, which change). Deselected: what
# 2.11 places less precisely (docs/development.md): Dynamo's 2.11 tracebacks
# carry no columns, so an export's caret covers the whole line, and 2.11's ONNX
# export does not narrow a declared range at a slice.
FLOOR_TESTS  ?= tests/capture/test_compat.py tests/e2e/test_torch_versions.py \
                tests/capture/test_placement_errors.py tests/capture/test_placement_recompile.py \
                tests/e2e/test_placement_exports.py tests/e2e/test_compile_errors.py \
                tests/e2e/test_exports.py tests/capture/test_statsqueue.py tests/e2e/test_gpu_check.py \
                tests/e2e/test_repro.py tests/e2e/test_repro_cutout.py tests/e2e/test_repro_grad.py \
                tests/capture/test_repro_record.py \
                --deselect tests/e2e/test_placement_exports.py::test_a_strict_export_narrowed_by_a_slice_is_at_the_same_line \
                --deselect tests/e2e/test_placement_exports.py::test_onnx_keeps_the_declared_range_a_slice_narrows_and_says_so_at_the_slice \
                --deselect tests/e2e/test_placement_exports.py::test_every_finding_is_at_a_marked_line_and_the_report_shows_each_once

$(eval $(call leg_venvs,floor,$(FLOOR_BASE),$(FLOOR_VENV),$(FLOOR_STAMP),$(FLOOR_PYTHON),constraints/floor.txt,$(FLOOR_KEY)))

install-torch-floor: $(FLOOR_STAMP)

# PYTEST_ARGS= narrows it further (-k, -x); FLOOR_TESTS=tests runs the whole suite there
test-torch-floor: $(FLOOR_STAMP)
	$(call run_pytest,$(FLOOR_VENV)/bin,$(FLOOR_TESTS))

# -- the GPU check (docs/development.md, "On a GPU machine") ---------------------
# gpu-wheels: what graphdbg needs besides torch, as wheels for the GPU machines'
# CPython 3.12 on x86-64 Linux (pure-Python ones, numpy's and safetensors'), and
# setuptools and pip to install graphdbg from the working tree without an index;
# into gpu/wheels/ (ignored), under the 64 MiB a device call carries.
GPU_WHEELS    := gpu/wheels
GPU_PYVERSION ?= 3.12
gpu-wheels:
	rm -rf $(GPU_WHEELS); mkdir -p $(GPU_WHEELS)
	set -o pipefail; $(PYTHON) -m pip download -q -d $(GPU_WHEELS) --only-binary=:all: \
	  --python-version $(GPU_PYVERSION) --implementation cp --abi cp$(subst .,,$(GPU_PYVERSION)) --abi abi3 --abi none \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
	  rich 'textual>=0.80' 'safetensors>=0.4' 'numpy>=1.24' 'setuptools>=68' pip 2>&1 | { $(PIP_FILTER) || true; }
	@du -sh $(GPU_WHEELS); ls $(GPU_WHEELS)

# gpu-check: on the GPU machine, from a copy of the working tree with gpu/wheels:
# .venv-gpu over the machine's torch, then the checks (gpu/check.py --help).
# GPU_CHECK_ARGS="--out DIR" puts the run files and gpu-check.json elsewhere.
GPU_PYTHON     ?= python3
GPU_CHECK_ARGS ?=
gpu-check:
	$(GPU_PYTHON) gpu/check.py --install --require-cuda $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) $(LATEST_VENV) $(FLOOR_VENV) $(GPU_WHEELS) *.egg-info .pytest_cache showcase.run demo.run
