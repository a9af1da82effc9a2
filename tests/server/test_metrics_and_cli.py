"""A server people can find and watch: `/metrics`, `GET` on the OTA URL, the start-up URLs, `wren --version`,
`wren config` and one-line configuration errors."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path

import aiohttp
import pytest
from wren.config import package_version
from wren.transport.addresses import _fib_trie_locals, interface_addresses

from tests.server.helpers import speak
from tests.support.device import TestDevice
from tests.support.metrics import samples
from tests.support.wren_process import REPO, wren_serve


async def scrape(server) -> dict[str, float]:
    """Every sample of `/metrics` as `name{label="value",…}` → value (labels sorted)."""
    async with aiohttp.ClientSession() as http, http.get(server.http_url + "/metrics") as resp:
        assert resp.status == 200
        assert resp.content_type == "text/plain"
        return samples(await resp.text())


async def scrape_until(server, predicate, timeout: float = 10.0) -> dict[str, float]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        samples = await scrape(server)
        if predicate(samples) or asyncio.get_running_loop().time() > deadline:
            return samples
        await asyncio.sleep(0.1)


def connected_devices(samples: dict[str, float]) -> float:
    return sum(v for k, v in samples.items() if k.startswith("wren_devices_connected{"))


def stage_count(samples: dict[str, float], stage: str) -> float:
    return samples.get(f'wren_turn_stage_seconds_count{{stage="{stage}"}}', 0.0)


THREAD_CPU = "wren_thread_cpu_seconds_total"
TEXT_TURNS = 'wren_turns_total{cancelled="false",source="text"}'
PROMPT_TURNS = 'wren_turns_total{cancelled="false",source="prompt"}'


async def test_metrics_count_a_typed_turn_and_its_stage_latencies(server):
    before = await scrape(server)
    assert before[TEXT_TURNS] == 0  # every series is there from the first scrape
    assert before[f'wren_build_info{{version="{package_version()}"}}'] == 1
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.connect()
        assert connected_devices(await scrape(server)) == 1
        await dev.detect("what time is it")
        reply = await dev.next_reply(timeout=30)
        assert reply.frames
        after = await scrape_until(server, lambda s: s[TEXT_TURNS] == before[TEXT_TURNS] + 1)
    assert after[TEXT_TURNS] == before[TEXT_TURNS] + 1
    for stage in ("engine_first_sentence", "tts_first_audio", "encode", "send"):
        assert stage_count(after, stage) == stage_count(before, stage) + 1, stage
    # A typed turn has no end of speech nor final words: the spans that start there are not observed.
    for stage in ("asr_finalise", "queue_to_start", "input_end_to_first_audio"):
        assert stage_count(after, stage) == stage_count(before, stage), stage
    send_sum = 'wren_turn_stage_seconds_sum{stage="send"}'
    assert 0 <= after[send_sum] - before[send_sum] < 5
    assert after["wren_executor_queue_depth{pool=\"speak\"}"] >= 0
    gone = await scrape_until(server, lambda s: connected_devices(s) == 0)
    assert connected_devices(gone) == 0


async def test_metrics_count_uplink_lag_spoken_turns_and_dropped_input(server):
    before = await scrape(server)
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.open()
        await dev.send_text('{"type": "listen", "state": "start", "mode": "manual"}')  # before hello
        await dev.connect_after_open()
        await dev.send_text("{not json")
        await dev.send_text('{"type": "no-such-type"}')
        await dev.send_binary(b"\x00\x01")  # binary while not listening
        await dev.listen_start("manual")
        frames = await dev.stream_silence(600, realtime=False)
        await dev.listen_stop()
        await dev.next_reply(timeout=30)  # an empty press: the prompt
        live = await scrape_until(server, lambda s: s[PROMPT_TURNS] > before[PROMPT_TURNS])
    assert live[PROMPT_TURNS] == before[PROMPT_TURNS] + 1
    assert live["wren_uplink_lag_seconds_count{}"] >= before["wren_uplink_lag_seconds_count{}"] + frames
    assert live['wren_turn_stage_seconds_count{stage="asr_finalise"}'] > stage_count(before, "asr_finalise")

    def dropped(samples: dict[str, float], kind: str) -> float:
        name = f'wren_dropped_input_total{{kind="{kind}"}}'
        return samples[name] - before[name]

    for kind in ("before_hello", "malformed_json", "unknown_type", "binary_not_listening"):
        assert dropped(live, kind) == 1, kind  # counted while the session is still open
    closed = await scrape_until(server, lambda s: connected_devices(s) == 0)
    for kind in ("before_hello", "malformed_json", "unknown_type", "binary_not_listening"):
        assert dropped(closed, kind) == 1, kind  # and kept once it has closed


DECODES = [f'wren_asr_decodes_total{{class="{cls}"}}' for cls in ("urgent", "commit", "speculative")]
DECODE_CPU = [name.replace("decodes_total", "decode_cpu_seconds_total") for name in DECODES]
ENDS = [f'wren_asr_utterance_ends_total{{words="{how}"}}' for how in ("guessed", "decoded")]


async def test_metrics_count_the_recognisers_decodes_their_cpu_and_how_each_utterance_got_its_words(server):
    before = await scrape(server)
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.connect()
        await speak(dev, "what time is it", "manual")
        reply = await dev.next_reply(timeout=30)
        assert reply.frames
        after = await scrape_until(server, lambda s: sum(s[n] - before[n] for n in ENDS) == 1)

    def grew(names: list[str]) -> float:
        return sum(after[name] - before[name] for name in names)

    assert grew(ENDS) == 1  # one utterance: its words were the guess at the pause, or decoded at its end
    assert grew(DECODES) >= 1
    assert grew(DECODE_CPU) > 0
    # ... and the decode threads' own CPU says who spent it
    decode_threads = [name for name in after if name.startswith(THREAD_CPU + '{thread="wren-moonshine')]
    assert decode_threads and grew(decode_threads) > 0


async def test_two_servers_keep_their_own_metrics(start_server, server):
    before = await scrape(server)
    other = start_server()
    async with TestDevice(other.ws_url, mcp=False) as dev:
        await dev.connect()
        await dev.detect("thank you")
        await dev.next_reply(timeout=30)
        await scrape_until(other, lambda s: s[TEXT_TURNS] == 1)
    assert (await scrape(other))[TEXT_TURNS] == 1
    assert (await scrape(server))[TEXT_TURNS] == before[TEXT_TURNS]


@pytest.mark.parametrize("path", ["/xiaozhi/ota/", "/xiaozhi/ota"])
async def test_get_on_the_ota_url_names_the_websocket(server, path):
    ws = f"ws://127.0.0.1:{server.port}/xiaozhi/v1/"
    async with aiohttp.ClientSession() as http:
        async with http.get(server.http_url + path) as resp:
            assert resp.status == 200
            body = await resp.json()
        assert body["websocket"]["url"] == ws
        assert body["server"] == f"wren {package_version()}" and "POST" in body["hint"]
        async with http.get(server.http_url + path, headers={"Accept": "text/html,*/*;q=0.8"}) as resp:
            assert resp.status == 200 and resp.content_type == "text/html"
            assert ws in await resp.text()
        async with http.get(server.http_url + path, headers={"Accept": "text/plain"}) as resp:
            assert resp.content_type == "text/plain" and ws in await resp.text()


def test_interface_addresses_are_found_offline():
    addresses = interface_addresses()
    assert addresses and "0.0.0.0" not in addresses
    trie = ("Local:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 127.0.0.1\n        /32 host LOCAL\n"
            "     |-- 192.168.1.23\n        /32 host LOCAL\n"
            "     |-- 192.168.1.255\n        /32 link BROADCAST\n")
    assert _fib_trie_locals(trie) == ["127.0.0.1", "192.168.1.23"]


# ---- the command line ----------------------------------------------------------------------------------


def wren(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("WREN_")}
    return subprocess.run([sys.executable, "-m", "wren.cli", *args], capture_output=True, text=True,
                          env={**clean, **(env or {})}, cwd=REPO, timeout=timeout)


def test_wren_version():
    done = wren("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"wren {package_version()}"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    if "version" in project:
        assert package_version() == project["version"]


def test_wren_config_prints_defaults_comments_and_overrides(tmp_path: Path):
    config_file = tmp_path / "wren.toml"
    config_file.write_text('[vad]\nsilence_ms = 700\n[auth]\nsecret = "hunter2"\n')
    done = wren("config", "--config", str(config_file), env={"WREN_SERVER_PORT": "9123"})
    assert done.returncode == 0, done.stderr
    parsed = tomllib.loads(done.stdout)  # the output is a config file
    assert parsed["server"]["port"] == 9123
    assert parsed["vad"]["silence_ms"] == 700
    assert parsed["vad"]["min_speech_ms"] == 150  # a default
    assert "secret" not in parsed["auth"] and "hunter2" not in done.stdout
    lines = done.stdout.splitlines()
    assert "port = 9123  # default 8000, set by WREN_SERVER_PORT" in lines
    assert f"silence_ms = 700  # default 500, set in {config_file}" in lines
    assert "min_speech_ms = 150  # default" in lines
    assert "# silero or webrtc" in lines  # config.py's comment on the option
    sections = [line for line in lines if line.startswith("[")]
    assert sections[:3] == ["[server]", "[auth]", "[audio]"]
    shown = wren("config", "--config", str(config_file), "--show-secrets")
    assert tomllib.loads(shown.stdout)["auth"]["secret"] == "hunter2"


BAD_CONFIGS = {
    "unknown engine": ({"WREN_ASR_ENGINE": "whisper"}, None, "asr.engine"),
    "wrong type": ({"WREN_SERVER_PORT": "eighty"}, None, "WREN_SERVER_PORT"),
    "unknown option": ({}, "[server]\nprot = 8000\n", "did you mean port"),
    "wrong TOML type": ({}, "[vad]\nsilence_ms = \"long\"\n", "vad.silence_ms"),
    "bad TOML": ({}, "[server\nport = 1\n", "not valid TOML"),
    "unknown section": ({}, "[sever]\nport = 1\n", "unknown section [sever]"),
    "no GIL switch interval": ({"WREN_SERVER_GIL_SWITCH_INTERVAL_MS": "0"}, None, "gil_switch_interval_ms"),
}


@pytest.mark.parametrize("command", ["config", "serve"])
@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_a_config_mistake_is_one_line_and_exit_2(tmp_path: Path, command: str, case: str):
    env, toml, expected = BAD_CONFIGS[case]
    args = [command]
    if toml is not None:
        (tmp_path / "bad.toml").write_text(toml)
        args += ["--config", str(tmp_path / "bad.toml")]
    if command == "serve":
        args += ["--host", "127.0.0.1", "--port", "0"]
    done = wren(*args, env={**env, "WREN_SERVER_DATA_DIR": str(tmp_path)})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"wren {command}: ") and expected in lines[0], lines


def test_wren_serve_prints_urls_that_answer(tmp_path: Path):
    """Bound to 0.0.0.0 it names the machine's addresses (never 0.0.0.0), and each OTA URL answers."""
    with wren_serve(tmp_path, host="0.0.0.0") as served:
        log = served.log_text()
        urls = re.findall(r"^\s+(console|OTA|WebSocket)\s+(\S+)$", log, re.MULTILINE)
        assert {kind for kind, _ in urls} == {"console", "OTA", "WebSocket"}
        assert not any("0.0.0.0" in url for _, url in urls) and "listening on 0.0.0.0" not in log
        hosts = {re.match(r"\w+://([^:/]+):\d+/", url).group(1) for _, url in urls}
        assert hosts and hosts <= set(interface_addresses())
        for kind, url in urls:
            if kind == "OTA":
                assert url.endswith(f":{served.port}/xiaozhi/ota/")
                with urllib.request.urlopen(url, timeout=10) as resp:  # reachable, names its WebSocket
                    assert f":{served.port}/xiaozhi/v1/".encode() in resp.read()
