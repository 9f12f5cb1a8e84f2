# One command sets everything up and runs the main job; one sets up and tests.
#   make run    a real chaos run on the local default, ending in report.html
#   make test   the whole test suite (what CI runs)
# Setup is idempotent: a second `make setup` does nothing and says nothing.

VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
HARNESS := $(VENV)/bin/harness
STAMP   := $(VENV)/.installed
SYSTEM_STAMP := .cache/system.stamp

.PHONY: setup run test bench clean-runs clean
.SILENT:

setup: $(SYSTEM_STAMP) $(STAMP)

$(SYSTEM_STAMP): scripts/setup-system.sh
	scripts/setup-system.sh
	mkdir -p .cache && touch $@

$(STAMP): pyproject.toml requirements.lock
	[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

run: setup
	$(HARNESS) demo

test: setup
	$(PY) -m pytest -q

bench: setup
	$(HARNESS) bench check

clean:
	$(HARNESS) clean
