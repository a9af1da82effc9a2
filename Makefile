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
	@echo "make sim    MIC=question.wav: the real firmware under MicroPython against a server (docs/firmware.md)"
	@echo "make flash  PORT=... BOARD=esp32s3|esp32 FIRMWARE=...: write MicroPython to a board"
	@echo "make deploy PORT=...: compile and copy the Wren firmware and its config to a board"
	@echo "make bench  the benchmarks (a few minutes); make bench-quick for a smoke run"

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

# ---- firmware (MicroPython device app) --------------------------------------------------------------
# make flash  PORT=/dev/ttyACM0 BOARD=esp32s3|esp32 FIRMWARE=ESP32_GENERIC_S3-SPIRAM_OCT-….bin
# make deploy PORT=/dev/ttyACM0 [CONFIG=firmware/config.json]
# make sim    MIC=question.wav [SERVER=ws://127.0.0.1:8000/xiaozhi/v1/] [OUT=reply.wav] [MODE=auto|manual]
#             [HEAP=160wk]
.PHONY: flash deploy sim

BOARD  ?= esp32s3
CONFIG ?= firmware/config.json
SERVER ?= ws://127.0.0.1:8000/xiaozhi/v1/
OUT    ?= reply.wav
MODE   ?= auto
HEAP   ?= 160wk

flash: $(STAMP)
	@test -n "$(PORT)" || { echo "make flash: set PORT=/dev/ttyACM0 (or ttyUSB0)"; exit 2; }
	@test -n "$(FIRMWARE)" || { echo "make flash: set FIRMWARE=path/to/micropython.bin"; exit 2; }
	$(BIN)/python tools/flash/flash.py --port "$(PORT)" --board "$(BOARD)" --firmware "$(FIRMWARE)"

deploy: $(STAMP)
	@test -n "$(PORT)" || { echo "make deploy: set PORT=/dev/ttyACM0 (or ttyUSB0)"; exit 2; }
	$(BIN)/python tools/flash/deploy.py --port "$(PORT)" --config "$(CONFIG)"

sim: $(STAMP)
	@test -n "$(MIC)" || { echo "make sim: set MIC=path/to/16k-mono.wav"; exit 2; }
	$(BIN)/python tools/sim/run.py --mic "$(MIC)" --server "$(SERVER)" --out "$(OUT)" --mode "$(MODE)" --heap "$(HEAP)"

# ---- bench: benchmarks (tools/bench, docs/performance.md) -------------------------------------------
# `make bench` drives a real `wren serve` with simulated devices (a few minutes on 2 cores) and prints one
# table; every number also goes to bench-results/latest.json. `make bench-quick` is the tiny-N smoke run.
.PHONY: bench bench-quick

bench: $(STAMP)
	@mkdir -p bench-results
	$(BIN)/python tools/bench/run_all.py --json bench-results/latest.json

bench-quick: $(STAMP)
	@mkdir -p bench-results
	$(BIN)/python tools/bench/run_all.py --quick --json bench-results/quick.json

# espeak-ng, the understanding phase's second voice (tools/bench/understanding.py), is a Debian package: apt
# installs it (as root, else through sudo) when it is missing. If that fails the bench still runs and reports
# the espeak voice as unavailable, so `make test` does not need root.
.PHONY: espeak-ng
test bench bench-quick: espeak-ng
espeak-ng:
	@command -v espeak-ng >/dev/null || { SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq espeak-ng >/dev/null; } || \
	  echo "make: could not install espeak-ng (apt-get install espeak-ng); the understanding bench skips that voice"
# ---- end bench ---------------------------------------------------------------------------------------
