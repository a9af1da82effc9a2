# Wren: `make run` starts the server with the embedded defaults; `make test` runs the whole suite.
# Both create or update .venv first, so a fresh clone needs nothing else.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# What each target installs into .venv (pyproject.toml): `make run` the runtime dependencies only;
# `make flash`/`deploy`/`sim` the [firmware] extra's board tools only; `make test`, `lint` and `bench` the
# project with [dev] and [firmware]. One stamp per set, remade when pyproject.toml or requirements.lock is
# newer, so an up-to-date .venv is not touched. `STAMP=` on the command line (the tests pass it) skips
# every install step.
STAMP          := $(VENV)/.wren-installed
RUNTIME_STAMP  := $(STAMP:%=%-runtime)
FIRMWARE_STAMP := $(STAMP:%=%-firmware)
DEV_STAMP      := $(STAMP:%=%-dev)
PIP_INSTALL    := $(BIN)/python -m pip install --disable-pip-version-check -c requirements.lock
# pip shows its progress the first time a set is installed (the runtime set is 544 MB installed, README.md);
# a later update after a pyproject.toml or requirements.lock change is --quiet.
PIP_QUIET       = $(if $(wildcard $@), --quiet)

.PHONY: help venv run test lint fmt clean

help:
	@echo "make run    install the runtime dependencies into .venv and start the Wren server (embedded offline defaults)"
	@echo "make test   add the [dev] and [firmware] extras and run the whole suite (ruff + pytest + MicroPython vectors) on TEST_WORKERS=4 workers"
	@echo "make lint   ruff only"
	@echo "make sim    MIC=question.wav: the real firmware under MicroPython against a server (docs/firmware.md)"
	@echo "            CODEC=opus: on the Wren build (make firmware-host) instead of the stock unix port"
	@echo "make firmware-host  the Wren build of the unix port: opus C module + frozen app (cached; VENDOR=dir)"
	@echo "make flash  [PORT=...] BOARD=esp32s3|esp32 FIRMWARE=...: write MicroPython to a board"
	@echo "make deploy [PORT=...]: compile and copy the Wren firmware and its config to a board"
	@echo "make firmware BOARD=esp32s3|esp32: the Wren build for a board (needs ESP-IDF or docker/podman)"
	@echo "make bench  the benchmarks (a few minutes); make bench-quick for a smoke run"

venv: $(DEV_STAMP)

$(RUNTIME_STAMP): pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL)$(PIP_QUIET) -e .
	@touch $@

# The extra's requirements alone: flashing a board does not need the speech stack.
$(FIRMWARE_STAMP): pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL)$(PIP_QUIET) $$($(BIN)/python -c 'import tomllib; \
	  print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["firmware"])')
	@touch $@

$(DEV_STAMP): pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL)$(PIP_QUIET) -e '.[dev,firmware]'
	@touch $@ $(RUNTIME_STAMP) $(FIRMWARE_STAMP)

run: $(RUNTIME_STAMP)
	$(BIN)/wren serve $(ARGS)

lint: $(DEV_STAMP)
	$(BIN)/ruff check .

# The slowest tests are listed at the end of every run: the suite must stay under 20 minutes on 2 cores.
# Most of its time is waiting (audio at real-time pace, servers, MicroPython), so TEST_WORKERS pytest-xdist
# workers share the cores (0: one process), each taking one test file at a time (its module fixtures start
# once). Measured on 2 cores: README, "Two commands".
TEST_WORKERS ?= 4
PYTEST_ARGS ?= --durations=15 -n $(TEST_WORKERS) --dist loadfile
test: $(DEV_STAMP) firmware-host
	$(BIN)/ruff check .
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache build

# ---- firmware (MicroPython device app) --------------------------------------------------------------
# make flash  [PORT=/dev/ttyACM0] BOARD=esp32s3|esp32 FIRMWARE=ESP32_GENERIC_S3-SPIRAM_OCT-….bin
# make deploy [PORT=/dev/ttyACM0] [CONFIG=firmware/config.json]
# make sim    MIC=question.wav [SERVER=ws://127.0.0.1:8000/xiaozhi/v1/] [OUT=reply.wav] [MODE=auto|manual]
#             [HEAP=160wk] [CODEC=pcm|opus]
# make firmware-host [VENDOR=../shared/vendor]
# make firmware BOARD=esp32s3|esp32 [IDF_IMAGE=espressif/idf:v5.5.1]
.PHONY: flash deploy sim firmware-host firmware

BOARD  ?= esp32s3
CONFIG ?= firmware/config.json
SERVER ?= ws://127.0.0.1:8000/xiaozhi/v1/
# The sim boots like a stock device, through OTA (so it pairs with a `make run` server: it prints its code,
# approve it with `wren devices approve CODE`; its client id is kept in .cache/sim/, so once is enough).
# SERVER=ws://... on the command line connects straight to that WebSocket instead (another xiaozhi server).
OTA    ?= http://127.0.0.1:8000/xiaozhi/ota/
SIM_OTA = $(if $(filter command line,$(origin SERVER)),,$(OTA))
OUT    ?= reply.wav
MODE   ?= auto
HEAP   ?= 160wk
# pcm: the stock unix port (.venv/bin/micropython) streams PCM; opus: the Wren build, which has the opus module.
CODEC  ?= pcm
# Where the vendored upstream sources are (relative to the repo); without them the build downloads the
# same pinned versions (docs/firmware.md, "Two builds").
VENDOR ?= ../shared/vendor

# PORT is optional for both: without it esptool / mpremote look for the board themselves.
flash: $(FIRMWARE_STAMP)
	@test -n "$(FIRMWARE)" || { echo "make flash: set FIRMWARE=path/to/micropython.bin"; exit 2; }
	$(BIN)/python tools/flash/flash.py $(if $(PORT),--port "$(PORT)") --board "$(BOARD)" --firmware "$(FIRMWARE)"

deploy: $(FIRMWARE_STAMP)
	$(BIN)/python tools/flash/deploy.py $(if $(PORT),--port "$(PORT)") --config "$(CONFIG)"

sim: $(FIRMWARE_STAMP) $(if $(filter opus,$(CODEC)),firmware-host)
	@test -n "$(MIC)" || { echo "make sim: set MIC=path/to/16k-mono.wav"; exit 2; }
	$(BIN)/python tools/sim/run.py --mic "$(MIC)" --server "$(SERVER)" --ota "$(SIM_OTA)" --out "$(OUT)" \
	  --mode "$(MODE)" --heap "$(HEAP)" --codec "$(CODEC)"

# The Wren build of the MicroPython unix port: the opus user C module (firmware/modules/opus) and the app
# frozen by firmware/manifest.py, in .cache/firmware-host/micropython. Keyed by a hash of its inputs, so an
# unchanged tree does no work (tools/firmware/build_host.py).
firmware-host:
	@$(PYTHON) tools/firmware/build_host.py --vendor "$(VENDOR)"

# The Wren build for a board: the esp32 port with the same module and manifest, with ESP-IDF from your
# environment (idf.py / $$IDF_PATH) or its official container (docker/podman); exit 2 without either.
firmware:
	@$(PYTHON) tools/firmware/build_esp32.py --board "$(BOARD)" --vendor "$(VENDOR)" $(if $(IDF_IMAGE),--idf-image "$(IDF_IMAGE)")

# ---- bench: benchmarks (tools/bench, docs/performance.md) -------------------------------------------
# `make bench` drives a real `wren serve` with simulated devices (a few minutes on 2 cores) and prints one
# table; every number also goes to bench-results/latest.json. `make bench-quick` is the tiny-N smoke run.
# The table's `before` column is issue 11's starting point (tools/bench/data/before.json); BEFORE=<a saved
# --json result> compares against that run instead (copy latest.json aside before a change).
.PHONY: bench bench-quick

bench: $(DEV_STAMP) firmware-host
	@mkdir -p bench-results
	$(BIN)/python tools/bench/run_all.py --json bench-results/latest.json $(if $(BEFORE),--before $(BEFORE))

bench-quick: $(DEV_STAMP) firmware-host
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

# ---- the shared store's tests (tests/store, tests/cluster) and the instances bench ------------------------
# redis-server (the shared store) and haproxy (the load balancer of docs/deploy.md) are Debian packages: apt
# installs them (as root, else through sudo) when missing, like espeak-ng. If that fails those tests skip
# with the reason, so `make test` does not need root.
.PHONY: redis-server
test bench: redis-server
redis-server:
	@{ command -v redis-server >/dev/null && command -v haproxy >/dev/null; } || \
	  { SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	    $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq redis-server haproxy >/dev/null; } || \
	  echo "make: could not install redis-server and haproxy (apt-get install redis-server haproxy); the shared-store tests skip"

# ---- the web console's browser test (tests/console/test_browser_console.py) --------------------------
# Headless Chromium and its WebDriver are Debian packages: apt installs them (as root, else through sudo) when
# they are missing, like espeak-ng above; the stamp spares `make test` asking again. If that fails the test
# skips with the reason, so `make test` does not need root. `STAMP=` skips this step too.
CHROMIUM_STAMP := $(STAMP:%=%-chromium)
.PHONY: chromium
test: chromium
chromium: $(CHROMIUM_STAMP)
$(CHROMIUM_STAMP):
	@{ command -v chromium >/dev/null && command -v chromedriver >/dev/null; } || \
	  { SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	    $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium chromium-driver >/dev/null; } && \
	  mkdir -p $(@D) && touch $@ || \
	  echo "make: could not install chromium (apt-get install chromium chromium-driver); the browser test skips"
