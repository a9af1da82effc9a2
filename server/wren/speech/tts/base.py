"""The TTS contract (`TtsEngine`) and error type, in their own module so engines import them without
importing the package `__init__` (which imports the engines: an import cycle)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol


class TtsError(RuntimeError):
    """A voice that cannot be loaded or text that cannot be synthesised."""


class TtsEngine(Protocol):
    name: str
    sample_rate: int

    def synthesize(self, text: str) -> Iterator[bytes]: ...
