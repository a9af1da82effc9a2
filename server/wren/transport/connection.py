"""The session's view of an aiohttp WebSocket: send text/bytes, close with a code and a reason."""

from __future__ import annotations

import logging

from aiohttp import web

from wren.session.services import ConnectionClosed

log = logging.getLogger(__name__)

MAX_REASON_BYTES = 123  # RFC 6455: the close reason must fit a 125-byte control frame with the code


def close_reason(text: str) -> bytes:
    return text.encode()[:MAX_REASON_BYTES]


class WebSocketConnection:
    def __init__(self, ws: web.WebSocketResponse) -> None:
        self._ws = ws

    @property
    def closed(self) -> bool:
        return self._ws.closed

    async def send_text(self, text: str) -> None:
        if self._ws.closed:
            raise ConnectionClosed()
        try:
            await self._ws.send_str(text)
        except (ConnectionError, RuntimeError) as exc:  # aiohttp raises both for a dying socket
            raise ConnectionClosed(str(exc)) from None

    async def send_bytes(self, data: bytes) -> None:
        if self._ws.closed:
            raise ConnectionClosed()
        try:
            await self._ws.send_bytes(data)
        except (ConnectionError, RuntimeError) as exc:
            raise ConnectionClosed(str(exc)) from None

    async def close(self, code: int, reason: str) -> None:
        if not self._ws.closed:
            try:
                await self._ws.close(code=code, message=close_reason(reason))
            except (ConnectionError, RuntimeError) as exc:
                log.debug("close failed: %s", exc)
