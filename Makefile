# Two commands for a fresh machine with Python >= 3.10: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.kvmon-installed

.PHONY: run demo test lint bench package wheel clean

# The version lives in kvmon/__init__.py: a new one re-installs, so the installed metadata says it too.
$(STAMP): pyproject.toml kvmon/__init__.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

## Set up and open the dashboard (every llama-server, router, llama-swap and Ollama on this machine, else the demo).
run: $(STAMP)
	$(BIN)/python -m kvmon $(ARGS)

demo: $(STAMP)
	$(BIN)/python -m kvmon --demo $(ARGS)

## Set up and run every test (offscreen Qt; the real-window test uses Xvfb when installed), ruff and the type check.
test: $(STAMP)
	$(BIN)/python -m ruff check kvmon tests bench
	$(BIN)/python -m mypy
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/python -m ruff check kvmon tests bench
	$(BIN)/python -m mypy

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[bench]"
	for b in bench/*.py; do QT_QPA_PLATFORM=offscreen $(BIN)/python $$b || exit 1; done

## Build the Linux bundle, .deb and tarball; install the .deb here with apt and self-test it (needs root).
package: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[package]'
	PYTHON=$(BIN)/python packaging/linux/build-and-smoke.sh

## Build the sdist and wheel, twine-check them, install the wheel with pipx outside the checkout and try it.
wheel: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[package]'
	PYTHON=$(BIN)/python packaging/python/build-and-smoke.sh

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .mypy_cache
