# What the device says about itself: the OTA body / self.get_system_info (§6.2) and get_device_status.
import gc

from wren_device import VERSION


def system_info(cfg, board, identity, ssid):
    info = board.info()
    return {
        "version": 2,
        "language": cfg.get("language", "en-US"),
        "flash_size": info.get("flash_size", 0),
        "minimum_free_heap_size": str(gc.mem_free()),  # a string, as the official firmware sends it
        "mac_address": identity["device_id"],
        "uuid": identity["client_id"],
        "chip_model_name": info.get("chip_model_name", "esp32s3"),
        "chip_info": {"model": 0, "cores": info.get("cores", 2), "revision": 0, "features": 0},
        "application": {"name": "wren", "version": VERSION, "compile_time": "", "idf_version": "",
                        "elf_sha256": ""},
        "partition_table": [],
        "ota": {"label": "factory"},
        "board": {"type": identity["board"], "name": identity["board"], "ssid": ssid or "",
                  "rssi": 0, "channel": 0, "ip": "", "mac": identity["device_id"]},
    }


def device_status(board, volume, ssid):
    rssi = -50
    try:
        rssi = board.wlan().status("rssi")
    except Exception:
        pass
    signal = "strong" if rssi > -60 else ("medium" if rssi > -75 else "weak")
    network = {"type": "wifi", "ssid": ssid or "", "signal": signal}
    return {"audio_speaker": {"volume": volume}, "network": network}
