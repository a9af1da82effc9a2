"""The firmware package is `wren_device`, not a second `wren`: CPython can import its pure modules in the
same process as the server package (here wren_device.config, which needs only json, os and
shared_protocol). Modules that use MicroPython-only calls at import time (wren_device.log: time.ticks_ms)
stay MicroPython-only and are tested under the real interpreter."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

from tests.firmware.conftest import FIRMWARE, REPO


@pytest.fixture
def device_config(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(FIRMWARE))
    return importlib.import_module("wren_device.config")


def test_the_firmware_and_the_server_packages_import_side_by_side(device_config) -> None:
    import wren

    assert Path(wren.__file__).parent == REPO / "server" / "wren"
    assert Path(device_config.__file__).parent == FIRMWARE / "wren_device"


def test_config_overlays_the_file_on_the_defaults_and_checks_the_mode(device_config, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"listen_mode": "manual", "volume": 30}))
    cfg = device_config.load(str(path))
    assert cfg["listen_mode"] == "manual" and cfg["volume"] == 30
    assert cfg["channel_timeout_s"] == 120  # a default
    assert device_config.load(str(tmp_path / "missing.json")) == device_config.DEFAULTS
    path.write_text(json.dumps({"listen_mode": "push-to-talk"}))
    with pytest.raises(ValueError, match="listen_mode must be one of auto, manual, realtime"):
        device_config.load(str(path))


def test_the_client_id_is_a_uuid4_made_once_and_kept(device_config, tmp_path: Path) -> None:
    path = str(tmp_path / "state.json")
    first = device_config.client_id(device_config.State(path))
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", first)
    assert device_config.client_id(device_config.State(path)) == first


def test_the_downlink_rate_follows_the_codec_unless_configured(device_config) -> None:
    # An Opus board must take the 24 kHz replies Wren and xiaozhi servers send (a hello above the limit
    # is ignored), a PCM board keeps its 16 kHz ring; config.json's value wins either way.
    cfg = dict(device_config.DEFAULTS)
    assert "max_downlink_rate" not in cfg
    assert device_config.downlink_rate(cfg, "opus") == 24000
    assert device_config.downlink_rate(cfg, "pcm") == 16000
    assert device_config.downlink_rate({**cfg, "max_downlink_rate": 16000}, "opus") == 16000
    assert device_config.downlink_rate({**cfg, "max_downlink_rate": 48000}, "pcm") == 48000
    assert cfg["downlink_buffer_ms"] == 1000  # what a paced server sends ahead, at most (docs/server.md)
