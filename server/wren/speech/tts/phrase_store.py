"""The phrase cache's audio on disk, so that a restarted server starts warm.

Warming the agent's fixed phrases costs a few seconds of piper on every core (≈50 phrases, 5–6 s on a 2-core
box, issue 11). At the first start that work competes with the first person's turn; at every later start it
would be the same work again for the same audio. So `PhraseCache.warm` keeps what it made in one file per
voice, and a later start only reads it back.

One file per voice identity (`engine.identity`: the engine, the voice file with its size and time, the speed,
the sampling noise): `<cache dir>/phrases/<sha256 of the identity, 16 hex>.bin`, under the cache dir of
`wren.speech.cache_dir`. A new voice, speed or piper version is a new identity, so stale audio is never
played. An engine without an identity (a remote Wyoming voice, which may change behind its name) is not
stored.

The format: `MAGIC`, a 4-byte little-endian length, a UTF-8 JSON header {"identity", "sample_rate",
"phrases": [[text, [chunk lengths]], ...]}, then the chunks' int16 PCM in order. Reading is lenient: a
missing, truncated or foreign file is an empty store (logged), never an error, since the cache only saves
time. Writing is atomic (a temporary file in the same folder, then `os.replace`), so servers starting
together never read half a file; the last writer wins, and each wrote a complete set.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import struct
import tempfile
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)

MAGIC = b"WRENPHR1"
_LENGTH = struct.Struct("<I")
MAX_HEADER_BYTES = 4 * 1024 * 1024  # a header past this is not ours

Phrases = Mapping[str, tuple[bytes, ...]]


class PhraseStore:
    def __init__(self, folder: Path, identity: str, sample_rate: int) -> None:
        digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
        self.path = Path(folder) / "phrases" / f"{digest}.bin"
        self.identity = identity
        self.sample_rate = sample_rate

    def load(self) -> dict[str, tuple[bytes, ...]]:
        """The stored phrases ({} when there is no usable file)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            log.warning("tts: cannot read the phrase store %s: %s", self.path, exc)
            return {}
        try:
            return self._parse(memoryview(data))
        except (ValueError, KeyError, TypeError, struct.error) as exc:  # json errors are ValueErrors
            log.warning("tts: ignoring the phrase store %s: %s", self.path, exc)
            return {}

    def _parse(self, data: memoryview) -> dict[str, tuple[bytes, ...]]:
        if bytes(data[: len(MAGIC)]) != MAGIC:
            raise ValueError("not a Wren phrase store")
        (size,) = _LENGTH.unpack_from(data, len(MAGIC))
        start = len(MAGIC) + _LENGTH.size
        if size > MAX_HEADER_BYTES or start + size > len(data):
            raise ValueError("truncated header")
        header = json.loads(bytes(data[start : start + size]).decode("utf-8"))
        if header["identity"] != self.identity or header["sample_rate"] != self.sample_rate:
            raise ValueError("made for another voice")  # a digest collision, or a hand-copied file
        offset, phrases = start + size, {}
        for text, lengths in header["phrases"]:
            chunks = []
            for length in lengths:
                if length <= 0 or offset + length > len(data):
                    raise ValueError("truncated audio")
                chunks.append(bytes(data[offset : offset + length]))
                offset += length
            phrases[str(text)] = tuple(chunks)
        return phrases

    def save(self, phrases: Phrases) -> bool:
        """Replace the stored phrases with these; False (logged) when the file cannot be written."""
        header = json.dumps({
            "identity": self.identity,
            "sample_rate": self.sample_rate,
            "phrases": [[text, [len(c) for c in chunks]] for text, chunks in phrases.items()],
        }).encode("utf-8")
        temporary = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("wb", dir=self.path.parent, prefix=".phrases-",
                                             delete=False) as handle:
                temporary = handle.name
                handle.write(MAGIC + _LENGTH.pack(len(header)) + header)
                for chunks in phrases.values():
                    for chunk in chunks:
                        handle.write(chunk)
            os.replace(temporary, self.path)
            return True
        except OSError as exc:
            log.warning("tts: cannot write the phrase store %s: %s", self.path, exc)
            if temporary is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
            return False
