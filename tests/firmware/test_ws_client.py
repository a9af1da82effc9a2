"""The firmware's WebSocket client (firmware/wren_device/ws.py) under the real MicroPython, against CPython
servers: the `websockets` library (a strict RFC 6455 peer) and a raw TCP server that writes exact frames."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import struct

import websockets
from websockets.frames import CloseCode

from tests.firmware.conftest import SCRIPTS, micropython

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


async def test_headers_masked_echo_and_client_close_against_websockets() -> None:
    seen: dict = {}
    done = asyncio.Event()

    async def handler(ws: websockets.ServerConnection) -> None:
        seen["headers"] = dict(ws.request.headers)
        # websockets closes with 1002 if a client frame is unmasked, so echoes prove the masking.
        await ws.send("hello")
        seen["text"] = await ws.recv()
        short, medium = os.urandom(100), os.urandom(1920)
        await ws.send(short)
        seen["short"] = (await ws.recv()) == short
        await ws.send(medium)
        seen["medium"] = (await ws.recv()) == medium
        await ws.send("!close")
        try:
            await ws.recv()
        except websockets.ConnectionClosed:
            seen["close"] = ws.close_code
        done.set()

    async with websockets.serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        async with micropython(str(SCRIPTS / "ws_probe.py"), f"ws://127.0.0.1:{port}/xiaozhi/v1/") as mp:
            await mp.wait_for("CLOSED-BY-CLIENT")
            await asyncio.wait_for(done.wait(), 10)
    h = seen["headers"]
    assert h["authorization"] == "Bearer tok"
    assert h["device-id"] == "aa:bb:cc:dd:ee:ff"
    assert h["client-id"] == "cid-1"
    assert h["protocol-version"] == "1"
    assert seen["text"] == "hello"
    assert seen["short"] and seen["medium"]
    assert seen["close"] == CloseCode.NORMAL_CLOSURE


async def test_server_ping_is_answered_with_pong_while_receiving() -> None:
    result: dict = {}

    async def handler(ws: websockets.ServerConnection) -> None:
        pong_waiter = await ws.ping(b"are-you-there")
        result["latency"] = await asyncio.wait_for(pong_waiter, 10)
        await ws.send("!close")
        await ws.wait_closed()

    async with websockets.serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        async with micropython(str(SCRIPTS / "ws_probe.py"), f"ws://127.0.0.1:{port}/") as mp:
            await mp.wait_for("CLOSED-BY-CLIENT")
    assert "latency" in result


async def test_server_close_is_echoed_and_reported_with_its_code() -> None:
    codes: dict = {}
    done = asyncio.Event()

    async def handler(ws: websockets.ServerConnection) -> None:
        await ws.close(4001, "go away")
        rcvd = ws.protocol.close_rcvd
        codes["received"] = rcvd.code if rcvd else None
        done.set()

    async with websockets.serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        async with micropython(str(SCRIPTS / "ws_probe.py"), f"ws://127.0.0.1:{port}/") as mp:
            m = await mp.wait_for(r"WSCLOSED (\d+) (.*)")
            await asyncio.wait_for(done.wait(), 10)
    assert m.group(1) == "4001" and m.group(2) == "go away"
    assert codes["received"] == 4001  # the client echoed the close frame


# ---- raw server: exact frames ----------------------------------------------------------------------


class RawPeer:
    """One accepted connection on a hand-written WebSocket server."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.r, self.w = reader, writer

    async def handshake(self) -> dict[str, str]:
        headers = {}
        await self.r.readline()
        while (line := await self.r.readline()) not in (b"\r\n", b""):
            k, _, v = line.decode().partition(":")
            headers[k.strip().lower()] = v.strip()
        accept = base64.b64encode(hashlib.sha1(headers["sec-websocket-key"].encode() + GUID).digest())
        self.w.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
        )
        await self.w.drain()
        return headers

    def send(self, opcode: int, payload: bytes, fin: bool = True, declared: int | None = None) -> None:
        n = len(payload) if declared is None else declared
        head = bytes([(0x80 if fin else 0) | opcode])
        if n < 126:
            head += bytes([n])
        elif n < 65536:
            head += bytes([126]) + struct.pack(">H", n)
        else:
            head += bytes([127]) + struct.pack(">Q", n)
        self.w.write(head + payload)

    async def frame(self) -> tuple[int, bool, bytes, bytes]:
        """(opcode, masked, mask key, unmasked payload) of the next client frame."""
        b0, b1 = await self.r.readexactly(2)
        n = b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack(">H", await self.r.readexactly(2))
        elif n == 127:
            (n,) = struct.unpack(">Q", await self.r.readexactly(8))
        masked = bool(b1 & 0x80)
        key = await self.r.readexactly(4) if masked else b""
        data = await self.r.readexactly(n)
        if masked:
            data = bytes(c ^ key[i & 3] for i, c in enumerate(data))
        return b0 & 0x0F, masked, key, data


async def run_raw(scenario, max_message: int = 16384) -> tuple[object, str]:
    result: dict = {}
    done = asyncio.Event()

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = RawPeer(reader, writer)
        try:
            await peer.handshake()
            result["value"] = await scenario(peer)
        except Exception as e:  # surfaced in the test's assertion
            result["value"] = e
        finally:
            done.set()
            writer.close()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        url = f"ws://127.0.0.1:{port}/"
        async with micropython(str(SCRIPTS / "ws_probe.py"), url, str(max_message)) as mp:
            await asyncio.wait_for(done.wait(), 20)
            await asyncio.sleep(0.2)
            return result["value"], mp.output()
    finally:
        server.close()
        await server.wait_closed()


async def test_every_client_frame_is_masked_with_a_fresh_key() -> None:
    async def scenario(peer: RawPeer):
        keys, payloads = [], []
        for i in range(5):
            peer.send(0x2, bytes([i]) * 300)
            op, masked, key, data = await peer.frame()
            assert op == 0x2 and masked
            keys.append(key)
            payloads.append(data)
        return keys, payloads

    (keys, payloads), _ = await run_raw(scenario)
    assert payloads == [bytes([i]) * 300 for i in range(5)]
    assert len(set(keys)) == 5


async def test_fragmented_message_with_interleaved_ping_is_reassembled() -> None:
    async def scenario(peer: RawPeer):
        peer.send(0x1, b"frag", fin=False)
        peer.send(0x0, b"mented-", fin=False)
        peer.send(0x9, b"p1")  # control frames may come between fragments
        peer.send(0x0, b"message")
        first = await peer.frame()
        second = await peer.frame()
        return first, second

    (pong, echo), _output = await run_raw(scenario)
    assert pong[0] == 0xA and pong[3] == b"p1"
    assert echo[0] == 0x1 and echo[3] == b"fragmented-message"


async def test_oversized_message_is_refused_with_1009_before_its_payload_arrives() -> None:
    async def scenario(peer: RawPeer):
        # Declares 1 MB and sends none of it: the client must decide on the declared length alone.
        peer.send(0x2, b"", declared=1 << 20)
        return await asyncio.wait_for(peer.frame(), 10)

    (op, masked, _key, data), output = await run_raw(scenario, max_message=4096)
    assert op == 0x8 and masked
    assert struct.unpack(">H", data[:2])[0] == 1009
    assert "WSCLOSED 1009" in output


async def test_fragments_adding_up_past_the_cap_are_refused_with_1009() -> None:
    async def scenario(peer: RawPeer):
        peer.send(0x2, b"a" * 3000, fin=False)
        peer.send(0x0, b"b" * 3000)
        return await asyncio.wait_for(peer.frame(), 10)

    (op, _m, _k, data), _output = await run_raw(scenario, max_message=4096)
    assert op == 0x8 and struct.unpack(">H", data[:2])[0] == 1009


async def test_masked_server_frame_is_a_protocol_error_1002() -> None:
    async def scenario(peer: RawPeer):
        peer.w.write(bytes([0x81, 0x80 | 2]) + b"\x01\x02\x03\x04" + b"hi")
        return await asyncio.wait_for(peer.frame(), 10)

    (op, _m, _k, data), _output = await run_raw(scenario)
    assert op == 0x8 and struct.unpack(">H", data[:2])[0] == 1002


async def test_handshake_with_a_wrong_accept_key_is_refused() -> None:
    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        writer.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: bm90LXRoZS1yaWdodC1rZXk=\r\n\r\n"
        )
        await writer.drain()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with micropython(str(SCRIPTS / "ws_probe.py"), f"ws://127.0.0.1:{port}/") as mp:
            m = await mp.wait_for(r"CONNECT-FAILED (\d+) (.*)")
    finally:
        server.close()
        await server.wait_closed()
    assert "Sec-WebSocket-Accept" in m.group(2)


async def test_wss_with_a_self_signed_certificate_echoes(tmp_path) -> None:
    import datetime
    import ssl

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256())
    )
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                          serialization.NoEncryption())
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    echoed: dict = {}

    async def handler(ws: websockets.ServerConnection) -> None:
        payload = os.urandom(1920)
        await ws.send(payload)
        echoed["ok"] = (await ws.recv()) == payload
        await ws.send("!close")
        await ws.wait_closed()

    async with websockets.serve(handler, "127.0.0.1", 0, ssl=ctx) as server:
        port = server.sockets[0].getsockname()[1]
        async with micropython(str(SCRIPTS / "ws_probe.py"), f"wss://127.0.0.1:{port}/xiaozhi/v1/") as mp:
            await mp.wait_for("CLOSED-BY-CLIENT")
    assert echoed["ok"]
