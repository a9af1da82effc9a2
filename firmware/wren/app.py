# Boot sequence: config -> board -> Wi-Fi -> optional OTA check -> device state machine.
import asyncio

from wren import VERSION, config, net
from wren.device import Device
from wren.hal import make_board
from wren.info import system_info
from wren.log import log


def _device_id(cfg, board):
    if cfg.get("mac"):
        return cfg["mac"].lower()
    return ":".join("%02x" % b for b in board.mac())  # lowercase with colons (§1.2)


async def main():
    cfg = config.load()
    state = config.State()
    board = make_board(cfg)
    identity = {
        "device_id": _device_id(cfg, board),
        "client_id": config.client_id(state),
        "board": cfg.get("board", board.name),
        "version": VERSION,
        "language": cfg.get("language", "en-US"),
    }
    log("boot", "wren %s on %s, device %s" % (VERSION, identity["board"], identity["device_id"]))
    ssid = await net.wifi_connect(board.wlan(), cfg["wifi"])
    url, token, version = cfg["server_url"], cfg["token"], cfg["protocol_version"]
    if cfg.get("ota_url"):
        ws = await net.ota_check(cfg["ota_url"], identity, system_info(cfg, board, identity, ssid))
        if ws:
            state.update({"ws_url": ws["url"], "ws_token": ws.get("token") or "",
                          "ws_version": ws.get("version") or 1})
        url = state.get("ws_url") or url
        token = state.get("ws_token") or token
        version = state.get("ws_version") or version
    if not url:
        raise ValueError("no server: set server_url or ota_url in config.json")
    device = Device(cfg, board, identity, url, token, int(version), ssid)
    await device.run()


def run():
    try:
        asyncio.run(main())
    finally:
        asyncio.new_event_loop()
