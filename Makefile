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

.PHONY: demo test test-torch-latest bench install install-torch-latest clean

install: $(STAMP)

# The oldest supported torch (constraints/oldest.txt), as CI's first leg.
$(STAMP): pyproject.toml constraints/oldest.txt constraints/tools.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	set -o pipefail; $(BIN)/python -m pip install -q -c constraints/oldest.txt -e '.[test]' 2>&1 | { $(PIP_FILTER) || true; }
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
# share a worker (--dist loadgroup, tests/conftest.py).
define run_pytest
@$(1)/python -m pytest -q -rfEs -n 2 --dist loadgroup --durations=15 $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest ran no test (exit 5)"; exit 0; fi; exit $$rc
endef

test: $(STAMP)
	$(call run_pytest,$(BIN))

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

$(LATEST_BASE)/.complete:
	@echo "making the torch-latest venv in $(LATEST_BASE) (once per machine: a CUDA build of several GB)"
	rm -rf $(LATEST_BASE)
	mkdir -p $(CI_CACHE)
	$(PYTHON) -m venv $(LATEST_BASE)
	set -o pipefail; PIP_CONSTRAINT=$(CURDIR)/constraints/latest.txt $(LATEST_BASE)/bin/python -m pip install -q '.[test]' 2>&1 | { $(PIP_FILTER) || true; }
	$(LATEST_BASE)/bin/python -m pip uninstall -q -y graphdbg
	rm -rf build
	touch $@
	@# venvs of earlier keys: several GB each
	find $(CI_CACHE) -maxdepth 1 -name 'venv-torch-latest-*' ! -name 'venv-torch-latest-$(LATEST_KEY)' -exec rm -rf {} +

$(LATEST_STAMP): $(LATEST_BASE)/.complete
	rm -rf $(LATEST_VENV)
	$(PYTHON) -m venv --without-pip $(LATEST_VENV)
	base=$$($(LATEST_BASE)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))'); \
	own=$$($(LATEST_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))'); \
	echo "import site; site.addsitedir('$$base')" > $$own/graphdbg-torch-latest.pth
	@# the tools' executables (py-spy) where the tests look for them, beside python
	for f in $(LATEST_BASE)/bin/*; do case $${f##*/} in pip*|python*|[aA]ctivate*) ;; \
	  *) [ -e $(LATEST_VENV)/bin/$${f##*/} ] || ln -s $$f $(LATEST_VENV)/bin/ ;; esac; done
	set -o pipefail; $(LATEST_BASE)/bin/python -m pip --python $(LATEST_VENV)/bin/python install -q --no-deps -e . 2>&1 | { $(PIP_FILTER) || true; }
	$(LATEST_VENV)/bin/python -c 'import torch, graphdbg.hooks; print("torch", torch.__version__, "for graphdbg")'
	touch $@

install-torch-latest: $(LATEST_STAMP)

test-torch-latest: $(LATEST_STAMP)
	$(call run_pytest,$(LATEST_VENV)/bin)

clean:
	rm -rf $(VENV) $(LATEST_VENV) *.egg-info .pytest_cache showcase.run demo.run
