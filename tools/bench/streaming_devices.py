"""The concurrency bench's load generator: one worker process's share of the streaming devices.

`concurrency.py` starts one or two of these (`python streaming_devices.py SPEC RESULT`); each reads its
devices from the JSON spec and the Opus packets (noise loop and utterances, encoded once by the parent) from
the pickle the spec names, runs every device as a tests/support/device.py TestDevice (hello, device MCP,
`listen start` in auto mode, then an uplink of noise → utterance → noise on the shared real-time clock),
follows each device's reply, and writes what it saw (times of stt, tts start, first audio, tts stop, its own
send lag, its CPU) to the result file. It only sends bytes and reads the server's messages: it never decodes
reply audio, because it shares the box's cores with the server it measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import json
import os
import pickle
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from websockets.frames import Frame, Opcode
from websockets.protocol import State

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from wren.pipeline.hold import HOLD_PHRASE

from shared_protocol import audio
from tools.bench.common import FRAME_MS, ms, percentile


class UplinkClock:
    """Paces the uplink of all of a worker's devices from one task: each 60 ms slot of each device is one
    write of a WebSocket frame built once per distinct packet (masked, as a client's must be) straight to
    the connection's transport. 100 devices each awaiting its own timer and `websockets` send cost a worker
    about a fifth more CPU (N = 200), on the same two cores as the server it measures.

    Exactly `TestDevice.stream_packets`' schedule: absolute deadlines from the stream's start, a `None` slot
    sends nothing, the next item is taken right after each send, and every send time and its lateness
    against its slot are recorded."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, _Stream]] = []  # a heap; one entry per live stream
        self._order = itertools.count()
        # (protocol version, packet) → wire frame; bound: the distinct packets of a run
        self._frames: dict[tuple[int, bytes], bytes] = {}
        self._streaming = asyncio.Event()
        self._task: asyncio.Task | None = None

    def stream(self, dev: Any, packets: Iterator[bytes | None], sent: list[float], lags: list[float]) -> Any:
        """Start `dev`'s uplink now; an awaitable of the number of packets sent, once `packets` ends."""
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._task = loop.create_task(self._run())
        stream = _Stream(dev, packets, sent, lags, loop.create_future())
        try:
            stream.item = next(packets)
        except StopIteration:
            stream.done.set_result(0)
            return stream.done
        self._advance(stream)  # the first slot is due now: sent here, so the clock's sleep never delays it
        return stream.done

    async def _run(self) -> None:
        while True:
            if not self._due:
                self._streaming.clear()
                await self._streaming.wait()
            delay = self._due[0][0] - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)  # a stream added meanwhile is due 60 ms after now: never sooner
            now = time.monotonic()
            while self._due and self._due[0][0] <= now:
                self._advance(heapq.heappop(self._due)[2])

    def _advance(self, stream: _Stream) -> None:
        """Send the item of the stream's slot that is due (nothing for None), take the next, schedule it."""
        if stream.done.cancelled():  # its device stopped waiting: its uplink ends, the others' go on
            return
        try:
            if stream.item is not None:
                ws = stream.dev.ws
                if ws.protocol.state is not State.OPEN:
                    raise ConnectionError(f"the connection is {ws.protocol.state.name.lower()}")
                ws.transport.write(self._frame(stream.item, stream.dev.protocol_version))
                now = time.monotonic()
                stream.sent.append(now)
                stream.lags.append(now - stream.due)
                stream.count += 1
            stream.slot += 1
            stream.item = next(stream.packets)
        except StopIteration:
            stream.done.set_result(stream.count)
            return
        except Exception as exc:
            stream.done.set_exception(exc)
            return
        heapq.heappush(self._due, (stream.due, next(self._order), stream))
        self._streaming.set()

    def _frame(self, packet: bytes, protocol_version: int) -> bytes:
        key = (protocol_version, packet)
        frame = self._frames.get(key)
        if frame is None:
            wire = audio.pack(protocol_version, packet)
            frame = self._frames[key] = Frame(Opcode.BINARY, wire).serialize(mask=True)
        return frame

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class _Stream:
    __slots__ = ("count", "dev", "done", "item", "lags", "packets", "sent", "slot", "start")

    def __init__(self, dev: Any, packets: Iterator[bytes | None], sent: list[float], lags: list[float],
                 done: asyncio.Future) -> None:
        self.dev, self.packets, self.sent, self.lags, self.done = dev, packets, sent, lags, done
        self.start = time.monotonic()
        self.slot = 0
        self.item: bytes | None = None
        self.count = 0

    @property
    def due(self) -> float:
        """When the current slot is due on the stream's real-time schedule."""
        return self.start + self.slot * FRAME_MS / 1000


def _match(kind: str, state: str | None = None):  # type: ignore[no-untyped-def]
    def check(r: Any) -> bool:
        return (
            r.kind == "json"
            and r.msg is not None
            and r.msg.get("type") == kind
            and (state is None or r.msg.get("state") == state)
        )

    return check


async def _device(
    spec: dict, dev_spec: dict, utts: list, noise: list[bytes], connect_gate: asyncio.Semaphore, out: dict,
    clock: UplinkClock,
) -> None:
    from tests.support.device import TestDevice

    dev = TestDevice(spec["url"], dev_spec["id"])
    utt = utts[dev_spec["sentence"]]
    rec: dict[str, Any] = {"id": dev_spec["id"], "text": utt.text, "lags": []}
    out[dev_spec["id"]] = rec
    try:
        async with connect_gate:
            await dev.connect(timeout=30)
            await dev.listen_start("auto")
        rec["connected"] = True
        # Start on the shared clock, each device at its own phase within the 60 ms frame.
        delay = spec["t0"] + dev_spec["phase"] - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        start = time.monotonic()
        speaking = False
        reply_done = asyncio.Event()
        sent: list[float] = []

        async def follow_reply() -> None:
            nonlocal speaking
            since = 0
            stt = await dev.wait_for(_match("stt"), spec["hard_end"] - time.monotonic() + 1, since)
            rec["stt_at"], rec["stt"] = stt.t, stt.msg.get("text")
            tts_start = await dev.wait_for(_match("tts", "start"), 30, since)
            speaking = True
            rec["tts_start_at"] = tts_start.t
            first = await dev.wait_for(lambda r: r.kind == "audio", 30, since)
            rec["first_audio_at"] = first.t
            stop = await dev.wait_for(_match("tts", "stop"), 60, since)
            rec["tts_stop_at"] = stop.t
            answer_at, rec["held"] = answer_audio(dev.received)
            if answer_at is not None:
                rec["answer_audio_at"] = answer_at
            rec["reply_frames"] = sum(1 for r in dev.received if r.kind == "audio")
            await dev.listen_start("auto")
            speaking = False
            reply_done.set()

        follower = asyncio.create_task(follow_reply())
        utt_slot = max(0, round(dev_spec["offset"] * 1000 / FRAME_MS))

        def timeline():  # type: ignore[no-untyped-def]
            slot = 0
            noise_at = dev_spec["noise_start"]
            while True:
                now = time.monotonic()
                # A reply already playing is heard to its end (a long one, e.g. "what can you do", starting
                # near the end of the window, outlasts hard_end); follow_reply bounds that wait.
                if (now >= spec["hard_end"] and (not speaking or follower.done())) or (
                    now >= spec["window_end"] and (reply_done.is_set() or slot < utt_slot)
                ):
                    return
                if speaking:
                    yield None
                elif utt_slot <= slot < utt_slot + len(utt.packets):
                    i = slot - utt_slot
                    if i == 0:
                        rec["utterance_start_slot"] = slot
                    yield utt.packets[i]
                    if i == utt.speech_end:
                        rec["end_of_speech"] = sent[-1]  # resumed right after that packet was sent
                else:
                    yield noise[noise_at % len(noise)]
                    noise_at += 1
                slot += 1

        rec["frames_sent"] = await clock.stream(dev, timeline(), sent, rec["lags"])
        rec["stream_s"] = time.monotonic() - start
        if not follower.done():
            follower.cancel()
        try:
            await follower
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError):
                rec["error"] = f"{type(exc).__name__}: {exc}"[:200]
    except Exception as exc:
        rec["error"] = f"{type(exc).__name__}: {exc}"[:200]
    finally:
        await dev.close()


async def _worker_main(spec: dict) -> dict:
    with open(spec["packets_file"], "rb") as f:
        utts, noise = pickle.load(f)
    out: dict[str, dict] = {}
    gate = asyncio.Semaphore(16)
    clock = UplinkClock()
    try:
        await asyncio.gather(*(_device(spec, d, utts, noise, gate, out, clock) for d in spec["devices"]))
    finally:
        await clock.close()
    lags = [lag for rec in out.values() for lag in rec.pop("lags")]
    return {
        "devices": list(out.values()),
        "send_lag_ms": {
            "p50": ms(percentile(lags, 50)),
            "p99": ms(percentile(lags, 99)),
            "max": ms(max(lags) if lags else None),
            "frames": len(lags),
        },
    }


def worker(spec_path: str, result_path: str) -> int:
    import psutil

    spec = json.loads(Path(spec_path).read_text())
    if os.environ.get("WREN_BENCH_CLIENT_NICE"):  # experiment
        os.nice(int(os.environ["WREN_BENCH_CLIENT_NICE"]))
    me = psutil.Process()
    cpu0 = sum(me.cpu_times()[:2])
    result = asyncio.run(_worker_main(spec))
    result["cpu_s"] = sum(me.cpu_times()[:2]) - cpu0
    Path(result_path).write_text(json.dumps(result))
    return 0

def answer_audio(received: list[Any]) -> tuple[float | None, bool]:
    """(when the answer's first audio came, whether "One moment." came before it) for one reply's records:
    the pacer sends each `sentence_start` right before its sentence's first packet."""
    held = in_answer = False
    for r in received:
        msg = r.msg if r.kind == "json" and r.msg else {}
        if msg.get("type") == "tts" and msg.get("state") == "sentence_start":
            if msg.get("text") == HOLD_PHRASE and not in_answer:
                held = True
            else:
                in_answer = True
        elif r.kind == "audio" and in_answer:
            return r.t, held
    return None, held

if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: streaming_devices.py SPEC_JSON RESULT_JSON (started by concurrency.py)")
    sys.exit(worker(sys.argv[1], sys.argv[2]))
