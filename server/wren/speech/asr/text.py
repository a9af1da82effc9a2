"""Normalising recogniser output: lowercase words, no filler/noise tokens, no pronunciation variants."""

from __future__ import annotations

import re

_VARIANT = re.compile(r"\(\d+\)$")  # cmudict alternate pronunciations: "read(2)"


def _is_noise(token: str) -> bool:
    # <s>, </s>, <sil>, [NOISE], [SPEECH], ++GARBAGE++, +BREATH+ ...
    return token[:1] in "<[+" or token in ("[unk]", "<unk>")


def clean_transcript(text: str) -> str:
    words = []
    for token in text.split():
        if _is_noise(token):
            continue
        words.append(_VARIANT.sub("", token).lower())
    return " ".join(w for w in words if w)
