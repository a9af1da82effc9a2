"""The ASR error type, in its own module so engines import it without importing the package `__init__`."""

from __future__ import annotations


class AsrError(RuntimeError):
    """A recogniser that cannot be loaded or used."""
