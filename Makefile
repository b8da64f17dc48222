# Two commands do all set-up on a fresh machine: `make demo` (the main job) and `make test` (the suite).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test quick schema dist bench clean

# setup.py and the C source too: the editable install compiles the witness's relay in place.
$(STAMP): pyproject.toml constraints.txt setup.py agentctl/agent/witness_copy.c
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "agentctl needs Python >= 3.11 (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@# setuptools warns on every editable install ("Editable installation ... be careful with folders"), relayed
	@# by pip even with --quiet: a banner for nothing this layout has. Only that warning is filtered.
	PYTHONWARNINGS='ignore:Editable installation' $(BIN)/python -m pip install --quiet -c constraints.txt \
		--build-constraint constraints.txt -e '.[test]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/agentctl run examples/demo.toml

# `make test ARGS=tests/evidence` (or ARGS='-k hub tests/hub') runs a selection, with pytest's own arguments, on
# every core (JOBS=1 for one), the `serial` tests alone after the rest (tests/run_suite.py).
JOBS ?= auto
test: $(STAMP)
	$(BIN)/python tests/run_suite.py --jobs $(JOBS) $(ARGS)

# The contributor's loop: every test that starts no real process, server, browser or database.
quick: $(STAMP)
	$(BIN)/python -m pytest -n $(JOBS) -m "not slow" $(ARGS)

schema: $(STAMP)
	$(BIN)/agentctl schema > docs/report.schema.json
	$(BIN)/agentctl schema control > docs/control.schema.json
	$(BIN)/agentctl schema diagnostics > docs/diagnostics.schema.json
	$(BIN)/agentctl schema probe > docs/probe.schema.json
	$(BIN)/agentctl schema hub > docs/hub.schema.json
	$(BIN)/agentctl hub schema > docs/upstream-protocol.schema.json
	$(BIN)/agentctl spec schema > docs/spec.schema.json
	$(BIN)/python -m agentctl.evidence.reasons --doc docs/troubleshooting.md
	$(BIN)/python -m agentctl.exit_codes --doc README.md
	$(BIN)/python -m agentctl.cli_help --doc README.md

# Release artifacts into dist/: wheel, shiv zipapp, PyInstaller onedir (+ .tar.gz); then their sizes and start times.
dist: $(STAMP)
	$(BIN)/python packaging/build.py all --archive
	$(BIN)/python packaging/build.py measure

# Every benchmark side by side with its reference; one table, and bench/results.json (with the machine).
# `make bench BENCH_ARGS=--quick` is a short smoke run.
bench: $(STAMP)
	$(BIN)/python bench/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis state
