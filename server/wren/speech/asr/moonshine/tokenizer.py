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
_WORD_START_BYTES = WORD_START.encode()


class MoonshineTokenizer:
    def __init__(self, pieces: Sequence[bytes]) -> None:
        self._pieces = list(pieces)
        self._ids = {piece: i for i, piece in enumerate(self._pieces) if i > END_ID and piece}
        self._longest = max((len(p) for p in self._ids), default=1)

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

    def encode(self, text: str) -> list[int]:
        """Ids for `text` by longest match over the vocabulary (bytes fall back to byte pieces). Not the
        trainer's exact BPE merge order, but the same ids for ordinary words (checked against the model's
        own output), which is what rescoring a hypothesis needs."""
        data = (WORD_START + WORD_START.join(text.split())).encode()
        ids: list[int] = []
        offset = 0
        while offset < len(data):
            for length in range(min(self._longest, len(data) - offset), 0, -1):
                piece_id = self._ids.get(data[offset : offset + length])
                if piece_id is not None:
                    ids.append(piece_id)
                    offset += length
                    break
            else:
                offset += 1  # a byte with no piece at all: skip it (never in this vocabulary)
        return ids

    def starts_word(self, token: int) -> bool:
        return 0 <= token < len(self._pieces) and self._pieces[token].startswith(_WORD_START_BYTES)

    def decode(self, ids: Sequence[int]) -> str:
        raw = b"".join(self._pieces[i] for i in ids if 2 < i < len(self._pieces))
        return raw.decode("utf-8", "replace").replace(WORD_START, " ").strip()
