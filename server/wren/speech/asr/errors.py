"""The ASR error types, in their own module: engines import them without importing the package `__init__`."""

from __future__ import annotations


class AsrError(RuntimeError):
    """A recogniser that cannot be loaded or used."""


class AsrUnavailable(AsrError):
    """No recogniser can be opened right now, though the engine is fine: the stream ceiling
    (`[limits] asr_streams`, or a worker process's share of it) is reached, or no worker process is
    running (one is being restarted). The utterance is not listened to; the session says so (docs/server.md,
    "Limits") instead of treating it as an utterance without words."""
