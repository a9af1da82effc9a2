"""Turn latency: end of the user's speech → `stt` and → first downlink audio frame, with the server's split.

One test device (tests/support/device.py) talks to a real `wren serve` with the embedded defaults and
says piper-spoken everyday sentences, covered by quiet room noise:

- manual (push-to-talk): the device streams the utterance at real-time pace and sends `listen stop`
  right after its last frame; end of speech = the send time of that last frame.
- auto: the device keeps streaming room noise after the utterance until the reply starts (as a stock
  device does); end of speech = the send time of the frame that holds the last voiced sample. The
  server can only notice the end after `[vad] silence_ms` of silence, reported separately.

`simultaneous` runs K devices (manual) whose utterances end at the same instant, K = 1, 5, 10.

Once the first audio frame has arrived the device sends `abort` (only to keep the run short; the
reply's own timing is already measured), waits for `tts stop`, and goes on with the next sentence.
The split comes from the server's `wren-timing turn` log records (wren/pipeline/timing.py), matched
to client turns on the shared monotonic clock.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.bench.common import (
    SENTENCES,
    ServerProcess,
    Utterance,
    device_id,
    fmt,
    ms,
    noise_packets,
    summary,
    utterances,
    write_json,
)

SPLIT_KEYS = ("asr_finalise", "engine_first_sentence", "tts_first_audio", "encode", "send")
TURN_TIMEOUT = 40.0


def _is_json(kind: str, state: str | None = None):  # type: ignore[no-untyped-def]
    def match(r: Any) -> bool:
        return (
            r.kind == "json"
            and r.msg is not None
            and r.msg.get("type") == kind
            and (state is None or r.msg.get("state") == state)
        )

    return match


def _is_audio(r: Any) -> bool:
    return r.kind == "audio"


async def _one_turn(dev: Any, utt: Utterance, mode: str, noise: list[bytes], lead: int = 0) -> dict:
    """Speak `utt` in `mode`; returns client-side times (monotonic) of end of speech, stt, first audio."""
    since = len(dev.received)
    await dev.listen_start(mode)
    sent: list[float] = []
    if mode == "manual":
        await dev.stream_packets([None] * lead + utt.packets, sent_times=sent)
        end_of_speech = sent[-1]
        await dev.listen_stop()
    else:

        def timeline():  # type: ignore[no-untyped-def]
            yield from utt.packets
            seen = since
            for k in range(int(15_000 / 60)):  # room noise until the reply starts (15 s cap)
                while seen < len(dev.received):
                    if _is_json("tts", "start")(dev.received[seen]):
                        return
                    seen += 1
                yield noise[k % len(noise)]

        await dev.stream_packets(timeline(), sent_times=sent)
        end_of_speech = sent[utt.speech_end]
    result: dict[str, Any] = {"text": utt.text, "mode": mode, "end_of_speech": end_of_speech}
    try:
        stt = await dev.wait_for(_is_json("stt"), TURN_TIMEOUT, since)
        first = await dev.wait_for(_is_audio, TURN_TIMEOUT, since)
        result.update(
            stt_at=stt.t,
            stt=stt.msg.get("text"),
            first_audio_at=first.t,
            to_stt_ms=ms(stt.t - end_of_speech),
            to_first_audio_ms=ms(first.t - end_of_speech),
        )
        await dev.abort("bench: next sentence")
        await dev.wait_for(_is_json("tts", "stop"), TURN_TIMEOUT, since)
    except (TimeoutError, ConnectionError) as exc:
        result["error"] = str(exc)[:200]
    return result


def _attach_server_split(turns: list[dict], records: list[dict], dev_id: str) -> None:
    """The server record of each turn: same device, input_end between end of speech and first audio."""
    mine = [r for r in records if r.get("device") == dev_id and "input_end" in r.get("t", {})]
    for turn in turns:
        if "first_audio_at" not in turn:
            continue
        lo, hi = turn["end_of_speech"] - 1.0, turn["first_audio_at"]
        for rec in mine:
            t = rec["t"]
            if lo <= t["input_end"] <= hi:
                turn["server_ms"] = rec["ms"]
                turn["end_of_speech_to_input_end_ms"] = ms(t["input_end"] - turn["end_of_speech"])
                if "first_audio_sent" in t:
                    turn["delivery_ms"] = ms(turn["first_audio_at"] - t["first_audio_sent"])
                break


def _aggregate(turns: list[dict]) -> dict:
    ok = [t for t in turns if "to_first_audio_ms" in t]
    out: dict[str, Any] = {
        "turns": len(turns),
        "answered": len(ok),
        "to_first_audio_ms": summary([t["to_first_audio_ms"] for t in ok]),
        "to_stt_ms": summary([t["to_stt_ms"] for t in ok]),
        "recognised_exactly": sum(
            1 for t in ok if (t.get("stt") or "").lower().strip(" .?!") == t["text"].lower()
        ),
        # Replies whose first audio was "One moment." (wren.pipeline.hold: the answer was late, e.g. the
        # first synthesis of a fresh server on a busy box). The device aborts at that first audio, so the
        # answer's own TTS, encode and send stages have no time in these turns.
        "held": sum(1 for t in ok if t.get("server_ms", {}).get("input_end_to_hold") is not None),
    }
    split = {
        k: summary([t["server_ms"][k] for t in ok if t.get("server_ms", {}).get(k) is not None])
        for k in SPLIT_KEYS
    }
    split["end_of_speech_to_input_end"] = summary(
        [t["end_of_speech_to_input_end_ms"] for t in ok if "end_of_speech_to_input_end_ms" in t]
    )
    split["delivery"] = summary([t["delivery_ms"] for t in ok if "delivery_ms" in t])
    out["split_ms"] = split
    return out


async def single_device(server: ServerProcess, mode: str, count: int, run: int = 1) -> dict:
    from tests.support.device import TestDevice

    utts = utterances(SENTENCES[:count])
    noise = noise_packets()
    offset = server.log_size()
    dev = TestDevice(server.ws_url, device_id(run, 0))
    turns = []
    async with dev:
        await dev.connect()
        await asyncio.sleep(0.5)  # device MCP initialisation settles
        for utt in utts:
            turns.append(await _one_turn(dev, utt, mode, noise))
            await asyncio.sleep(0.3)
    await asyncio.sleep(0.5)
    _attach_server_split(turns, server.timing_records("turn", offset), dev.device_id)
    result = _aggregate(turns)
    if mode == "auto":
        from wren.config import load_config

        result["silence_window_ms"] = load_config(env=server.env_overrides).vad.silence_ms
        s = result["to_first_audio_ms"]
        result["to_first_audio_minus_silence_ms"] = {
            k: (None if s[k] is None or k == "n" else round(s[k] - result["silence_window_ms"], 1))
            for k in ("p50", "p95", "max")
        }
    result["detail"] = [
        {k: v for k, v in t.items() if not k.endswith("_at") and k != "end_of_speech"} for t in turns
    ]
    return result


async def simultaneous(server: ServerProcess, k: int, rounds: int, run: int = 2) -> dict:
    """K devices whose manual-mode utterances end at the same instant."""
    from tests.support.device import TestDevice

    utts = utterances(SENTENCES)
    noise = noise_packets()
    offset = server.log_size()
    devices = [TestDevice(server.ws_url, device_id(run, i)) for i in range(k)]
    turns: list[list[dict]] = [[] for _ in range(k)]
    try:
        await asyncio.gather(*(d.connect() for d in devices))
        await asyncio.sleep(0.5 + 0.05 * k)
        for r in range(rounds):
            chosen = [utts[(r * k + i) % len(utts)] for i in range(k)]
            longest = max(len(u.packets) for u in chosen)
            results = await asyncio.gather(
                *(
                    _one_turn(d, u, "manual", noise, lead=longest - len(u.packets))
                    for d, u in zip(devices, chosen, strict=True)
                )
            )
            for i, res in enumerate(results):
                turns[i].append(res)
            await asyncio.sleep(0.5)
    finally:
        await asyncio.gather(*(d.close() for d in devices), return_exceptions=True)
    await asyncio.sleep(0.5)
    records = server.timing_records("turn", offset)
    flat = []
    for d, dev_turns in zip(devices, turns, strict=True):
        _attach_server_split(dev_turns, records, d.device_id)
        flat.extend(dev_turns)
    result = _aggregate(flat)
    result["k"] = k
    result["rounds"] = rounds
    return result


async def run(server: ServerProcess, quick: bool) -> dict:
    count = 3 if quick else len(SENTENCES)
    out: dict[str, Any] = {}
    out["manual"] = await single_device(server, "manual", count, run=1)
    out["auto"] = await single_device(server, "auto", 1 if quick else 8, run=2)
    plan = [(1, 1), (2, 1)] if quick else [(1, 4), (5, 2), (10, 2)]
    out["simultaneous"] = [await simultaneous(server, k, rounds, run=10 + k) for k, rounds in plan]
    return out


def print_table(res: dict) -> None:
    for mode in ("manual", "auto"):
        r = res[mode]
        a, s = r["to_first_audio_ms"], r["to_stt_ms"]
        held = f", {r['held']} began with the hold phrase" if r.get("held") else ""
        print(
            f"{mode:7s} end of speech → first audio p50 {fmt(a['p50'])} / p95 {fmt(a['p95'])} / max "
            f"{fmt(a['max'])} ms; → stt p50 {fmt(s['p50'])} / p95 {fmt(s['p95'])} ms "
            f"({r['answered']}/{r['turns']} answered{held})"
        )
        split = r["split_ms"]
        print("        split p50 (ms): " + ", ".join(f"{k} {fmt(v['p50'])}" for k, v in split.items()))
    for r in res["simultaneous"]:
        a = r["to_first_audio_ms"]
        print(
            f"K={r['k']:<3d} simultaneous turns: first audio p50 {fmt(a['p50'])} / p95 {fmt(a['p95'])} ms "
            f"({r['answered']}/{r['turns']} answered)"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few sentences, K = 1, 2")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    with ServerProcess() as server:
        started = time.monotonic()
        res = asyncio.run(run(server, args.quick))
        res["seconds"] = round(time.monotonic() - started, 1)
    print_table(res)
    write_json(args.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
