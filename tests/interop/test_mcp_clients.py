"""Clients whose MCP server handles `tools/list` and `tools/call` but not `initialize`.

Imitates third-party clients with a partial MCP server (`PartialMcpClient`): desktop and web clients,
and hobby boards that added a couple of tools. They announce `"features":{"mcp":true}` in the hello
(reference §3.1), then either (a) never answer the server's `initialize`, or (b) answer it with a
JSON-RPC error. Both list their one tool normally and run it when called.

What the reference says about it: the device is the MCP server and the backend the client (§0 item 4,
§4); after the hello the server sends `initialize`, then pages through `tools/list` (§3.2 xinnan
behaviour, §4.3, §4.4, §11.2 item 2); the device's replies are asynchronous and may be errors
without a `code` (§4.2, §10 row 10). A failed or missing `initialize` tells the server nothing
about the tools, so it must still ask for the list. Otherwise the device's tools are lost for the
whole connection.

The tool is `self.light.turn_on` with an empty input schema (the `self.lamp.turn_on` kind of board
tool, §4.6). The built-in engine calls it for the typed query "turn on the light".
"""

from __future__ import annotations

import asyncio

import pytest

from tests.interop.clients import PartialMcpClient
from tests.support.received import is_tts

# `tools/list` must follow the initialize that got no answer (or an error) within about this long.
LIST_AFTER_INITIALIZE_S = 6.0


@pytest.mark.parametrize("initialize", ["silent", "error"],
                         ids=["initialize_never_answered", "initialize_answered_with_an_error"])
async def test_server_lists_and_calls_the_tools_of_a_client_whose_initialize_fails(server, initialize):
    async with PartialMcpClient(server.ws_url, initialize=initialize) as client:
        await client.connect()
        asked_init, init = await client.wait_mcp_request("initialize", 5)
        assert isinstance(init.get("id"), int), init  # the firmware drops requests with other ids (§4.2)

        asked_list, listing = await client.wait_mcp_request("tools/list", LIST_AFTER_INITIALIZE_S)
        assert asked_list - asked_init <= LIST_AFTER_INITIALIZE_S
        assert isinstance(listing.get("id"), int) and listing["id"] != init["id"], listing
        await asyncio.sleep(0.3)  # the one page has been answered; let the server take the tool in

        await client.detect("turn on the light")
        _, call = await client.wait_mcp_request("tools/call", 15)
        assert call["params"]["name"] == "self.light.turn_on", call
        assert call["params"].get("arguments") in ({}, None), call
        reply = await client.next_reply(timeout=30)
        assert reply.sentences and reply.frames, client.summary()
        assert "sorry" not in reply.text.lower(), reply.text  # the call succeeded and was confirmed
        assert reply.events[-1].msg is not None and is_tts("stop")(reply.events[-1])
        assert client.tool_calls == [call["params"]]
