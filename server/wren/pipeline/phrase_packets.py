"""Ready packets of cached phrases: a sentence whose audio is in the TTS phrase cache is encoded once per
downlink format, and every later reply that says it sends those packets.

The phrase cache (wren.speech.tts.phrase_cache) saves the synthesis of a repeated sentence, but each reply
still resampled and Opus-encoded its audio again: at 200 streaming devices, where most replies are a few
fixed sentences ("Sorry, I don't understand that yet."), that was most of what the speak threads did
(docs/performance.md, round 22). Packets depend on the encoder's state, so a phrase's packets come from
a fresh renderer (resampler, frame chunker, Opus encoder) with its last frame padded with silence, the
way the hold phrase has always been said (wren.pipeline.hold). The synthesise stage therefore ends the
reply's own renderer before a ready phrase (its partial frame padded too) and starts a fresh one after
it: the encoder starts again only between sentences, never inside one (reference §9.3), and a sentence
next to a ready phrase may end up to one frame later.

Thread-safety: `ready` is called on the event loop, `render` on a speak thread; one lock guards the
packets. Bounded: at most `max_bytes` of packets (≈ 4 MB: ≈ 20 minutes of 24 kbit/s speech), least
recently used first out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from wren.pipeline.downlink import DownlinkFormat, DownlinkRenderer

DEFAULT_MAX_BYTES = 4 * 1024 * 1024


class PhrasePackets:
    def __init__(self, tts: Any, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._tts = tts  # a wren.speech.tts engine; only a phrase cache (with `cached`) has ready phrases
        self._max_bytes = max_bytes
        # Bound `max_bytes`; overflow policy: drop the least recently used phrase's packets.
        self._packets: OrderedDict[tuple[DownlinkFormat, str], tuple[bytes, ...]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.rendered = 0  # phrases encoded (once per phrase and format, unless evicted)
        self.used = 0  # sentences sent from ready packets

    def cached(self, text: str) -> bool:
        """Whether `text`'s audio is in the phrase cache, so its packets can be made without synthesis."""
        cached = getattr(self._tts, "cached", None)
        return cached is not None and bool(cached(text))

    def ready(self, fmt: DownlinkFormat, text: str) -> tuple[bytes, ...] | None:
        """The phrase's packets in `fmt` if they were made already (cheap: the event loop calls it)."""
        key = (fmt, _normal(text))
        with self._lock:
            packets = self._packets.get(key)
            if packets is not None:
                self._packets.move_to_end(key)
                self.used += 1
            return packets

    def render(self, fmt: DownlinkFormat, text: str) -> tuple[bytes, ...] | None:
        """Make (blocking: resample and encode) and keep the phrase's packets from its cached audio; None if
        the phrase cache no longer has it (the caller then synthesises it as usual)."""
        made = self.ready(fmt, text)
        if made is not None or not self.cached(text):
            return made
        made = render_phrase(self._tts, fmt, text)
        self._keep((fmt, _normal(text)), made)
        return made

    def _keep(self, key: tuple[DownlinkFormat, str], packets: tuple[bytes, ...]) -> None:
        size = sum(len(p) for p in packets)
        with self._lock:
            self.rendered += 1
            self.used += 1
            if key in self._packets or not size or size > self._max_bytes:
                return
            self._packets[key] = packets
            self._bytes += size
            while self._bytes > self._max_bytes:
                _, dropped = self._packets.popitem(last=False)
                self._bytes -= sum(len(p) for p in dropped)


def render_phrase(tts: Any, fmt: DownlinkFormat, text: str) -> tuple[bytes, ...]:
    """A cached phrase's packets from a fresh renderer, the last frame padded (blocking; no synthesis)."""
    renderer = DownlinkRenderer(tts.sample_rate, fmt)
    out: list[bytes] = []
    for pcm in tts.synthesize(text):  # from the phrase cache
        out.extend(renderer.render(pcm))
    out.extend(renderer.flush())
    return tuple(out)


def _normal(text: str) -> str:
    return " ".join(text.split())
