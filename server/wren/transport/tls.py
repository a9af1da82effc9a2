"""Optional TLS (`[server] tls_cert` + `tls_key`): the same port then speaks https:// and wss:// only.

For a LAN box this is mostly about eavesdroppers on Wi-Fi: tokens, audio and transcripts travel in the
clear otherwise. The certificate may be self-signed; the Wren firmware then either pins it (`tls_ca` in
its config.json) or, without one, encrypts without checking who answers (docs/firmware.md). Devices learn
the `wss://` URL from the OTA answer, which follows the request's scheme.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from wren.config import ConfigError, ServerConfig


def server_tls_context(config: ServerConfig) -> ssl.SSLContext | None:
    """The listening socket's TLS context, or None without a certificate; a half or broken setting is a
    ConfigError naming the file."""
    if not config.tls_cert and not config.tls_key:
        return None
    if not (config.tls_cert and config.tls_key):
        raise ConfigError("server.tls_cert and server.tls_key go together (PEM files); set both or neither")
    for name, value in (("tls_cert", config.tls_cert), ("tls_key", config.tls_key)):
        if not Path(value).expanduser().is_file():
            raise ConfigError(f"server.{name}: no such file: {value}")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2  # what mbedtls on the ESP32 speaks
    try:
        context.load_cert_chain(Path(config.tls_cert).expanduser(), Path(config.tls_key).expanduser())
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise ConfigError(f"server.tls_cert/tls_key cannot be used: {exc}") from None
    return context
