"""Device admission: `pair` (the default: devices the owner approved by their code, kept by the device
registry of wren.store), `token` (HMAC-signed tokens bound to a device, plus an allowlist) or `open`
(anyone, for a lab).

Token format: `<signature>.<ts>`, sent as `Authorization: Bearer <token>`, where
    signature = base64url(HMAC-SHA256(secret, message)) without padding (43 characters)
    message   = JSON of ["wren-token-v2", client_id, device_id, ts], compact, ASCII-escaped
`ts` is the signing time in Unix seconds; a token is valid for `auth.token_ttl_s` after it. The JSON list
makes the signed message unambiguous: the former `"client_id|device_id|ts"` signed the same bytes for
client `a|b` + device `c` and client `a` + device `b|c`. Tokens of that scheme no longer verify (new ones:
`wren token`). Devices in `auth.allowed_devices` skip the check.

In `pair` mode a valid signature is not enough: the device id must be paired with that client id and the
token must be the one its pairing holds (by SHA-256), so `wren devices revoke` ends it at once. The web
console's own `browser-…` ids are the exception: the console mints their tokens for the browsers it admits,
and they name no device. The secret is `[auth] secret`, else one made at the first start in the data dir.

Verification never raises: anything a client can send (garbage, wrong field counts, non-ASCII, huge
values, non-digit timestamps) is a refusal with a reason, sent in the close frame.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import re
import time
from dataclasses import dataclass

from wren.config import AuthConfig, ConfigError
from wren.store.records import DeviceRegistry, token_digest
from wren.transport.identity import DeviceIdentity

log = logging.getLogger(__name__)

AUTH_MODES = ("pair", "token", "open")
CONSOLE_ID_PREFIX = "browser-"  # ids the web console mints tokens for (wren.transport.console)
CLOCK_SKEW_S = 300  # tolerate a signer whose clock runs a little ahead of ours
TOKEN_DOMAIN = "wren-token-v2"  # first element of the signed message: a token means nothing elsewhere
MAX_AUTHORIZATION_CHARS = 256  # a valid header is ~63 characters; anything far longer is refused unread
MIN_SECRET_BYTES = 16
EXAMPLE_SECRETS = frozenset({"change-me"})  # secrets printed in the docs: never a real one
_TOKEN = re.compile(r"([A-Za-z0-9_-]{43})\.([0-9]{1,12})")  # ASCII only: str.isdigit() accepts "²"


def signed_message(client_id: str, device_id: str, ts: int) -> bytes:
    """The bytes the HMAC covers: a JSON list, so no id can be read as part of another."""
    return json.dumps([TOKEN_DOMAIN, client_id, device_id, int(ts)], ensure_ascii=True,
                      separators=(",", ":")).encode("ascii")


def _signature(secret: str, client_id: str, device_id: str, ts: int) -> str:
    mac = hmac.new(secret.encode(), signed_message(client_id, device_id, ts), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


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


def check_secret(secret: str) -> None:
    """Refuse a token secret that is missing, the docs' example, or too short to resist guessing."""
    if not secret:
        raise ConfigError("auth.mode = token needs auth.secret (WREN_AUTH_SECRET)")
    if secret.strip() in EXAMPLE_SECRETS:
        raise ConfigError(f"auth.secret is the documentation's example {secret.strip()!r}: set your own "
                          "(e.g. the output of `openssl rand -hex 32`)")
    size = len(secret.encode())
    if size < MIN_SECRET_BYTES:
        raise ConfigError(f"auth.secret is too short ({size} bytes; token mode needs at least "
                          f"{MIN_SECRET_BYTES}, e.g. the output of `openssl rand -hex 32`)")


def check_auth_config(config: AuthConfig) -> None:
    """Refuse to start with an auth setup that cannot work or is trivially forged."""
    if config.mode not in AUTH_MODES:
        raise ConfigError(f"auth.mode must be one of {', '.join(AUTH_MODES)} (got {config.mode!r})")
    if config.mode == "token" or (config.mode == "pair" and config.secret):
        check_secret(config.secret)


def parse_bearer(header: str) -> tuple[str, int] | str:
    """`Bearer <signature>.<ts>` → (signature, ts), or the reason it cannot be a token."""
    if not header:
        return "missing Authorization: Bearer <token>"
    if len(header) > MAX_AUTHORIZATION_CHARS:
        return f"Authorization longer than {MAX_AUTHORIZATION_CHARS} characters"
    if not header.isascii():
        return "malformed token: not ASCII"
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return "Authorization must be 'Bearer <token>'"
    match = _TOKEN.fullmatch(token.strip())
    if match is None:
        return "malformed token: expected <43 base64url characters>.<unix seconds>"
    return match.group(1), int(match.group(2))


class Authenticator:
    def __init__(self, config: AuthConfig, registry: DeviceRegistry | None = None, secret: str = "") -> None:
        check_auth_config(config)
        if config.mode == "pair" and registry is None:
            raise ConfigError("auth.mode = pair needs the device registry (a data dir)")
        self.config = config
        self.registry = registry if config.mode == "pair" else None
        self.secret = config.secret or secret
        self._allowed = {d.strip().lower() for d in config.allowed_devices if d.strip()}

    @property
    def signs_tokens(self) -> bool:
        return self.config.mode in ("token", "pair")

    def sign(self, client_id: str, device_id: str, ts: int | None = None) -> str:
        """A token in token and pair mode; empty in open mode (the device then sends no Authorization)."""
        if not self.signs_tokens:
            return ""
        return sign_token(self.secret, client_id, device_id, ts)

    def is_allowed(self, device_id: str) -> bool:
        """Listed in `auth.allowed_devices` (compared case-insensitively, as MACs are written both ways)."""
        return device_id.lower() in self._allowed

    def check(self, identity: DeviceIdentity, now: float | None = None) -> AuthResult:
        if self.config.mode == "open":
            return AuthResult(True, "open mode")
        if self.is_allowed(identity.device_id):
            return AuthResult(True, "allowed device")
        verdict = self.check_token(identity, now)
        if not verdict.ok or self.registry is None or identity.device_id.startswith(CONSOLE_ID_PREFIX):
            return verdict
        return self._check_pairing(identity)

    def _check_pairing(self, identity: DeviceIdentity) -> AuthResult:
        try:
            paired = self.registry.paired(identity.device_id) if self.registry else None
        except Exception as exc:  # the registry file is unreadable: refuse, never fail the handshake
            log.warning("pairing check failed for %s: %s: %s", identity.describe(), type(exc).__name__, exc)
            return AuthResult(False, "pairing could not be checked")
        if paired is None:
            return AuthResult(False, "device not paired (approve its code: wren devices approve CODE)")
        if paired.client_id != identity.client_id:
            return AuthResult(False, "device paired with another client id")
        token = identity.authorization.strip().partition(" ")[2].strip()
        if not hmac.compare_digest(paired.token_sha256, token_digest(token)):
            return AuthResult(False, "token revoked or replaced")
        return AuthResult(True, "paired device")

    def check_token(self, identity: DeviceIdentity, now: float | None = None) -> AuthResult:
        """The identity's bearer token alone (no allowlist); never raises."""
        try:
            return self._check_token(identity, time.time() if now is None else now)
        except Exception as exc:  # a bug, not an input: still a refusal, never a failed handshake
            log.warning("token check failed for %s: %s: %s", identity.describe(), type(exc).__name__, exc)
            return AuthResult(False, "token could not be checked")

    def _check_token(self, identity: DeviceIdentity, now: float) -> AuthResult:
        parsed = parse_bearer(identity.authorization)
        if isinstance(parsed, str):
            return AuthResult(False, parsed)
        signature, ts = parsed
        expected = _signature(self.secret, identity.client_id, identity.device_id, ts)
        if not hmac.compare_digest(signature, expected):
            return AuthResult(False, "bad token signature for this device")
        if ts > now + CLOCK_SKEW_S:
            return AuthResult(False, "token issued in the future")
        if now - ts > self.config.token_ttl_s:
            return AuthResult(False, "token expired")
        return AuthResult(True, "valid token")
