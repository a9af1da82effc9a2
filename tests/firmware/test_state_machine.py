"""The device state machine (reference §5, §8) under MicroPython against scripted CPython xiaozhi servers.

The firmware runs unmodified (firmware/main.py) on the host hal: WAV mic, WAV speaker, scripted button.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import wave
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.firmware.conftest import FIRMWARE, SCRIPTS, MpyProcess, micropython, write_config
from tests.firmware.xiaozhi_script import SESSION, Conn, pcm_frame, serve, serving
from tests.support.spoken import write_wav


@contextlib.asynccontextmanager
async def device(
    directory: Path, port: int, button: str, turns: int = 1, mic: Path | None = None, **cfg: Any
) -> AsyncIterator[MpyProcess]:
    env = write_config(directory, server_url=f"ws://127.0.0.1:{port}/xiaozhi/v1/", token="tok", **cfg)
    env.update(WREN_SIM_BUTTON=button, WREN_SIM_TURNS=str(turns), WREN_SIM_OUT=str(directory / "out.wav"))
    if mic:
        env["WREN_SIM_MIC"] = str(mic)
    async with micropython(str(FIRMWARE / "main.py"), env=env, cwd=directory) as mp:
        yield mp


def played(directory: Path) -> np.ndarray:
    with wave.open(str(directory / "out.wav")) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")


def mic_wav(directory: Path, seconds: float = 1.2) -> tuple[Path, np.ndarray]:
    # A tone that never passes through zero, so the uplink can be matched sample for sample.
    t = np.arange(int(16000 * seconds))
    pcm = (6000 + 3000 * np.sin(t * 0.02)).astype(np.int16)
    return write_wav(directory / "mic.wav", pcm.tobytes(), 16000), pcm


def transitions(mp: MpyProcess) -> list[str]:
    return [m.group(1) for line in mp.lines if (m := re.search(r"state: (\w+ -> \w+)", line))]


async def test_auto_turn_hello_tts_and_relisten_after_drain(device_dir: Path) -> None:
    seen: dict[str, Any] = {}
    finished = asyncio.Event()

    async def handler(ws) -> None:
        c = Conn(ws)
        # The device must answer MCP at any time after the socket opens, even before the hello reply.
        await c.send({"type": "mcp", "payload": {"jsonrpc": "2.0", "id": 1, "method": "initialize"}})
        seen["hello"] = await c.hello()
        seen["init"] = await c.next_json(type="mcp")
        seen["listen1"] = await c.next_json(type="listen")
        await c.collect_audio(5)
        await c.speak([pcm_frame(1111)] * 3, paced=False)  # not speaking yet: must be dropped
        await c.send({"type": "stt", "text": "what time is it", "session_id": SESSION})
        await c.tts("start")
        await c.send("{this is not json")
        await c.send({"type": "no-such-type", "session_id": SESSION})
        await c.send({"type": "tts", "session_id": SESSION})  # tts without state: malformed
        await c.tts("sentence_start", text="It is noon.")
        await c.speak([pcm_frame(2000)] * 10, paced=False)  # a 600 ms burst the device must play out
        await c.tts("stop")
        stop_sent = time.monotonic()
        await c.speak([pcm_frame(3333)] * 3, paced=False)  # after stop: dropped
        seen["listen2"] = await c.next_json(type="listen")
        seen["relisten_after"] = time.monotonic() - stop_sent
        seen["headers"] = c.headers
        await c.tts("start")
        await c.speak([pcm_frame(2000)] * 2, paced=False)
        await c.tts("stop")
        finished.set()
        await c.drain()

    async with serving(handler) as port, device(device_dir, port, "press@0.3", turns=2, volume=100) as mp:
        await mp.until(finished)
        assert await mp.finish(30) == 0, mp.output()

    hello = seen["hello"]
    assert hello["version"] == 1 and hello["transport"] == "websocket"
    assert hello["features"] == {"mcp": True}
    uplink = {"format": "pcm", "sample_rate": 16000, "channels": 1, "frame_duration": 60}
    assert hello["audio_params"] == uplink
    assert seen["init"]["payload"]["result"]["serverInfo"]["name"] == "esp32s3-breadboard"
    assert seen["listen1"] == {"type": "listen", "state": "start", "mode": "auto", "session_id": SESSION}
    assert seen["listen2"] == seen["listen1"]
    assert seen["relisten_after"] >= 0.4  # not before the 600 ms burst had played out locally
    h = seen["headers"]
    assert h["authorization"] == "Bearer tok" and h["protocol-version"] == "1"
    assert re.fullmatch(r"([0-9a-f]{2}:){5}[0-9a-f]{2}", h["device-id"])
    uuid4 = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
    assert re.fullmatch(uuid4, h["client-id"])
    assert json.loads((device_dir / "state.json").read_text())["client_id"] == h["client-id"]
    out = played(device_dir)
    assert set(np.unique(out)) <= {0, 2000}  # only audio received while speaking was played
    assert np.count_nonzero(out == 2000) == 12 * 960
    assert "stt: what time is it" in mp.output() and "sentence_start It is noon." in mp.output()
    assert mp.count("malformed server frame ignored") == 2
    assert mp.count("ignored: type: unknown message type") == 1
    assert transitions(mp)[:4] == ["idle -> connecting", "connecting -> listening", "listening -> speaking",
                                   "speaking -> listening"]


async def test_hello_without_transport_is_ignored_and_the_device_gives_up(device_dir: Path) -> None:
    async def handler(ws) -> None:
        c = Conn(ws)
        await c.hello({"type": "hello", "session_id": "x",
                       "audio_params": {"sample_rate": 16000, "frame_duration": 60}})
        await c.drain()

    async with serving(handler) as port, device(device_dir, port, "press@0.2", connect_attempts=1) as mp:
        await mp.wait_for("state: connecting -> idle", timeout=30)
    assert "malformed server frame ignored: transport" in mp.output()
    assert "TimeoutError" in mp.output()
    assert "listening" not in " ".join(transitions(mp))


async def test_manual_push_to_talk_streams_the_mic_and_idles_on_release(device_dir: Path) -> None:
    mic, pcm = mic_wav(device_dir)
    seen: dict[str, Any] = {}
    finished = asyncio.Event()

    async def handler(ws) -> None:
        c = Conn(ws)
        await c.hello()
        seen["start"] = await c.next_json(type="listen", state="start")
        seen["stop"] = await c.next_json(type="listen", state="stop")
        seen["uplink"] = np.frombuffer(bytes(c.audio), dtype="<i2")
        await c.tts("start")
        await c.speak([pcm_frame(1000)] * 3)
        await c.tts("stop")
        finished.set()
        await c.drain()

    async with (
        serving(handler) as port,
        device(device_dir, port, "press@0.3,release@eof", mic=mic, listen_mode="manual") as mp,
    ):
        await mp.until(finished)
        assert await mp.finish(30) == 0, mp.output()
    assert seen["start"]["mode"] == "manual"
    assert seen["stop"] == {"type": "listen", "state": "stop", "session_id": SESSION}
    up = seen["uplink"]
    first = int(np.argmax(up != 0))
    # Every sample the mic heard while the button was held went up unchanged, in order.
    assert np.array_equal(up[first : first + pcm.size], pcm)
    assert transitions(mp) == ["idle -> connecting", "connecting -> listening", "listening -> idle",
                               "idle -> speaking", "speaking -> idle"]


async def test_button_while_speaking_sends_abort_and_waits_for_tts_stop(device_dir: Path) -> None:
    seen: dict[str, Any] = {}

    async def handler(ws) -> None:
        c = Conn(ws)
        await c.hello()
        await c.next_json(type="listen", state="start")
        await c.tts("start")
        speaking = asyncio.create_task(c.speak([pcm_frame(1500)] * 200))
        seen["abort"] = await c.next_json(type="abort")
        speaking.cancel()
        await c.tts("stop")  # the device stays speaking until this arrives (§5.2)
        seen["relisten"] = await c.next_json(type="listen", state="start")
        await c.drain()

    async with serving(handler) as port, device(device_dir, port, "press@0.3,press@2.0") as mp:
        assert await mp.finish(30) == 0, mp.output()
    assert seen["abort"] == {"type": "abort", "session_id": SESSION}  # a button abort has no reason key
    assert transitions(mp) == ["idle -> connecting", "connecting -> listening", "listening -> speaking",
                               "speaking -> listening"]


async def test_server_gone_mid_turn_then_back_reconnects_with_backoff_and_next_turn_works(
    device_dir: Path,
) -> None:
    state: dict[str, Any] = {"connections": 0}
    first_speaking = asyncio.Event()
    second_done = asyncio.Event()

    async def handler(ws) -> None:
        state["connections"] += 1
        c = Conn(ws)
        await c.hello()
        await c.next_json(type="listen", state="start")
        await c.tts("start")
        if state["connections"] == 1:
            first_speaking.set()
            await c.speak([pcm_frame(500)] * 200)  # cut short when the server goes away
            return
        await c.speak([pcm_frame(2500)] * 5)
        await c.tts("stop")
        second_done.set()
        await c.drain()

    server = await serve(handler)
    port = server.sockets[0].getsockname()[1]
    try:
        # Two turns: the cut-off reply ends one too (the device leaves speaking), the second is heard.
        async with device(device_dir, port, "press@0.3,press@2.5", turns=2, volume=100) as mp:
            await mp.until(first_speaking)
            await asyncio.sleep(0.5)
            server.close()  # the server goes away mid-turn
            await server.wait_closed()
            await mp.wait_for(r"attempt 2/\d+ failed", timeout=20)
            server = await serve(handler, port)  # ... and comes back on the same port
            await mp.until(second_done)
            assert await mp.finish(30) == 0, mp.output()
    finally:
        server.close()
        await server.wait_closed()
    out = mp.output()
    assert "lost (closed): going idle" in out
    delays = [int(m) for m in re.findall(r"reconnect in (\d+) ms", out)]
    assert delays[:2] == [500, 1000]  # exponential backoff between attempts
    assert state["connections"] == 2
    assert np.count_nonzero(played(device_dir) == 2500) == 5 * 960  # the next turn was heard in full


async def test_silent_channel_counts_as_closed_and_the_next_press_reconnects_with_a_new_hello(
    device_dir: Path,
) -> None:
    hellos: list[dict[str, Any]] = []
    second = asyncio.Event()

    async def handler(ws) -> None:
        c = Conn(ws)
        hellos.append(await c.hello())
        await c.next_json(type="listen", state="start")
        if len(hellos) == 2:
            second.set()
        await c.drain()  # then silence: no data at all on this connection

    # channel_timeout_s stands in for the 120 s of reference §8.3.
    async with (
        serving(handler) as port,
        device(device_dir, port, "press@0.3,press@4.5", channel_timeout_s=2) as mp,
    ):
        await mp.until(second)
        await mp.wait_for_count("state: connecting -> listening", 2)  # logged after the send
    assert "no data for 2 s: treated as closed" in mp.output()
    assert len(hellos) == 2  # not reused: a new connection and hello
    assert transitions(mp) == ["idle -> connecting", "connecting -> listening", "listening -> idle",
                               "idle -> connecting", "connecting -> listening"]


async def test_button_while_listening_in_auto_mode_closes_the_channel(device_dir: Path) -> None:
    closed = asyncio.Event()

    async def handler(ws) -> None:
        c = Conn(ws)
        await c.hello()
        await c.next_json(type="listen", state="start")
        await c.drain()
        closed.set()

    async with serving(handler) as port, device(device_dir, port, "press@0.3,press@1.5") as mp:
        await mp.until(closed)
        await mp.wait_for("lost \\(closed by the device\\): going idle")
        await mp.wait_for("state: listening -> idle")  # logged just after the line above
    assert transitions(mp) == ["idle -> connecting", "connecting -> listening", "listening -> idle"]


async def test_realtime_mode_keeps_the_mic_streaming_while_speaking(device_dir: Path) -> None:
    mic, _pcm = mic_wav(device_dir, seconds=4)
    seen: dict[str, Any] = {}
    finished = asyncio.Event()

    async def handler(ws) -> None:
        c = Conn(ws)
        await c.hello()
        seen["start"] = await c.next_json(type="listen", state="start")
        await c.collect_audio(3)
        await c.tts("start")
        before = c.audio_frames
        await c.speak([pcm_frame(1000)] * 8)  # 480 ms of paced reply
        await c.collect_audio(3)  # the mic is still streaming during playback
        seen["during"] = c.audio_frames - before
        await c.tts("stop")
        await asyncio.sleep(1.0)
        seen["messages"] = list(c.messages)
        finished.set()
        await c.drain()

    async with (
        serving(handler) as port,
        device(device_dir, port, "press@0.3", mic=mic, listen_mode="realtime") as mp,
    ):
        await mp.until(finished)
        assert await mp.finish(30) == 0, mp.output()
    assert seen["start"]["mode"] == "realtime"
    assert seen["during"] >= 3
    # No second listen start: in realtime the mic never stopped (§5.1).
    assert [m for m in seen["messages"] if m.get("type") == "listen"] == [seen["start"]]


async def test_reboot_tool_replies_then_reboots(device_dir: Path) -> None:
    replies: list[dict[str, Any]] = []

    async def handler(ws) -> None:
        c = Conn(ws)
        await c.hello()
        await c.next_json(type="listen", state="start")
        await c.send({"type": "mcp", "payload": {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                                                 "params": {"name": "self.reboot", "arguments": {}}}})
        replies.append(await c.next_json(type="mcp"))
        await c.drain()

    async with serving(handler) as port, device(device_dir, port, "press@0.3", turns=0) as mp:
        assert await mp.finish(30) == 3, mp.output()  # the host machine.reset() exits with 3
    assert replies[0]["payload"]["result"]["content"][0]["text"] == "true"
    assert "simulated reboot" in mp.output()


async def test_stdin_button_starts_a_conversation(device_dir: Path) -> None:
    started = asyncio.Event()

    async def handler(ws) -> None:
        c = Conn(ws)
        await c.hello()
        await c.next_json(type="listen", state="start", mode="auto")
        started.set()
        await c.drain()

    server = await serve(handler)
    port = server.sockets[0].getsockname()[1]
    env = write_config(device_dir, server_url=f"ws://127.0.0.1:{port}/xiaozhi/v1/")
    env.update(WREN_SIM_BUTTON="stdin")
    try:
        async with micropython(str(FIRMWARE / "main.py"), env=env, cwd=device_dir, stdin=True) as mp:
            await mp.wait_for("device: ready")
            assert mp.proc.stdin is not None
            mp.proc.stdin.write(b"c\n")
            await mp.proc.stdin.drain()
            await mp.until(started)
    finally:
        server.close()
        await server.wait_closed()
    assert "button: press (simulated)" in mp.output()


@pytest.mark.parametrize(("event", "expected"), [
    ("release", ["listening -> idle", "idle -> speaking"]),
    ("press", ["idle -> listening", "listening -> speaking"]),
])
async def test_a_reply_that_starts_while_the_listen_message_is_being_sent_finds_the_device_speaking(
    event: str, expected: list[str],
) -> None:
    # A `tts start` can be read while the button's `listen stop` / `listen start` is still in flight (the
    # socket's reader runs during the send's await): a fast reply, or a timer going off as the person
    # presses. The device must not undo it after the send (going idle, or listening with its mic open, and
    # dropping the reply's audio).
    async with micropython(str(SCRIPTS / "send_race.py"), event) as mp:
        assert await mp.finish() == 0, mp.output()
    assert "STATE speaking MIC 0" in mp.output(), mp.output()
    assert transitions(mp) == expected
