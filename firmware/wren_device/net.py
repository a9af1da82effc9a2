# Wi-Fi connect with retries (through the hal's WLAN) and the OTA/activation request (reference §6).
import asyncio
import json

from wren_device.log import log


async def wifi_connect(wlan, networks, attempts=3, timeout_ms=15000):
    # Tries every configured network in order, `attempts` rounds, doubling the pause between rounds.
    # Returns the SSID it joined. The host WLAN is the loopback stand-in from hal/host/network.py.
    wlan.active(True)
    if wlan.isconnected():
        return wlan.config("ssid")
    if not networks:
        raise OSError("no Wi-Fi network configured (config.json \"wifi\")")
    pause = 1000
    for attempt in range(1, attempts + 1):
        for net in networks:
            ssid = net.get("ssid")
            log("wifi", "connecting to", ssid, "(attempt %d/%d)" % (attempt, attempts))
            try:
                wlan.connect(ssid, net.get("password", ""))
            except OSError as e:
                log("wifi", "connect failed:", e)
                continue
            waited = 0
            while not wlan.isconnected() and waited < timeout_ms:
                await asyncio.sleep_ms(100)
                waited += 100
            if wlan.isconnected():
                log("wifi", "connected to", ssid, "ip", wlan.ifconfig()[0])
                return ssid
            wlan.disconnect()
        await asyncio.sleep_ms(pause)
        pause *= 2
    raise OSError("could not join any configured Wi-Fi network")


# The server certificate to trust for https:// and wss:// (config.json "tls_ca": a PEM or DER file): with
# it the server is checked; without it the connection is encrypted but not authenticated (no CA bundle
# fits on the board).
_ca = None


def configure_tls(path):
    global _ca
    if not path:
        _ca = None
        return
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(b"-----BEGIN"):  # PEM: mbedtls here takes DER, so the base64 body is decoded
        import binascii

        body = b"".join(line for line in data.split(b"\n") if line and not line.startswith(b"-----"))
        data = binascii.a2b_base64(body)
    _ca = data


def client_context():
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if _ca is None:
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx.load_verify_locations(cadata=_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


# scheme -> (secure, default port); one parser for the OTA request (http) and the WebSocket (ws).
_SCHEMES = (("https://", True, 443), ("http://", False, 80), ("wss://", True, 443), ("ws://", False, 80))


def parse_url(url, schemes=("http://", "https://")):
    # -> (secure, host, port, path). `schemes` lists the prefixes the caller accepts.
    for prefix, secure, port in _SCHEMES:
        if prefix in schemes and url.startswith(prefix):
            rest = url[len(prefix) :]
            break
    else:
        raise ValueError("not a " + " or ".join(schemes) + " URL: " + url)
    slash = rest.find("/")
    hostport, path = (rest, "/") if slash < 0 else (rest[:slash], rest[slash:])
    colon = hostport.rfind(":")
    if colon > 0:
        port = int(hostport[colon + 1 :])
        hostport = hostport[:colon]
    return secure, hostport, port, path


async def http_post_json(url, body, headers, timeout_ms=10000):
    # -> (status, parsed JSON or None). HTTP/1.0-style: Connection: close, body read to EOF.
    return await asyncio.wait_for_ms(_post(url, body, headers), timeout_ms)


async def _post(url, body, headers):
    secure, host, port, path = parse_url(url)
    if secure:
        r, w = await asyncio.open_connection(host, port, ssl=client_context(), server_hostname=host)
    else:
        r, w = await asyncio.open_connection(host, port)
    data = json.dumps(body).encode()
    try:
        head = ["POST %s HTTP/1.1" % path, "Host: %s:%d" % (host, port), "Connection: close",
                "Content-Length: %d" % len(data)]
        for k in headers:
            head.append("%s: %s" % (k, headers[k]))
        w.write(("\r\n".join(head) + "\r\n\r\n").encode())
        w.write(data)
        await w.drain()
        status_line = await r.readline()
        parts = status_line.split()
        if len(parts) < 2:
            raise OSError("bad HTTP reply")
        status = int(parts[1])
        length = -1
        chunked = False
        while True:
            line = await r.readline()
            if not line or line == b"\r\n":
                break
            low = line.lower()
            if low.startswith(b"content-length:"):
                length = int(line[15:].strip())
            elif low.startswith(b"transfer-encoding:") and b"chunked" in low:
                chunked = True
        if chunked:
            payload = b""
            while True:
                size = int((await r.readline()).strip(), 16)
                if not size:
                    break
                payload += await r.readexactly(size)
                await r.readline()
        elif length >= 0:
            payload = await r.readexactly(length)
        else:
            payload = await r.read(-1)
    finally:
        w.close()
        await w.wait_closed()
    try:
        return status, json.loads(payload)
    except ValueError:
        return status, None


async def ota_check(url, identity, system_info, attempts=10, first_pause_ms=10000, max_pause_ms=60000,
                    max_total_ms=300000, on_code=None):
    # POST the system info (§6.1/§6.2) -> the reply (a dict: websocket, server_time, ...) or None. A
    # failure is retried after 10 s, doubling as the official firmware does but capped at max_pause_ms (a
    # minute), for at most `attempts` tries and max_total_ms of pauses (5 min: 10+20+40+60+60+60 s, 7
    # tries; then the caller falls back to server_url or what state.json kept). A reply with `activation`
    # (a server that pairs devices by code) is not a failure: the code is shown (on_code(code, message):
    # wren_device.pairing shows and says it), the server is polled until the owner approves it, and the
    # check runs again, as long as that takes.
    headers = {
        "Activation-Version": "1",
        "Device-Id": identity["device_id"],
        "Client-Id": identity["client_id"],
        "User-Agent": "%s/%s" % (identity["board"], identity["version"]),
        "Accept-Language": identity["language"],
        "Content-Type": "application/json",
    }
    pause = first_pause_ms
    paused = failures = 0
    while failures < attempts:
        try:
            status, reply = await http_post_json(url, system_info, headers)
        except (OSError, asyncio.TimeoutError, ValueError) as e:
            status, reply = 0, None
            log("ota", "attempt %d failed: %r" % (failures + 1, e))
        if status == 200 and isinstance(reply, dict):
            activation = reply.get("activation")
            if isinstance(activation, dict):
                await activate(url, headers, activation, on_code=on_code)
                continue
            ws = reply.get("websocket")
            if isinstance(ws, dict) and isinstance(ws.get("url"), str):
                log("ota", "websocket url", ws["url"])
            else:
                log("ota", "reply has no websocket section")
            return reply
        if status:
            log("ota", "attempt %d: HTTP %d" % (failures + 1, status))
        failures += 1
        if failures >= attempts or paused + pause > max_total_ms:
            break
        log("ota", "retry in %d ms" % pause)
        await asyncio.sleep_ms(pause)
        paused += pause
        pause = min(pause * 2, max_pause_ms)
    log("ota", "giving up after %d attempts" % failures)
    return None


def websocket_of(reply):
    # The OTA reply's websocket section {url, token, version}, or None.
    ws = reply.get("websocket") if isinstance(reply, dict) else None
    return ws if isinstance(ws, dict) and isinstance(ws.get("url"), str) else None


def server_clock(reply):
    # The OTA reply's server_time -> (Unix time in ms, timezone offset in minutes), or None.
    st = reply.get("server_time") if isinstance(reply, dict) else None
    if not isinstance(st, dict) or not isinstance(st.get("timestamp"), (int, float)):
        return None
    offset = st.get("timezone_offset", 0)
    return int(st["timestamp"]), int(offset) if isinstance(offset, (int, float)) else 0


async def activate(url, headers, activation, polls=10, on_code=None):
    # Show the pairing code (the log, and on_code: the display and the speaker), then poll
    # <ota>activate: 200 = approved, 202 = waiting (again in 3 s), anything else again in 10 s (§6.3).
    code = str(activation.get("code", ""))
    log("ota", "pairing code %s: approve it on the server (wren devices approve %s)" % (code, code))
    if on_code is not None:
        try:
            on_code(code, activation.get("message") or "")
        except Exception as e:  # showing or saying the code must never stop pairing
            log("ota", "showing the code failed: %r" % e)
    if not activation.get("challenge"):
        await asyncio.sleep_ms(10000)  # no challenge: only the OTA check is repeated
        return
    target = url + "activate" if url.endswith("/") else url + "/activate"
    for _ in range(polls):
        try:
            status, _ = await http_post_json(target, {}, headers)
        except (OSError, asyncio.TimeoutError, ValueError):
            status = 0
        if status == 200:
            log("ota", "paired")
            return
        await asyncio.sleep_ms(3000 if status == 202 else 10000)
