"""Device admission: `open` (anyone) or `token` (HMAC-signed tokens bound to a device, plus an allowlist).

Token format (xinnan-compatible, reference §1.2):
    base64url(HMAC-SHA256(secret, "client_id|device_id|ts")) without padding + "." + ts
sent as `Authorization: Bearer <token>`. `ts` is the signing time in Unix seconds; a token is valid
for `auth.token_ttl_s` after it. Devices in `auth.allowed_devices` skip the check.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from dataclasses import dataclass

from wren.config import AuthConfig, ConfigError
from wren.transport.identity import DeviceIdentity

AUTH_MODES = ("open", "token")
CLOCK_SKEW_S = 300  # tolerate a signer whose clock runs a little ahead of ours


def _signature(secret: str, client_id: str, device_id: str, ts: int) -> str:
    mac = hmac.new(secret.encode(), f"{client_id}|{device_id}|{ts}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def sign_token(secret: str, client_id: str, device_id: str, ts: int | None = None) -> str:
    """A token for this device (without the `Bearer ` prefix)."""
    if not secret:
        raise ConfigError("auth.secret is empty: set [auth] secret or WREN_AUTH_SECRET to sign tokens")
    ts = int(time.time()) if ts is None else int(ts)
    return f"{_signature(secret, client_id, device_id, ts)}.{ts}"


@dataclass(frozen=True)
class AuthResult:
    ok: bool
    reason: str  # why it was admitted or refused; refused reasons are sent in the close frame


def check_auth_config(config: AuthConfig) -> None:
    """Refuse to start with an auth setup that cannot work."""
    if config.mode not in AUTH_MODES:
        raise ConfigError(f"auth.mode must be one of {', '.join(AUTH_MODES)} (got {config.mode!r})")
    if config.mode == "token" and not config.secret:
        raise ConfigError("auth.mode = token needs auth.secret (WREN_AUTH_SECRET)")


class Authenticator:
    def __init__(self, config: AuthConfig) -> None:
        check_auth_config(config)
        self.config = config
        self._allowed = {d.strip().lower() for d in config.allowed_devices if d.strip()}

    def sign(self, client_id: str, device_id: str) -> str:
        """A fresh token in token mode; empty in open mode (the device then sends no Authorization)."""
        if self.config.mode != "token":
            return ""
        return sign_token(self.config.secret, client_id, device_id)

    def check(self, identity: DeviceIdentity, now: float | None = None) -> AuthResult:
        if self.config.mode == "open":
            return AuthResult(True, "open mode")
        if identity.device_id.lower() in self._allowed:
            return AuthResult(True, "allowed device")
        return self._check_token(identity, time.time() if now is None else now)

    def _check_token(self, identity: DeviceIdentity, now: float) -> AuthResult:
        header = identity.authorization
        if not header:
            return AuthResult(False, "missing Authorization: Bearer <token>")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return AuthResult(False, "Authorization must be 'Bearer <token>'")
        signature, dot, ts_text = token.strip().rpartition(".")
        if not dot or not signature or not ts_text.isdigit():
            return AuthResult(False, "malformed token")
        ts = int(ts_text)
        expected = _signature(self.config.secret, identity.client_id, identity.device_id, ts)
        if not hmac.compare_digest(signature, expected):
            return AuthResult(False, "bad token signature for this device")
        if ts > now + CLOCK_SKEW_S:
            return AuthResult(False, "token issued in the future")
        if now - ts > self.config.token_ttl_s:
            return AuthResult(False, "token expired")
        return AuthResult(True, "valid token")
