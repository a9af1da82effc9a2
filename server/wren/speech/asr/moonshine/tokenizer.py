"""Moonshine's `tokenizer.bin`: the vocabulary as length-prefixed byte strings, in id order.

SentencePiece style: U+2581 ("▁") marks the start of a word; ids 1 and 2 are start and end of text.
A length byte with its top bit set continues into the next byte (little-endian base-128), so pieces
longer than 127 bytes are read correctly too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

START_ID = 1
END_ID = 2
WORD_START = "\u2581"


class MoonshineTokenizer:
    def __init__(self, pieces: Sequence[bytes]) -> None:
        self._pieces = list(pieces)

    @classmethod
    def load(cls, path: Path) -> MoonshineTokenizer:
        data = path.read_bytes()
        pieces: list[bytes] = []
        offset = 0
        while offset < len(data):
            length, shift = 0, 0
            while True:
                byte = data[offset]
                offset += 1
                length |= (byte & 0x7F) << shift
                shift += 7
                if not byte & 0x80:
                    break
            pieces.append(data[offset : offset + length])
            offset += length
        return cls(pieces)

    def __len__(self) -> int:
        return len(self._pieces)

    def decode(self, ids: Sequence[int]) -> str:
        raw = b"".join(self._pieces[i] for i in ids if 2 < i < len(self._pieces))
        return raw.decode("utf-8", "replace").replace(WORD_START, " ").strip()
