"""What people said stays out of the logs unless the owner asks for it (`[server] log_transcripts`).

Transcripts, typed queries, replies being announced and reminder texts are personal: at INFO they are
logged as their length only ("<23 chars>"), so a log shared for a bug report does not carry a household's
conversations. `log_transcripts = true` (or `WREN_SERVER_LOG_TRANSCRIPTS=1`) logs them as said, for
debugging recognition.
"""

from __future__ import annotations

_logged = False


def log_transcripts(enabled: bool) -> None:
    global _logged
    _logged = bool(enabled)


def said(text: str) -> str:
    """`text` for a log line: itself (repr) when transcripts are logged, else its length."""
    return repr(text) if _logged else f"<{len(text)} chars>"
