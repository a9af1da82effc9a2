# Echo client over wren_device.ws: every message received is sent back with the same opcode; the text "!close"
# makes the client close (1000). Prints one line per event for the test to read.
import asyncio
import sys

from wren_device.ws import WebSocket, WsClosed


async def main(url, max_message):
    ws = WebSocket(max_message)
    headers = {"Device-Id": "aa:bb:cc:dd:ee:ff", "Client-Id": "cid-1", "Authorization": "Bearer tok",
               "Protocol-Version": "1"}
    try:
        await ws.connect(url, headers)
    except WsClosed as e:
        print("CONNECT-FAILED", e.code, e.reason)
        return
    print("CONNECTED")
    try:
        while True:
            op, data = await ws.recv()
            b = bytes(data)
            print("RECV", op, len(b), b[:40])
            if b == b"!close":
                await ws.close(1000, "client bye")
                print("CLOSED-BY-CLIENT")
                return
            buf = bytearray(b)
            if op == 1:
                await ws.send_text(buf)
            else:
                await ws.send_binary(buf, len(buf))
    except WsClosed as e:
        print("WSCLOSED", e.code, e.reason)


asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 16384))
