# config.json (what the maker writes) and state.json (what the device learns: Client-Id, OTA results).
# Where they live is the board's business (hal.config_path() / hal.state_path(), hal/README.md): the
# filesystem root on the ESP32, files chosen by the simulation on the host.
import json
import os

from shared_protocol.constants import LISTEN_MODES, MODE_AUTO

DEFAULTS = {
    "wifi": [],  # [{"ssid": "...", "password": "..."}], tried in order
    "server_url": "",  # ws:// or wss:// URL of the xiaozhi endpoint, used when there is no OTA URL
    "ota_url": "",  # http(s)://host:port/xiaozhi/ota/ ; its websocket section wins over server_url
    "token": "",
    "tls_ca": "",  # PEM or DER file of the server's (self-signed) certificate: https/wss are then checked
    "board": "esp32s3-breadboard",
    "listen_mode": MODE_AUTO,  # one of LISTEN_MODES: auto | manual | realtime
    "volume": 70,
    "protocol_version": 1,
    "language": "en-US",
    "mac": "",  # override the Device-Id (simulation, or boards behind Ethernet)
    "channel_timeout_s": 120,  # reference §8.3: no incoming data for this long = channel closed
    "connect_attempts": 6,
    "test_extra_tools": 0,  # test builds: register this many filler MCP tools to force paging
    "downlink_buffer_ms": 1000,  # the playback ring: what the server sends ahead (Wren: at most ~1 s)
    # "max_downlink_rate": unset = follow the codec (downlink_rate below)
}


def downlink_rate(cfg, codec_format):
    # Highest downlink rate the playback buffers are made for: config.json's, else what servers send with
    # this codec: Opus replies come at 24 kHz (Wren, xiaozhi), PCM at the device's 16 kHz. A hello asking
    # for more is ignored, so an Opus board left at 16000 would never accept a Wren server's hello.
    rate = cfg.get("max_downlink_rate")
    if rate:
        return int(rate)
    return 24000 if codec_format == "opus" else 16000


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError:
        return {}


def load(path):
    # -> the configuration: DEFAULTS overlaid with the JSON object at `path` (missing file = defaults).
    cfg = dict(DEFAULTS)
    loaded = _read_json(path)
    if not isinstance(loaded, dict):
        raise ValueError("config.json must hold a JSON object")
    cfg.update(loaded)
    if cfg["listen_mode"] not in LISTEN_MODES:
        raise ValueError("listen_mode must be one of " + ", ".join(LISTEN_MODES))
    return cfg


class State:
    # Small persistent key/value store (the NVS of the official firmware).
    def __init__(self, path):
        self.path = path
        self.data = _read_json(self.path)
        if not isinstance(self.data, dict):
            self.data = {}

    def get(self, key, default=None):
        return self.data.get(key, default)

    def update(self, values):
        changed = False
        for k in values:
            if self.data.get(k) != values[k]:
                self.data[k] = values[k]
                changed = True
        if changed:
            with open(self.path, "w") as f:
                json.dump(self.data, f)


def new_uuid4():
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    h = "".join("%02x" % x for x in b)
    return "%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])


def client_id(state):
    # Client-Id: a UUIDv4 made on first boot and kept (reference §1.2).
    cid = state.get("client_id")
    if not cid:
        cid = new_uuid4()
        state.update({"client_id": cid})
    return cid
