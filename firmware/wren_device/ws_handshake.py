# The client side of the RFC 6455 opening handshake (notes §3.2 step 1), over ws:// or wss://.
import asyncio
import binascii
import hashlib
import os

from wren_device import net

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class HandshakeError(Exception):
    def __init__(self, code, reason):
        super().__init__(code, reason)
        self.code = code  # 1006 (no usable reply) or 1002 (a reply that breaks the protocol)
        self.reason = reason


def parse_url(url):
    # -> (secure, host, port, path) for ws:// and wss:// URLs.
    return net.parse_url(url, ("ws://", "wss://"))


async def handshake(url, headers, ssl_context=None):
    # -> (reader, writer) of an upgraded connection. Requires 101, Upgrade: websocket and the right
    # Sec-WebSocket-Accept; offers no extensions, so RSV bits must stay 0 afterwards.
    secure, host, port, path = parse_url(url)
    if secure:
        ctx = ssl_context or net.client_context()  # config.json "tls_ca" pins the server's certificate
        r, w = await asyncio.open_connection(host, port, ssl=ctx, server_hostname=host)
    else:
        r, w = await asyncio.open_connection(host, port)
    try:
        await _upgrade(r, w, host, port, path, headers)
    except BaseException:
        w.close()
        try:
            await w.wait_closed()
        except OSError:
            pass
        raise
    return r, w


async def _upgrade(r, w, host, port, path, headers):
    key = binascii.b2a_base64(os.urandom(16)).strip()
    lines = [
        "GET %s HTTP/1.1" % path,
        "Host: " + (host if port in (80, 443) else "%s:%d" % (host, port)),
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: " + key.decode(),
        "Sec-WebSocket-Version: 13",
    ]
    for name in headers:
        lines.append("%s: %s" % (name, headers[name]))
    lines.append("\r\n")
    try:
        w.write("\r\n".join(lines).encode())
        await w.drain()
        status = await r.readline()
    except OSError as e:
        raise HandshakeError(1006, "connect failed: %s" % e)
    if b"HTTP/1.1 101" not in status:  # the literal text the official client looks for (§1.2)
        raise HandshakeError(1006, "handshake refused: " + status.decode().strip())
    accept = upgrade = None
    while True:
        line = await r.readline()
        if not line or line == b"\r\n":
            break
        colon = line.find(b":")
        if colon > 0:
            name = line[:colon].strip().lower()
            value = line[colon + 1 :].strip()
            if name == b"sec-websocket-accept":
                accept = value
            elif name == b"upgrade":
                upgrade = value.lower()
    expected = binascii.b2a_base64(hashlib.sha1(key + _GUID).digest()).strip()
    if accept != expected or upgrade != b"websocket":
        raise HandshakeError(1002, "bad handshake reply (Sec-WebSocket-Accept/Upgrade)")
