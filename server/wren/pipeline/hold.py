"""The hold phrase ("One moment."): what a person hears when the answer's first audio is late (issue 11,
admission control).

A reply's first audio can be late for two reasons: the engine has said no word yet (a slow LLM, a slow
tool), or its words wait for synthesis (every speak worker busy with other devices' replies on a full box).
Either way the person hears `HOLD_PHRASE` once, `[agent] hold_phrase_after_ms` after they finished
speaking, then the answer. `Hold` is one reply's promise of it; the synthesise stage keeps it
(wren.pipeline.synthesise).

The phrase is said from ready packets (wren.pipeline.phrase_packets: a cached phrase encoded once per
downlink format), so saying it needs no synthesis job and no speak worker: under load those are exactly
what the late reply is waiting for. The first time a format needs them they are made on the event loop
(resample + Opus encode of under a second of cached audio, a few milliseconds). Without the phrase in the
TTS phrase cache (the cache off, or not warm yet) there are no packets: the stage then holds only for a
silent engine, by synthesising the phrase like any sentence.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from wren.pipeline.downlink import DownlinkFormat
from wren.pipeline.frames import Sentence
from wren.pipeline.phrase_packets import PhrasePackets

log = logging.getLogger(__name__)

HOLD_PHRASE = "One moment."
# A reply whose words came after the bound had passed (the recogniser was late) still gets this long to
# begin before the hold phrase is said: its first audio may be a cached phrase, a few milliseconds away.
GRACE_S = 0.25


class HoldAudio:
    """The hold phrase's packets per downlink format: one of the ready phrases. One per server."""

    def __init__(self, phrases: PhrasePackets) -> None:
        self._phrases = phrases

    def packets(self, fmt: DownlinkFormat) -> tuple[bytes, ...] | None:
        """The phrase's packets in `fmt` (the last frame padded), or None while the cache lacks its audio."""
        made = self._phrases.ready(fmt, HOLD_PHRASE)
        if made is not None:
            return made
        started = time.perf_counter()
        made = self._phrases.render(fmt, HOLD_PHRASE)  # from the phrase cache: no synthesis
        if made is not None:
            spent_ms = (time.perf_counter() - started) * 1000
            log.info("hold phrase %r rendered for %s %d Hz / %d ms: %d packets in %.1f ms", HOLD_PHRASE,
                     fmt.format, fmt.sample_rate, fmt.frame_ms, len(made), spent_ms)
        return made


@dataclass
class Hold:
    """One reply's hold phrase: said once, at `at` (time.monotonic), unless the answer's audio came first."""

    at: float
    audio: HoldAudio | None  # None: no packets; a silent engine's hold is synthesised like any sentence
    # The frame the reply's source yields when the engine is silent at `at`; recognised by identity.
    sentence: Sentence = field(default_factory=lambda: Sentence(HOLD_PHRASE))
    said: bool = False

    @classmethod
    def after(cls, bound_s: float, since: float, audio: HoldAudio | None, now: float | None = None) -> Hold:
        """Due `bound_s` after `since` (the end of speech, or the request), and never sooner than GRACE_S
        from now."""
        now = time.monotonic() if now is None else now
        return cls(max(since + bound_s, now + GRACE_S), audio)

    @property
    def text(self) -> str:
        return self.sentence.text
