"""Optional TLS (`[server] tls_cert` + `tls_key`): the port speaks https:// and wss:// only, OTA hands out
wss:// URLs, and a Wren board pinning the certificate pairs and talks over it; a broken setting is one
clear line at start."""

from __future__ import annotations

import ssl
from pathlib import Path

import aiohttp
import pytest
from wren.config import ConfigError, ServerConfig
from wren.transport.tls import server_tls_context

from tests.support.certificates import self_signed
from tests.support.device import TestDevice


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_server(start_server, certificate):
    cert, key = certificate
    return start_server(server={"tls_cert": str(cert), "tls_key": str(key)})


def trusting(cert: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert))


async def test_ota_over_https_hands_out_a_wss_url_that_serves_a_device(tls_server, certificate):
    base = f"https://127.0.0.1:{tls_server.port}"
    connector = aiohttp.TCPConnector(ssl=trusting(certificate[0]))
    headers = {"Device-Id": "02:00:00:00:7e:01", "Client-Id": "c"}
    async with aiohttp.ClientSession(connector=connector) as http, http.post(
            base + "/xiaozhi/ota/", json={}, headers=headers) as resp:
        answer = await resp.json()
    url = answer["websocket"]["url"]
    assert url == f"wss://127.0.0.1:{tls_server.port}/xiaozhi/v1/"
    async with TestDevice(url, "02:00:00:00:7e:01", mcp=False, ssl_context=trusting(certificate[0])) as dev:
        await dev.connect()
        await dev.detect("what time is it")
        assert (await dev.next_reply(timeout=30)).text.startswith("It's")


async def test_plain_http_on_a_tls_port_gets_no_answer(tls_server):
    with pytest.raises((aiohttp.ClientError, ConnectionError)):
        async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{tls_server.port}/",
                                                              timeout=aiohttp.ClientTimeout(total=5)) as resp:
            await resp.read()


def test_half_or_broken_tls_settings_are_refused_with_a_clear_message(tmp_path, certificate):
    with pytest.raises(ConfigError, match="go together"):
        server_tls_context(ServerConfig(tls_cert=str(certificate[0])))
    with pytest.raises(ConfigError, match="no such file"):
        server_tls_context(ServerConfig(tls_cert=str(tmp_path / "nope.pem"), tls_key=str(certificate[1])))
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(ConfigError, match="cannot be used"):
        server_tls_context(ServerConfig(tls_cert=str(garbage), tls_key=str(garbage)))
    assert server_tls_context(ServerConfig()) is None
