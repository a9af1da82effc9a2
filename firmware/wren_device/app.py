# Boot sequence: config -> board -> Wi-Fi -> optional OTA check -> device state machine.
import asyncio
import gc

from wren_device import VERSION, config, hal, net
from wren_device.info import system_info
from wren_device.log import log


def _device_id(cfg, board):
    if cfg.get("mac"):
        return cfg["mac"].lower()
    return ":".join("%02x" % b for b in board.mac())  # lowercase with colons (§1.2)


async def main():
    cfg = config.load(hal.config_path())
    state = config.State(hal.state_path())
    board = hal.make_board(cfg)
    identity = {
        "device_id": _device_id(cfg, board),
        "client_id": config.client_id(state),
        "board": cfg.get("board", board.name),
        "version": VERSION,
        "language": cfg.get("language", "en-US"),
    }
    log("boot", "wren %s on %s, device %s" % (VERSION, identity["board"], identity["device_id"]))
    ssid = await net.wifi_connect(board.wlan(), cfg["wifi"])
    net.configure_tls(cfg.get("tls_ca", ""))
    url, token, version = cfg["server_url"], cfg["token"], cfg["protocol_version"]
    # The big audio buffers come before the larger modules are imported: on a small heap a 32 KB PCM
    # ring may no longer be found once code and its compile-time garbage are spread over it. The
    # playback path is made before OTA too: a pairing code is spoken through it.
    gc.collect()
    from wren_device.audio import Downlink, Uplink
    from wren_device.codec import make_codec

    codec = make_codec(cfg.get("opus", True))
    downlink = Downlink(codec, int(version), config.downlink_rate(cfg, codec.format),
                        cfg["downlink_buffer_ms"])
    if cfg.get("ota_url"):
        pairing = []  # made at the first code (wren_device.pairing): a paired board never loads it

        def on_code(code, message):
            if not pairing:
                from wren_device.pairing import Pairing

                pairing.append(Pairing(board, downlink, codec, cfg.get("volume", 70), hal.sounds_path()))
            pairing[0].on_code(code, message)

        reply = await net.ota_check(cfg["ota_url"], identity, system_info(cfg, board, identity, ssid),
                                    on_code=on_code)
        if pairing:
            await pairing[0].stop()
            del pairing[:]
        clock = net.server_clock(reply)
        if clock:
            board.set_clock(clock[0], clock[1])  # the board's RTC in local time (host: logged only)
        ws = net.websocket_of(reply)
        if ws:
            state.update({"ws_url": ws["url"], "ws_token": ws.get("token") or "",
                          "ws_version": ws.get("version") or 1})
        url = state.get("ws_url") or url
        token = state.get("ws_token") or token
        version = state.get("ws_version") or version
    if not url:
        raise ValueError("no server: set server_url or ota_url in config.json")
    version = int(version)
    downlink.set_version(version)
    gc.collect()
    from wren_device.ws import WebSocket

    paths = (Uplink(codec, version), downlink, WebSocket(max_message=cfg.get("max_message", 8192)))
    from wren_device.device import Device

    device = Device(cfg, board, identity, url, token, version, ssid, codec, paths)
    await device.run()


def run():
    try:
        asyncio.run(main())
    except Exception as e:
        hal.on_fatal(e)
    finally:
        asyncio.new_event_loop()
