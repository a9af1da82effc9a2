"""Always-on, cheap timing of the voice path, published as INFO log lines with a stable prefix.

Two records, both stamped with `time.monotonic()` (CLOCK_MONOTONIC: one clock for every process on the
machine, so a benchmark client can line its own send/receive times up with the server's stages):

- `TurnTiming`: one per reply turn. Stages are marked once (the first call wins) and the record is
  logged when the turn ends, as `wren-timing turn {json}`: absolute stamps plus the split
  (ASR finalise, engine first sentence, TTS first audio, encode + send).
- `UplinkTiming`: one per session. For every uplink audio frame it measures how far behind real time
  the server finished processing it (decode, resample, VAD, ASR accept), keeps a small histogram,
  and logs it when the session closes, as `wren-timing uplink {json}`.

Cost: a few `time.monotonic()` calls and dict increments per frame; no frames to devices, no I/O per
frame. `RECENT_TURNS` keeps the last turns in memory for in-process callers. A `TimingSink` handed to
either record also gets each finished turn record and each frame's lag as they happen (the server's
`/metrics`, wren.transport.metrics); a sink that raises is logged and never breaks the turn.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger("wren.timing")

PREFIX = "wren-timing"
RECENT_TURNS: deque[dict] = deque(maxlen=256)

# The stages of a turn, in the order they normally happen.
TURN_STAGES = (
    "input_end",  # finalise began: `listen stop` (or the VAD end) reached the front of the inbox
    "asr_done",  # the recogniser's final words are out
    "started",  # the reply worker began the turn
    "stt_sent",
    "first_sentence",  # the engine's first clause came out of the sentence splitter
    "hold_sent",  # the answer was late: its hold phrase went to the pacer (wren.pipeline.hold), if at all
    "tts_started",  # a speak worker began its first synthesis job (after the TTS scheduler's queue)
    "tts_first_pcm",  # TTS produced the first PCM chunk of the reply
    "first_packet",  # ... and it was resampled and encoded into the first packets
    "first_audio_sent",  # the first audio frame was written to the socket
    "ended",
)


class TimingSink(Protocol):
    """Observer of the timing records (called on the event loop; must be cheap and not block)."""

    def turn_finished(self, record: dict) -> None: ...

    def uplink_lag(self, lag_ms: float) -> None: ...


@dataclass
class TurnTiming:
    device: str
    source: str  # "speech" (recognised words), "text" (typed query) or "prompt" (empty input)
    turn: int = 0
    stamps: dict[str, float] = field(default_factory=dict)
    sink: TimingSink | None = None
    heard: str = ""  # the words answered (recognised or typed; empty for a prompt): the web console
    said: str = ""  # the sentences whose audio went out

    def mark(self, stage: str, at: float | None = None) -> None:
        if stage not in self.stamps:
            self.stamps[stage] = time.monotonic() if at is None else at

    def split_ms(self) -> dict[str, float | None]:
        s = self.stamps

        def span(a: str, b: str) -> float | None:
            return round((s[b] - s[a]) * 1000, 2) if a in s and b in s else None

        engine_from = "stt_sent" if "stt_sent" in s else "started"
        return {
            "asr_finalise": span("input_end", "asr_done"),
            "queue_to_start": span("asr_done", "started"),
            "engine_first_sentence": span(engine_from, "first_sentence"),
            "tts_first_audio": span("first_sentence", "tts_first_pcm"),
            "tts_wait": span("first_sentence", "tts_started"),  # part of tts_first_audio: for a worker
            "encode": span("tts_first_pcm", "first_packet"),
            # Held: the first audio sent was the hold phrase's, not the answer's first packet.
            "send": None if "hold_sent" in s else span("first_packet", "first_audio_sent"),
            "input_end_to_first_audio": span("input_end", "first_audio_sent"),
            "input_end_to_hold": span("input_end", "hold_sent"),
        }

    def finish(self, cancelled: bool = False) -> dict:
        self.mark("ended")
        record = {
            "device": self.device,
            "turn": self.turn,
            "source": self.source,
            "cancelled": cancelled,
            "t": {k: round(v, 6) for k, v in self.stamps.items()},
            "ms": self.split_ms(),
        }
        log.info("%s turn %s", PREFIX, json.dumps(record, separators=(",", ":")))
        record.update(heard=self.heard, said=self.said)  # in memory only: the log line stays timing
        RECENT_TURNS.append(record)
        if self.sink is not None:
            try:
                self.sink.turn_finished(record)
            except Exception:
                log.exception("timing sink failed on a turn record")
        return record


def _bucket(lag_ms: float) -> int:
    """1 ms buckets below 100 ms, 10 ms below 1 s, 100 ms above: p99 stays exact where it matters."""
    if lag_ms < 100:
        return max(0, int(lag_ms))
    if lag_ms < 1000:
        return int(lag_ms) // 10 * 10
    return int(lag_ms) // 100 * 100


class UplinkTiming:
    """Per-session uplink lag: processing finish time vs the frame's slot on a real-time schedule.

    The schedule is anchored per listening stream (reset at every capture begin): frame i is due at
    `anchor + i * frame_ms`, where anchor is the earliest `arrival_j - j * frame_ms` seen so far
    (network jitter makes frames late, never early). So the lag includes socket/event-loop backlog,
    inbox queueing, executor wait and the CPU work itself. `proc` is only the part after arrival.
    """

    def __init__(self, device: str, sink: TimingSink | None = None) -> None:
        self.device = device
        self.sink = sink
        self.frame_s = 0.06
        self._arrivals: deque[float] = deque()  # bounded by the inbox: one stamp per frame waiting in it
        self._anchor: float | None = None
        self._index = 0
        self.frames = 0
        self.lag_hist: dict[int, int] = {}
        self.proc_hist: dict[int, int] = {}
        self.max_lag_ms = 0.0

    def set_frame_ms(self, frame_ms: int) -> None:
        self.frame_s = frame_ms / 1000

    def arrived(self) -> None:
        self._arrivals.append(time.monotonic())

    def take_arrival(self) -> float | None:
        """Frames are handled strictly in arrival order, so arrivals pop in the same order."""
        return self._arrivals.popleft() if self._arrivals else None

    def restart(self) -> None:
        self._anchor = None
        self._index = 0

    def processed(self, arrival: float | None) -> None:
        if arrival is None:
            return
        now = time.monotonic()
        anchor = arrival - self._index * self.frame_s
        if self._anchor is None or anchor < self._anchor:
            self._anchor = anchor
        lag_ms = (now - (self._anchor + self._index * self.frame_s)) * 1000
        self._index += 1
        self.frames += 1
        b = _bucket(lag_ms)
        self.lag_hist[b] = self.lag_hist.get(b, 0) + 1
        p = _bucket((now - arrival) * 1000)
        self.proc_hist[p] = self.proc_hist.get(p, 0) + 1
        if lag_ms > self.max_lag_ms:
            self.max_lag_ms = lag_ms
        if self.sink is not None:
            try:
                self.sink.uplink_lag(lag_ms)
            except Exception:
                log.exception("timing sink failed on an uplink frame")
                self.sink = None  # once, not 16 log lines a second

    def report(self) -> None:
        if not self.frames:
            return
        record = {"device": self.device, "frames": self.frames, "max_lag_ms": round(self.max_lag_ms, 2),
                  "lag_hist": self.lag_hist, "proc_hist": self.proc_hist}
        log.info("%s uplink %s", PREFIX, json.dumps(record, separators=(",", ":")))
