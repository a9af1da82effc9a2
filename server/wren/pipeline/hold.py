"""The hold phrase ("One moment."): what a person hears when the answer's first audio is late (issue 11,
admission control).

A reply's first audio can be late for two reasons: the engine has said no word yet (a slow LLM, a slow
tool), or its words wait for synthesis (every speak worker busy with other devices' replies on a full box).
Either way the person hears `HOLD_PHRASE` once, `[agent] hold_phrase_after_ms` after they finished
speaking, then the answer. `Hold` is one reply's promise of it; the synthesise stage keeps it
(wren.pipeline.synthesise).

The phrase is said from packets rendered once per downlink format out of the TTS phrase cache, so saying
it needs no synthesis job and no speak worker: under load those are exactly what the late reply is waiting
for. Rendering (resample + Opus encode of under a second of cached audio, a few milliseconds) happens on
the event loop, once per format. Without the phrase in the cache (the cache off, or not warm yet) there
are no packets: the stage then holds only for a silent engine, by synthesising the phrase like any
sentence.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from wren.pipeline.downlink import DownlinkFormat
from wren.pipeline.frames import Sentence
from wren.pipeline.phrase_packets import render_phrase

log = logging.getLogger(__name__)

HOLD_PHRASE = "One moment."
MAX_FORMATS = 8  # downlink formats whose packets are kept; past it the least recently used is dropped
# A reply whose words came after the bound had passed (the recogniser was late) still gets this long to
# begin before the hold phrase is said: its first audio may be a cached phrase, a few milliseconds away.
GRACE_S = 0.25


class HoldAudio:
    """The hold phrase's packets per downlink format, rendered from the TTS phrase cache. One per server."""

    def __init__(self, tts: Any) -> None:
        self._tts = tts  # a wren.speech.tts engine; only a phrase cache (with `cached`) has the audio
        # Bound MAX_FORMATS; overflow policy: drop the least recently used format's packets.
        self._packets: OrderedDict[DownlinkFormat, tuple[bytes, ...]] = OrderedDict()

    def packets(self, fmt: DownlinkFormat) -> tuple[bytes, ...] | None:
        """The phrase's packets in `fmt` (the last frame padded), or None while the cache lacks its audio."""
        made = self._packets.get(fmt)
        if made is not None:
            self._packets.move_to_end(fmt)
            return made
        cached = getattr(self._tts, "cached", None)
        if cached is None or not cached(HOLD_PHRASE):
            return None
        started = time.perf_counter()
        made = render_phrase(self._tts, fmt, HOLD_PHRASE)  # from the cache: no synthesis
        self._packets[fmt] = made
        while len(self._packets) > MAX_FORMATS:
            self._packets.popitem(last=False)
        log.info("hold phrase %r rendered for %s %d Hz / %d ms: %d packets in %.1f ms", HOLD_PHRASE,
                 fmt.format, fmt.sample_rate, fmt.frame_ms, len(made), (time.perf_counter() - started) * 1000)
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
