"""Who is connecting: device identity from handshake headers, or query parameters as a fallback.

Stock firmware sends `Device-Id`, `Client-Id`, `Authorization` and `Protocol-Version` headers
(reference §1.2). Clients that cannot set headers pass `?device-id=…&client-id=…&authorization=…
&protocol-version=…` instead, as xinnan accepts. Header names are case-insensitive (aiohttp's
CIMultiDict); query names are matched case-insensitively too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aiohttp import web

PROTOCOL_VERSIONS = (1, 2, 3)


@dataclass(frozen=True)
class DeviceIdentity:
    device_id: str
    client_id: str
    authorization: str  # raw value, e.g. "Bearer <token>"; empty when absent
    protocol_version: int | None  # None when the client did not say (hello.version or 1 then)
    remote: str  # peer address, for logs only

    def describe(self) -> str:
        return f"device={self.device_id or '?'} client={self.client_id or '?'} from {self.remote}"


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
