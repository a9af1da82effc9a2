"""The device MCP server (firmware/wren_device/mcp.py + tools.py) under MicroPython: reference §4.2-§4.6
vectors."""

from __future__ import annotations

import json
from typing import Any

from tests.firmware.conftest import SCRIPTS, micropython


async def exchange(payloads: list[Any], **cfg: Any) -> list[dict]:
    """Feed payloads to one device; one result dict per payload, in order."""
    async with micropython(str(SCRIPTS / "mcp_driver.py"), json.dumps(cfg), stdin=True) as mp:
        assert mp.proc.stdin is not None
        mp.proc.stdin.write("".join(json.dumps(p) + "\n" for p in payloads).encode())
        await mp.proc.stdin.drain()
        mp.proc.stdin.close()
        assert await mp.finish() == 0, mp.output()
        return [json.loads(line[6:]) for line in mp.lines if line.startswith("REPLY ")]


def call(i: int, name: Any, arguments: Any = None, with_args: bool = True) -> dict:
    params: dict[str, Any] = {"name": name}
    if with_args:
        params["arguments"] = arguments if arguments is not None else {}
    return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params}


def error_of(result: dict) -> str:
    reply = result["reply"]
    assert "code" not in reply["error"]  # the device dialect: message only (§4.2)
    return reply["error"]["message"]


async def test_initialize_reports_the_board_and_reads_vision_capability() -> None:
    (res,) = await exchange(
        [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
          "params": {"protocolVersion": "2024-11-05", "capabilities": {"vision": {"url": "http://x/v"}}}}]
    )
    assert res["reply"] == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "protocolVersion": "2024-11-05",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "wren-test", "version": "0.1.0"},
        },
    }


async def test_tools_call_error_texts_are_exactly_the_firmwares() -> None:
    results = await exchange(
        [
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"arguments": {}}},
            call(3, "self.no.such.tool"),
            {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
             "params": {"name": "self.audio_speaker.set_volume", "arguments": [1]}},
            call(5, "self.audio_speaker.set_volume", {}),
            call(6, "self.audio_speaker.set_volume", {"volume": "50"}),  # wrong type counts as missing
            call(7, "self.audio_speaker.set_volume", {"volume": -1}),
            call(8, "self.audio_speaker.set_volume", {"volume": 101}),
            {"jsonrpc": "2.0", "id": 9, "method": "resources/list"},
        ]
    )
    assert [error_of(r) for r in results] == [
        "Missing params",
        "Missing name",
        "Unknown tool: self.no.such.tool",
        "Invalid arguments",
        "Missing valid argument: volume",
        "Missing valid argument: volume",
        "Value is below minimum allowed: 0",
        "Value exceeds maximum allowed: 100",
        "Method not implemented: resources/list",
    ]
    assert [r["reply"]["id"] for r in results] == list(range(1, 10))


async def test_set_volume_binds_a_number_and_changes_the_playback_gain() -> None:
    before, after, truncated = await exchange(
        [
            call(1, "self.get_device_status"),
            call(2, "self.audio_speaker.set_volume", {"volume": 30, "extra": "ignored"}),
            call(3, "self.audio_speaker.set_volume", {"volume": 55.9}),  # a JSON number, truncated
        ],
        volume=80,
    )
    status = json.loads(before["reply"]["result"]["content"][0]["text"])
    assert status["audio_speaker"]["volume"] == 80
    assert after["reply"]["result"] == {"content": [{"type": "text", "text": "true"}], "isError": False}
    assert after["volume"] == 30 and after["gain"] < before["gain"]
    assert truncated["volume"] == 55


async def test_light_set_rgb_drives_the_board_led() -> None:
    (res,) = await exchange([call(1, "self.light.set_rgb", {"r": 255, "g": 10, "b": 0})])
    assert res["reply"]["result"]["content"][0]["text"] == "true"
    assert res["led"] == [255, 10, 0]


async def test_string_float_and_missing_ids_and_notifications_get_no_reply() -> None:
    results = await exchange(
        [
            {"jsonrpc": "2.0", "id": "7", "method": "tools/list"},
            {"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"},
            {"jsonrpc": "2.0", "method": "tools/list"},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 3, "method": "notifications/cancelled"},
            {"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": [1]},
            {"jsonrpc": "2.0", "id": 5, "result": {}},
            {"jsonrpc": "1.0", "id": 6, "method": "tools/list"},
        ]
    )
    assert [r["reply"] for r in results] == [None] * 8


async def test_tools_list_pages_at_8000_bytes_with_name_cursor_and_no_cursor_on_the_last_page() -> None:
    first = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    (page1,) = await exchange([first], test_extra_tools=30)
    pages = [page1["reply"]["result"]]
    cursors = []
    while "nextCursor" in pages[-1]:
        cursors.append(pages[-1]["nextCursor"])
        req = {"jsonrpc": "2.0", "id": 2, "method": "tools/list",
               "params": {"cursor": cursors[-1], "withUserTools": False}}
        (nxt,) = await exchange([req], test_extra_tools=30)
        pages.append(nxt["reply"]["result"])
    assert len(pages) >= 2
    for page, cursor in zip(pages[1:], cursors, strict=True):
        assert page["tools"][0]["name"] == cursor  # the cursor names the first tool of the next page
    for page in pages:
        assert len(json.dumps(page, separators=(",", ":")).encode()) <= 8000
    names = [t["name"] for p in pages for t in p["tools"]]
    assert names[:3] == ["self.get_device_status", "self.audio_speaker.set_volume", "self.light.set_rgb"]
    assert len(names) == len(set(names)) == 3 + 30
    assert "self.reboot" not in names and "self.get_system_info" not in names


async def test_user_only_tools_are_listed_with_their_annotation_when_asked() -> None:
    (res,) = await exchange(
        [{"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"cursor": "", "withUserTools": True}}]
    )
    tools = {t["name"]: t for t in res["reply"]["result"]["tools"]}
    assert "nextCursor" not in res["reply"]["result"]
    assert tools["self.reboot"]["annotations"] == {"audience": ["user"]}
    assert tools["self.get_system_info"]["annotations"] == {"audience": ["user"]}
    assert tools["self.audio_speaker.set_volume"]["inputSchema"] == {
        "type": "object",
        "properties": {"volume": {"type": "integer", "minimum": 0, "maximum": 100}},
        "required": ["volume"],
    }
    assert tools["self.get_device_status"]["inputSchema"] == {"type": "object", "properties": {}}


async def test_get_system_info_is_the_ota_body() -> None:
    (res,) = await exchange([call(1, "self.get_system_info")])
    info = json.loads(res["reply"]["result"]["content"][0]["text"])
    assert info["mac_address"] == "02:00:00:00:00:01"
    assert info["uuid"] == "cid"
    assert isinstance(info["minimum_free_heap_size"], str)
    assert info["board"]["type"] == "wren-test"
