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
        """Ids for `text` as SentencePiece BPE would split it: each word ("▁" + word) starts as characters
        and the adjacent pair whose merge is a vocabulary piece with the lowest id (the highest-scored
        merge: the vocabulary is stored in score order) is merged until none is left. The model gives
        other splittings of the same word far lower probabilities, so rescoring needs this one."""
        ids: list[int] = []
        for word in text.split():
            ids.extend(self._encode_word(WORD_START + word))
        return ids

    def _encode_word(self, word: str) -> list[int]:
        symbols = [ch.encode() for ch in word]
        while len(symbols) > 1:
            best, best_id = -1, len(self._pieces)
            for i in range(len(symbols) - 1):
                piece_id = self._ids.get(symbols[i] + symbols[i + 1])
                if piece_id is not None and piece_id < best_id:
                    best, best_id = i, piece_id
            if best < 0:
                break
            symbols[best : best + 2] = [symbols[best] + symbols[best + 1]]
        ids: list[int] = []
        for symbol in symbols:
            piece_id = self._ids.get(symbol)
            if piece_id is not None:
                ids.append(piece_id)
            else:  # no piece for this character: its UTF-8 bytes (byte-fallback pieces)
                ids.extend(self._ids[bytes([b])] for b in symbol if bytes([b]) in self._ids)
        return ids

    def piece(self, token: int) -> str:
        """The text of one token ("▁light")."""
        return self._pieces[token].decode("utf-8", "replace") if 0 <= token < len(self._pieces) else ""

    def starts_word(self, token: int) -> bool:
        return 0 <= token < len(self._pieces) and self._pieces[token].startswith(_WORD_START_BYTES)

    def decode(self, ids: Sequence[int]) -> str:
        raw = b"".join(self._pieces[i] for i in ids if 2 < i < len(self._pieces))
        return raw.decode("utf-8", "replace").replace(WORD_START, " ").strip()
