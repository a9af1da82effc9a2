# Push-to-talk release on a real Device (host board) whose channel, while `listen stop` is being sent, hands
# the device a `tts start` (a fast server; the socket's reader runs during the send's await). Prints
# "STATE <state>" after the release: the reply must find the device speaking, not idle.
import asyncio
import json

from hal.host.board import HostBoard
from wren_device import config
from wren_device.device import LISTENING, Device

cfg = dict(config.DEFAULTS)
cfg["listen_mode"] = "manual"
board = HostBoard(cfg)
identity = {"device_id": "02:00:00:00:00:01", "client_id": "cid", "board": "wren-test", "version": "0.1.0",
            "language": "en-US"}
dev = Device(cfg, board, identity, "ws://127.0.0.1:1/", "", 1, "sim")
dev.state = LISTENING


async def send(msg):
    if msg.get("type") == "listen" and msg.get("state") == "stop":
        await dev.on_frame(1, json.dumps({"type": "tts", "state": "start", "session_id": ""}))
    return True


dev.channel.send = send
asyncio.run(dev._handle_button("release"))
print("STATE", dev.state)
