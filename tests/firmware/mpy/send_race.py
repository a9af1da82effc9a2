# A button event on a real Device (host board) whose channel, while the event's `listen` message is being
# sent, hands the device a `tts start` (a fast reply, or a timer going off: the socket's reader runs during
# the send's await). argv[1]: "release" (push-to-talk, from listening) or "press" (from idle). Prints
# "STATE <state> MIC <0|1>" after the event: the reply must find the device speaking, with its mic closed.
import asyncio
import json
import sys

from hal.host.board import HostBoard
from wren_device import config
from wren_device.device import IDLE, LISTENING, Device

event = sys.argv[1]
cfg = dict(config.DEFAULTS)
cfg["listen_mode"] = "manual"
board = HostBoard(cfg)
identity = {"device_id": "02:00:00:00:00:01", "client_id": "cid", "board": "wren-test", "version": "0.1.0",
            "language": "en-US"}
dev = Device(cfg, board, identity, "ws://127.0.0.1:1/", "", 1, "sim")
dev.state = LISTENING if event == "release" else IDLE
dev.channel.usable = lambda: True


async def send(msg):
    if msg.get("type") == "listen":
        await dev.on_frame(1, json.dumps({"type": "tts", "state": "start", "session_id": ""}))
    return True


dev.channel.send = send
asyncio.run(dev._handle_button(event))
print("STATE", dev.state, "MIC", int(dev.mic_open))
