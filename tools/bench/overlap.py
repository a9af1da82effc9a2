"""Overlapping turns (issue 11): 10 devices each asking 3 spoken questions at random, overlapping moments,
while 100 more devices stay connected and idle; end of speech → first reply audio p50 / p95, and how many
of the turns were answered.

Each device is a tests/support/device.py TestDevice (Opus 16 kHz, 60 ms frames) in push-to-talk: it
streams a piper-spoken request under room noise at 30 dB SNR at real-time pace, keeps the microphone open
180 ms past the last word (as a person letting go of the button does) and then sends `listen stop`. It
listens to the whole reply (so long replies really overlap other devices' turns: "what can you do" is
about 18 s of speech) and asks its next question at the next planned moment, or right after the reply if
that moment has passed. The moments are random but seeded, so every run plans the same turns.

End of speech = the send time of the packet holding the last voiced sample; first audio = arrival of the
first reply frame after it. The server's split of each turn (ASR finalise, queue, TTS first audio, ...)
comes from its `wren-timing turn` records, as in turn_latency.py.

    .venv/bin/python tools/bench/overlap.py [--quick] [--active 10] [--idle 100] [--requests 3] [--json PATH]
                                           [--env KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.bench.common import (
    FRAME_SAMPLES,
    SENTENCES,
    UPLINK_RATE,
    ServerProcess,
    Utterance,
    box_speed,
    device_id,
    fmt,
    ms,
    opus_packets,
    pad_to_frame,
    speech_end_frame,
    speed_line,
    summary,
    write_json,
)
from tools.bench.turn_latency import _attach_server_split

# 110 simulated devices share 127.0.0.1, past the per-address cap meant for a LAN ([limits]
# connections_per_ip, 64: HTTP 429); the bench lifts it, as 110 real devices would have 110 addresses.
SERVER_ENV = {"WREN_LIMITS_CONNECTIONS_PER_IP": "0"}
SNR_DB = 30.0
TRAIL_MS = 180  # microphone open past the last word before `listen stop`
TURN_TIMEOUT_S = 30.0  # to stt / to first audio
REPLY_TIMEOUT_S = 90.0  # to tts stop (the longest builtin reply is ~18 s)
TARGET_P95_MS = 1000.0
SPLIT = ("asr_finalise", "queue_to_start", "engine_first_sentence", "tts_wait", "tts_first_audio", "encode",
         "send")


def _with_snr(pcm: bytes, snr_db: float, seed: int) -> bytes:
    """White room noise whose RMS is the speech's RMS (over the 20 ms frames within 30 dB of the loudest)
    minus `snr_db`, under the whole utterance including its padding."""
    import numpy as np

    speech = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    frames = speech[: len(speech) // 320 * 320].reshape(-1, 320)
    rms = np.sqrt((frames**2).mean(axis=1))
    loud = rms[rms >= rms.max() / 10 ** (30 / 20)]
    noise_rms = float(np.sqrt((loud**2).mean())) / 10 ** (snr_db / 20)
    noise = np.random.default_rng(seed).normal(0, noise_rms, len(speech))
    return np.clip(speech + noise, -32768, 32767).astype("<i2").tobytes()


def requests_audio(texts: list[str]) -> list[Utterance]:
    """Piper-spoken requests (cached in .cache/spoken) under noise, cut 180 ms after the last word."""
    from tests.support.spoken import spoken_pcm

    out = []
    for i, text in enumerate(texts):
        pcm = pad_to_frame(spoken_pcm(text, UPLINK_RATE, lead_ms=300, tail_ms=600))
        end = speech_end_frame(pcm)
        keep = (end + 1) * FRAME_SAMPLES * 2 + TRAIL_MS * UPLINK_RATE // 1000 * 2
        out.append(Utterance(text, opus_packets(_with_snr(pcm[:keep], SNR_DB, seed=2000 + i)), end))
    return out


def _is(kind: str, state: str | None = None):  # type: ignore[no-untyped-def]
    def match(r: Any) -> bool:
        return r.kind == "json" and r.msg is not None and r.msg.get("type") == kind and (
            state is None or r.msg.get("state") == state)

    return match


async def _ask(dev: Any, utt: Utterance) -> dict:
    """One push-to-talk request and its whole reply; client-side monotonic times."""
    since = len(dev.received)
    await dev.listen_start("manual")
    sent: list[float] = []
    await dev.stream_packets(utt.packets, sent_times=sent)
    await dev.listen_stop()
    turn: dict[str, Any] = {"text": utt.text, "end_of_speech": sent[utt.speech_end]}
    try:
        stt = await dev.wait_for(_is("stt"), TURN_TIMEOUT_S, since)
        first = await dev.wait_for(lambda r: r.kind == "audio", TURN_TIMEOUT_S, since)
        turn.update(stt=stt.msg.get("text"), first_audio_at=first.t,
                    to_stt_ms=ms(stt.t - turn["end_of_speech"]),
                    to_first_audio_ms=ms(first.t - turn["end_of_speech"]))
        stop = await dev.wait_for(_is("tts", "stop"), REPLY_TIMEOUT_S, since)
        turn["reply_s"] = round(stop.t - first.t, 2)
        turn["answered"] = True
    except (TimeoutError, ConnectionError) as exc:
        turn["error"] = f"{type(exc).__name__}: {exc}"[:160]
    return turn


async def _active(dev: Any, plan: list[tuple[float, Utterance]], t0: float) -> list[dict]:
    turns = []
    for at, utt in plan:
        delay = t0 + at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        turns.append(await _ask(dev, utt))
        await asyncio.sleep(0.3)  # a person does not ask again the instant the reply ends
    return turns


async def run_async(server: ServerProcess, active: int, idle: int, requests: int, span_s: float,
                    seed: int = 11) -> dict:
    from tests.support.device import TestDevice

    rng = random.Random(seed)
    utts = requests_audio(SENTENCES)
    gate = asyncio.Semaphore(20)

    async def connect(dev: Any) -> None:
        async with gate:
            await dev.connect(timeout=30)

    idlers = [TestDevice(server.ws_url, device_id(40, i)) for i in range(idle)]
    talkers = [TestDevice(server.ws_url, device_id(41, i)) for i in range(active)]
    plans = [
        sorted((rng.uniform(0, span_s), utts[rng.randrange(len(utts))]) for _ in range(requests))
        for _ in talkers
    ]
    offset = server.log_size()
    try:
        await asyncio.gather(*(connect(d) for d in idlers + talkers))
        await asyncio.sleep(1.0 + 0.01 * idle)  # device MCP listings of all connections settle
        t0 = time.monotonic()
        per_device = await asyncio.gather(*(_active(d, p, t0) for d, p in zip(talkers, plans, strict=True)))
        wall = time.monotonic() - t0
    finally:
        await asyncio.gather(*(d.close() for d in idlers + talkers), return_exceptions=True)
    await asyncio.sleep(0.5)
    records = server.timing_records("turn", offset)
    for dev, turns in zip(talkers, per_device, strict=True):
        _attach_server_split(turns, records, dev.device_id)
    return aggregate([t for turns in per_device for t in turns], active, idle, wall, server, offset)


def aggregate(turns: list[dict], active: int, idle: int, wall: float, server: ServerProcess,
              offset: int) -> dict:
    ok = [t for t in turns if t.get("answered")]
    heard = [t for t in turns if "to_first_audio_ms" in t]
    # Turns in flight at the moment each one ended its speech: how much they really overlapped.
    spans = [(t["end_of_speech"], t["first_audio_at"] + t.get("reply_s", 0)) for t in heard]
    overlap = [sum(1 for a, b in spans if a <= t["end_of_speech"] < b) - 1 for t in heard]
    return {
        "active_devices": active,
        "idle_devices": idle,
        "turns": len(turns),
        "answered": len(ok),
        "first_audio_ms": summary([t["to_first_audio_ms"] for t in heard]),
        "stt_ms": summary([t["to_stt_ms"] for t in heard]),
        "other_turns_in_flight": summary([float(n) for n in overlap]),
        "split_ms": {k: summary([t["server_ms"][k] for t in heard
                                 if t.get("server_ms", {}).get(k) is not None]) for k in SPLIT},
        "errors": sorted({t["error"] for t in turns if "error" in t})[:5],
        "server_errors": len(server.errors(offset)),
        "seconds": round(wall, 1),
        "detail": [{k: v for k, v in t.items() if k not in ("end_of_speech", "first_audio_at")}
                   for t in turns],
    }


def run(server: ServerProcess, quick: bool, active: int | None = None, idle: int | None = None,
        requests: int | None = None) -> dict:
    active = active if active is not None else (3 if quick else 10)
    idle = idle if idle is not None else (10 if quick else 100)
    requests = requests if requests is not None else (2 if quick else 3)
    span = 6.0 if quick else 30.0
    return asyncio.run(run_async(server, active, idle, requests, span))


def print_table(res: dict) -> None:
    a, s = res["first_audio_ms"], res["stt_ms"]
    print(f"overlap: {res['active_devices']} devices × {res['turns'] // max(1, res['active_devices'])} "
          f"requests + {res['idle_devices']} idle: answered {res['answered']}/{res['turns']}; "
          f"end of speech → first audio p50 {fmt(a['p50'])} / p95 {fmt(a['p95'])} / max {fmt(a['max'])} ms "
          f"(target p95 ≤ {TARGET_P95_MS:.0f} ms); → stt p50 {fmt(s['p50'])} / p95 {fmt(s['p95'])} ms")
    print("         other turns in flight at end of speech p50/max: "
          f"{fmt(res['other_turns_in_flight']['p50'])}/{fmt(res['other_turns_in_flight']['max'])}")
    print("         server split p50/p95 (ms): " + ", ".join(
        f"{k} {fmt(v['p50'])}/{fmt(v['p95'])}" for k, v in res["split_ms"].items()))
    if res["errors"]:
        print("         errors: " + "; ".join(res["errors"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 devices × 2 requests + 10 idle, a 6 s window")
    parser.add_argument("--active", type=int, help="devices asking (default 10)")
    parser.add_argument("--idle", type=int, help="idle connected devices (default 100)")
    parser.add_argument("--requests", type=int, help="requests per asking device (default 3)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--env", nargs="*", help="extra server environment, KEY=VALUE (experiments, e.g. "
                        "WREN_TTS_PHRASE_CACHE_KB=0: every reply synthesised)")
    args = parser.parse_args()
    env = dict(SERVER_ENV)
    for item in args.env or []:
        key, _, value = item.partition("=")
        env[key] = value
    with ServerProcess(env_overrides=env) as server:
        res = run(server, args.quick, args.active, args.idle, args.requests)
    res["speed"] = box_speed()
    print_table(res)
    print(speed_line(res["speed"]))
    write_json(args.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
