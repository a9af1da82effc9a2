"""The ASR contract every engine meets (`AsrEngine` hands out `AsrStream`s).

In its own module, not the package `__init__`, so engines and the worker processes can name the contract
without importing the package that imports them (no import cycle).
"""

from __future__ import annotations

from typing import Protocol


class AsrStream(Protocol):
    def accept(self, pcm: bytes) -> None: ...

    def partial(self) -> str: ...

    # Optional (engines that decode whole utterances, e.g. moonshine): the session's VAD heard a pause /
    # speech again. Callers check with getattr; streaming engines do not need them.
    # def pause(self) -> None: ...
    # def resume(self) -> None: ...

    def finish(self) -> str: ...

    def close(self) -> None: ...


class AsrEngine(Protocol):
    name: str
    sample_rate: int
    # Optional: True when open_stream, accept, pause/resume, bias, close and finish_later (no finish()) all
    # return at once, never waiting for a decode or a socket, so the server may feed its streams on the
    # event loop (`[server] uplink_on_loop`). Absent = False.
    # feeds_without_blocking: bool

    def open_stream(self, speaker: str | None = None) -> AsrStream: ...
