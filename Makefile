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

.PHONY: demo test bench install clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	set -o pipefail; $(BIN)/python -m pip install -q -c constraints.txt -e '.[test]' 2>&1 | { $(PIP_FILTER) || true; }
	touch $(STAMP)

# Runs the showcase sample under `graphdbg run` and prints the report.
demo: $(STAMP)
	$(BIN)/graphdbg run -o showcase.run samples/showcase.py
	$(BIN)/graphdbg report showcase.run

# graphdbg's overheads against peers and plain runs, one table (about 10 minutes
# here; benchmarks/bench.py --help: --quick and --only SECTION for development,
# e.g. make bench BENCH_ARGS="--quick --only capture").
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python benchmarks/bench.py $(BENCH_ARGS)

# pytest exits 5 when it collected no test: we say so loudly but let every
# other non-zero status (failures, errors, interrupts) fail the target.
# Two xdist workers (one per core here); tests that read the same sample runs
# share a worker (--dist loadgroup, tests/conftest.py).
test: $(STAMP)
	@$(BIN)/python -m pytest -q -rfEs -n 2 --dist loadgroup --durations=15 $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest ran no test (exit 5)"; exit 0; fi; exit $$rc

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache showcase.run
