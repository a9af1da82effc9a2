"""The URLs a person needs to reach this server from the LAN, printed at start-up instead of "0.0.0.0".

Bound to a wildcard (`0.0.0.0`, `::`, empty), the server is reachable on every interface address of the
machine, so those are listed: found without new dependencies and without sending anything, so it works
offline and in a container:
- the source address the kernel would use towards private networks (a UDP socket `connect()`ed to a
  private address: that only picks a route, no packet leaves);
- every local IPv4 address in `/proc/net/fib_trie` (Linux: all interfaces, bridges included);
- what the host name resolves to (`/etc/hosts` in a container).
Loopback and link-local addresses are left out; when nothing else is found, 127.0.0.1 is listed.
Bound to one address, that address is the only one.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path

WILDCARDS = ("", "0.0.0.0", "::")
# Private destinations whose route tells us the LAN-facing source address (nothing is sent to them).
_PROBES = ("10.255.255.255", "192.168.255.255", "172.31.255.255")
_FIB_TRIE = Path("/proc/net/fib_trie")


@dataclass(frozen=True)
class ServerUrls:
    address: str
    console: str
    ota: str
    websocket: str


def _usable(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return not (ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast)


def _route_sources() -> list[str]:
    found = []
    for probe in _PROBES:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                udp.connect((probe, 9))  # a UDP connect only chooses the route: no packet is sent
                found.append(udp.getsockname()[0])
        except OSError:
            continue  # no route there (e.g. a container without a network)
    return found


def _fib_trie_locals(text: str) -> list[str]:
    """The `/32 host LOCAL` entries of /proc/net/fib_trie: the machine's own IPv4 addresses."""
    found = []
    previous = ""
    for line in text.splitlines():
        stripped = line.strip(" |+-")
        if "/32 host LOCAL" in line and previous:
            found.append(previous)
        previous = stripped if stripped.count(".") == 3 and " " not in stripped else ""
    return found


def _host_name_addresses() -> list[str]:
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET, socket.SOCK_STREAM)
    except OSError:
        return []
    return [str(info[4][0]) for info in infos]


def interface_addresses() -> list[str]:
    """This machine's usable IPv4 addresses, the default route's first; ["127.0.0.1"] if none."""
    candidates = _route_sources()
    with contextlib.suppress(OSError):  # not Linux, or no /proc
        candidates += _fib_trie_locals(_FIB_TRIE.read_text())
    candidates += _host_name_addresses()
    seen: list[str] = []
    for address in candidates:
        if _usable(address) and address not in seen:
            seen.append(address)
    return seen or ["127.0.0.1"]


def _url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def server_urls(host: str, port: int, websocket_path: str, ota_path: str,
                secure: bool = False) -> list[ServerUrls]:
    """The console, OTA and WebSocket URLs for each address the server can be reached on."""
    addresses = interface_addresses() if host in WILDCARDS else [host]
    http, ws = ("https", "wss") if secure else ("http", "ws")
    urls = []
    for address in addresses:
        base = f"{_url_host(address)}:{port}"
        urls.append(ServerUrls(address, f"{http}://{base}/", f"{http}://{base}{ota_path}",
                               f"{ws}://{base}{websocket_path}"))
    return urls


def describe(urls: list[ServerUrls], public_ws_url: str = "") -> list[str]:
    """The start-up lines: one block per address."""
    lines = []
    for url in urls:
        lines += [f"  console    {url.console}", f"  OTA        {url.ota}", f"  WebSocket  {url.websocket}"]
    if public_ws_url:
        lines.append(f"  devices are handed {public_ws_url} (server.public_ws_url)")
    return lines
