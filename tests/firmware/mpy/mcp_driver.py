# Feeds JSON-RPC payloads (one JSON per stdin line) to the device MCP server of a real Device on the host
# board and prints "REPLY <json>" per line: the reply payload (null when none) plus the device's volume,
# playback gain and LED colour, so tests can see tools act on the device.
import json
import sys

from hal.host.board import HostBoard
from wren_device import config
from wren_device.device import Device

cfg = dict(config.DEFAULTS)
cfg.update(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {})
board = HostBoard(cfg)
identity = {"device_id": "02:00:00:00:00:01", "client_id": "cid", "board": "wren-test", "version": "0.1.0",
            "language": "en-US"}
dev = Device(cfg, board, identity, "ws://127.0.0.1:1/", "", 1, "sim")
while True:
    line = sys.stdin.readline()
    if not line:
        break
    reply = dev.mcp.handle(json.loads(line))
    led = getattr(board.led, "rgb", None)
    # Two print arguments, not "REPLY " + ...: a second copy of an 8 KB tools/list page may not fit.
    print("REPLY", json.dumps({"reply": reply, "volume": dev.volume, "gain": dev.downlink.gain,
                               "led": list(led) if led else None}))
