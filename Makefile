# Wren: `make run` starts the server with the embedded defaults; `make test` runs the whole suite.
# Both create or update .venv first, so a fresh clone needs nothing else.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.wren-installed

.PHONY: help venv run test lint fmt clean

help:
	@echo "make run    set up .venv and start the Wren server (embedded offline defaults)"
	@echo "make test   set up .venv and run the whole suite (ruff + pytest + MicroPython vectors)"
	@echo "make lint   ruff only"

venv: $(STAMP)

# Re-install only when the dependency list or the lock changes (idempotent, fast when up to date).
$(STAMP): pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c requirements.lock -e '.[dev]'
	@touch $@

run: $(STAMP)
	$(BIN)/wren serve $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache build
