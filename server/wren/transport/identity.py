"""Who is connecting: device identity from handshake headers, or query parameters as a fallback.

Stock firmware sends `Device-Id`, `Client-Id`, `Authorization` and `Protocol-Version` headers
(reference §1.2). Clients that cannot set headers pass `?device-id=…&client-id=…&authorization=…
&protocol-version=…` instead, as xinnan accepts. Header names are case-insensitive (aiohttp's
CIMultiDict); query names are matched case-insensitively too.

Ids are checked before anything logs or keys on them (`id_problem`): at most 64 characters of printable
ASCII without spaces, quotes, backslashes or control characters. MACs, UUIDs and the console's
`browser-…` ids pass; a newline, a terminal escape or a megabyte of text does not. Logs show ids with
repr(), so even a passing id cannot look like another log line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from aiohttp import web

PROTOCOL_VERSIONS = (1, 2, 3)
MAX_ID_CHARS = 64
_ID_CHARS = re.compile(r"[!#-&(-\[\]-~]+")  # 0x21..0x7e without " ' and backslash


@dataclass(frozen=True)
class DeviceIdentity:
    device_id: str
    client_id: str
    authorization: str  # raw value, e.g. "Bearer <token>"; empty when absent
    protocol_version: int | None  # None when the client did not say (hello.version or 1 then)
    remote: str  # peer address, for logs only

    def describe(self) -> str:
        return f"device={self.device_id!r} client={self.client_id!r} from {self.remote}"


def id_problem(kind: str, value: str) -> str | None:
    """Why `value` cannot be a device or client id (`kind` names it in the reason), or None."""
    if len(value) > MAX_ID_CHARS:
        return f"{kind} longer than {MAX_ID_CHARS} characters"
    if not _ID_CHARS.fullmatch(value):
        return f"{kind} must be printable ASCII without spaces, quotes or backslashes"
    return None


def shown_id(value: str) -> str:
    """An id as logs show it, whatever a client sent: repr() (no raw control characters), cut short."""
    return repr(value[:MAX_ID_CHARS]) + (f" (+{len(value) - MAX_ID_CHARS} characters)"
                                         if len(value) > MAX_ID_CHARS else "")


def _lower_keys(query: Mapping[str, str]) -> dict[str, str]:
    return {key.lower(): value for key, value in query.items()}


def parse_protocol_version(value: str | None) -> int | None:
    """1, 2 or 3; anything else (absent, garbage, 7) counts as not given."""
    if value is None:
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        return None
    return number if number in PROTOCOL_VERSIONS else None


def identity_from_request(request: web.Request) -> DeviceIdentity:
    headers = request.headers
    query = _lower_keys(request.query)

    def pick(name: str) -> str:
        return (headers.get(name) or query.get(name.lower()) or "").strip()

    return DeviceIdentity(
        device_id=pick("Device-Id"),
        client_id=pick("Client-Id"),
        authorization=pick("Authorization"),
        protocol_version=parse_protocol_version(pick("Protocol-Version") or None),
        remote=request.remote or "?",
    )
