"""The audio of short phrases already spoken, kept and reused: a fixed reply starts at once.

Time to first audio is the synthesis time of the reply's first chunk (≈140 ms for a short clause of piper
on the dev box). Many replies of the built-in agent are the same few sentences ("You're welcome.",
"Sorry, I don't understand that yet.", the empty-input prompts), so their audio is cached per engine (one
voice and speed per engine, so per voice and speed) and the server warms the cache at start with the
agent's fixed phrases, off the hot path.

A reply that is not cached but starts with a cached clause and a comma ("Okay, a timer for 10 minutes,
starting now.", "Today is Thursday, December 3, 2026.") starts with that clause's audio, and the rest is
synthesised while it plays: the agent's fixed first clauses are warmed with its fixed phrases.

The warm-up is background work and behaves so: it synthesises one chunk at a time and, before each, waits
while `busy()` says a person is in a turn (the server passes "any device listening to speech or
answering"), since piper runs on every core and a turn must not wait behind a phrase nobody asked for. What
it made is kept on disk per voice (`wren.speech.tts.phrase_store`), so a later start reads it back in
milliseconds instead of synthesising it again.

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
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from wren.speech.sentences import SentenceSplitter, clean_for_speech

if TYPE_CHECKING:
    from wren.speech.tts.phrase_store import PhraseStore

log = logging.getLogger(__name__)

# The longest chunk of the built-in agent's fixed replies is 87 characters (the second half of "I can tell you
# ..."); at 80 it was never cached, and 200 streaming devices synthesised it anew for every "what can you do"
# (docs/performance.md, round 22). A test keeps every fixed chunk under the bound; longer texts (an LLM's
# sentences) are mostly said once, and the byte bound keeps the cache small either way.
MAX_CHARS = 120
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
BUSY_POLL_S = 0.05  # the warm-up looks this often whether the turns in progress are over


class PhraseCache:
    def __init__(
        self, engine: Any, max_bytes: int = DEFAULT_MAX_BYTES, store: PhraseStore | None = None,
    ) -> None:
        self.engine = engine
        self.store = store  # where warm() keeps what it made, between starts (None: nowhere)
        self.name = engine.name
        self.sample_rate = engine.sample_rate
        self._max_bytes = max_bytes
        # Bound `max_bytes` of PCM; policy: drop the least recently used phrase (module docstring).
        self._audio: OrderedDict[str, tuple[bytes, ...]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.lead_in_hits = 0  # misses that started with a cached first clause

    def __getattr__(self, name: str) -> Any:  # the wrapped engine's own attributes (voice, config)
        return getattr(self.engine, name)

    @staticmethod
    def _key(text: str) -> str | None:
        key = " ".join(clean_for_speech(text or "").split())
        return key if key and len(key) <= MAX_CHARS else None

    def synthesize(self, text: str) -> Iterator[bytes]:
        key = self._key(text)
        if key is not None:
            cached = self._lookup(key)
            if cached is not None:
                self.hits += 1
                yield from cached
                return
            self.misses += 1
        chunks: list[bytes] = []
        lead_in, rest = self._lead_in(text)
        if lead_in is not None:  # its audio plays while the rest is synthesised
            self.lead_in_hits += 1
            chunks.extend(lead_in)
            yield from lead_in
        for pcm in self.engine.synthesize(text if lead_in is None else rest):
            chunks.append(pcm)
            yield pcm
        if key is not None:
            self._store(key, tuple(chunks))

    def _lookup(self, key: str) -> tuple[bytes, ...] | None:
        with self._lock:
            cached = self._audio.get(key)
            if cached is not None:
                self._audio.move_to_end(key)
            return cached

    def _lead_in(self, text: str) -> tuple[tuple[bytes, ...] | None, str]:
        """A cached first clause of `text` ("Okay," of "Okay, a timer for 10 minutes,"), and what follows
        it; (None, "") without one."""
        words = " ".join(clean_for_speech(text or "").split())
        comma = words.find(", ")
        if comma <= 0 or comma + 1 > MAX_CHARS or not words[comma + 2 :].strip():
            return None, ""
        head = self._key(words[: comma + 1])
        cached = self._lookup(head) if head is not None else None
        return (cached, words[comma + 2 :]) if cached is not None else (None, "")

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

    def starts_cached(self, text: str) -> bool:
        """Whether `synthesize(text)` begins with cached audio (the whole text, or its first clause): its
        first chunk then costs no synthesis."""
        return self.cached(text) or self._lead_in(text)[0] is not None

    def warm(self, replies: Iterable[str], busy: Callable[[], bool] | None = None) -> int:
        """Cache these replies' chunks as a reply would split them (blocking: run it in a thread): read from
        the store what it has, synthesise the rest one chunk at a time, each only once `busy()` is false,
        then store the lot. Returns how many chunks were synthesised."""
        started = time.perf_counter()
        # key → the chunk as a reply would say it (piper hears its punctuation; the key is cleaned text)
        wanted = {key: chunk for reply in replies for key, chunk in self._chunks(reply)}
        stored = self.store.load() if self.store is not None else {}
        read = 0
        for key in wanted:
            if key in stored and self._lookup(key) is None:
                self._store(key, stored[key])
                read += 1
        added, waited = 0, 0.0
        for chunk in wanted.values():
            if self.cached(chunk):
                continue
            while busy is not None and busy():
                time.sleep(BUSY_POLL_S)
                waited += BUSY_POLL_S
            for _ in self.synthesize(chunk):
                pass
            added += 1
        if self.store is not None and added:
            with self._lock:
                have = {key: self._audio[key] for key in wanted if key in self._audio}
            self.store.save(have)
        log.info("tts: %d fixed phrases ready in %.1f s: %d read from %s, %d synthesised (%.1f s of it "
                 "waiting for turns)", len(wanted), time.perf_counter() - started, read,
                 self.store.path if self.store is not None else "nowhere", added, waited)
        return added

    def _chunks(self, reply: str) -> Iterator[tuple[str, str]]:
        splitter = SentenceSplitter()
        for chunk in [*splitter.feed(reply), *splitter.flush()]:
            key = self._key(chunk)
            if key is not None:
                yield key, chunk
