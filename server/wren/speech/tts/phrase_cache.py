"""The audio of short phrases already spoken, kept and reused: a fixed reply starts at once.

Time to first audio is the synthesis time of the reply's first chunk (≈140 ms for a short clause of piper
on the dev box). Many replies of the built-in agent are the same few sentences ("You're welcome.",
"Sorry, I don't understand that yet.", the empty-input prompts), so their audio is cached per engine (one
voice and speed per engine, so per voice and speed) and the server warms the cache at start with the
agent's fixed phrases, off the hot path.

Bounded: only texts up to `MAX_CHARS` are cached, and at most `max_bytes` of PCM (≈8 MB: ≈3 minutes of
22 kHz audio); least recently used phrases go first. With `[tts] natural_variation` the cached audio is
one sample of the voice's natural variation: a repeated fixed phrase then sounds the same each time,
which is what a person expects from a fixed phrase anyway.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Any

from wren.speech.sentences import SentenceSplitter, clean_for_speech

log = logging.getLogger(__name__)

MAX_CHARS = 80
DEFAULT_MAX_BYTES = 8 * 1024 * 1024


class PhraseCache:
    def __init__(self, engine: Any, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.engine = engine
        self.name = engine.name
        self.sample_rate = engine.sample_rate
        self._max_bytes = max_bytes
        # Bound `max_bytes` of PCM; policy: drop the least recently used phrase (module docstring).
        self._audio: OrderedDict[str, tuple[bytes, ...]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __getattr__(self, name: str) -> Any:  # the wrapped engine's own attributes (voice, config)
        return getattr(self.engine, name)

    @staticmethod
    def _key(text: str) -> str | None:
        key = " ".join(clean_for_speech(text or "").split())
        return key if key and len(key) <= MAX_CHARS else None

    def synthesize(self, text: str) -> Iterator[bytes]:
        key = self._key(text)
        if key is not None:
            with self._lock:
                cached = self._audio.get(key)
                if cached is not None:
                    self._audio.move_to_end(key)
                    self.hits += 1
            if cached is not None:
                yield from cached
                return
            self.misses += 1
        chunks: list[bytes] = []
        for pcm in self.engine.synthesize(text):
            chunks.append(pcm)
            yield pcm
        if key is not None:
            self._store(key, tuple(chunks))

    def _store(self, key: str, chunks: tuple[bytes, ...]) -> None:
        size = sum(len(c) for c in chunks)
        if not size or size > self._max_bytes:
            return
        with self._lock:
            if key in self._audio:
                return
            self._audio[key] = chunks
            self._bytes += size
            while self._bytes > self._max_bytes:
                _, dropped = self._audio.popitem(last=False)
                self._bytes -= sum(len(c) for c in dropped)

    def cached(self, text: str) -> bool:
        key = self._key(text)
        with self._lock:
            return key is not None and key in self._audio

    def warm(self, replies: Iterable[str]) -> int:
        """Synthesise these replies' chunks as a reply would split them (blocking: run it in a thread);
        returns how many chunks were added."""
        started, added = time.perf_counter(), 0
        for reply in replies:
            splitter = SentenceSplitter()
            for chunk in [*splitter.feed(reply), *splitter.flush()]:
                if self._key(chunk) is not None and not self.cached(chunk):
                    for _ in self.synthesize(chunk):
                        pass
                    added += 1
        log.info("tts: %d fixed phrases cached in %.1f s", added, time.perf_counter() - started)
        return added
