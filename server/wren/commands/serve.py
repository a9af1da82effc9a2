"""Run the Wren server: device WebSocket, OTA endpoint and status page on one port.

Loads the speech models once, then serves until SIGINT/SIGTERM. Once bound it prints the URLs to use from
the LAN (console, OTA, WebSocket) for each address of the machine. A configuration mistake (unknown
option or engine, wrong type, bad TOML, a model path that does not exist) is one line on stderr and exit
code 2, before anything is loaded where it can be.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys

from wren.commands.logs import configure_logging
from wren.config import ConfigError, load_config, package_version
from wren.transport.addresses import describe


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="address to bind (default: [server] host, 0.0.0.0)")
    parser.add_argument("--port", type=int, help="port to bind (default: [server] port, 8000; 0 = any free)")
    parser.add_argument("--config", help="TOML config file (default: $WREN_CONFIG, else built-in defaults)")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")


def admission_note(mode: str, port: int = 8000) -> str:
    """How devices get in, printed at start-up (`make run` shows it)."""
    if mode == "pair":
        return ("Pairing: a new device shows and says a 6-digit code; approve it with\n"
                "  wren devices approve CODE      (waiting devices: wren devices list)\n"
                f"  or on the console: http://localhost:{port}/ from this machine\n"
                "  (from other machines once [console] key is set)")
    if mode == "open":
        logging.getLogger("wren.serve").warning(
            "auth mode 'open': any device on the network is admitted as whatever device id it claims "
            "(a lab setting; the default, 'pair', admits only devices you approved)")
        return "Auth mode 'open': every device is admitted (lab only)."
    return "Auth mode 'token': devices need a token from `wren token` (or [auth] allowed_devices)."


def api_key_note(path: str, key: str, created: bool) -> str:
    """Where `POST /api/chat`'s key is; the key itself only on the start that made it (it is shown once,
    not on every start, so it does not pile up in logs and terminals)."""
    if created:
        return (f"API key for POST /api/chat (made now; shown once, kept in {path}):\n  {key}\n"
                "  send it as: Authorization: Bearer <key>")
    return f"POST /api/chat needs the API key kept in {path} (Authorization: Bearer <key>)."


def set_gil_switch_interval(milliseconds: float) -> None:
    """This process's GIL switch interval (`[server] gil_switch_interval_ms`). Why 20 ms and not Python's 5:
    at 200 streaming devices the event loop holds the GIL for rounds of uplink work of up to ≈ 15 ms, and
    every 5 ms a waiting recogniser or synthesis thread made it let go and wait to get it back. In 11
    back-to-back pairs (docs/performance.md, round 21) 20 ms gave the lower uplink lag p99 in 7, the same in
    1 (median 160 against 290 ms), and fewer late replies ("One moment.") in 9; one person and
    overlapping turns were the same."""
    sys.setswitchinterval(milliseconds / 1000)


def freeze_startup_heap() -> None:
    """Move everything loaded so far (models' Python side, grammars, tokenizers, modules: ~60,000 objects)
    out of the garbage collector's reach: they live as long as the process, and a full collection that
    walked them took 170 ms of the event loop at 100 streaming devices (12 ms once frozen). A policy of the
    process, so it is here and not in `WrenServer`, which tests and embedders start many times."""
    gc.collect()
    gc.freeze()


async def _serve(args: argparse.Namespace) -> None:
    config = load_config(args.config)  # a mistake here is reported before anything heavy is imported
    from wren.app import WrenServer

    set_gil_switch_interval(config.server.gil_switch_interval_ms)

    server = WrenServer(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    port = await server.start(args.host, args.port)
    freeze_startup_heap()
    print(f"Wren server {package_version()} listening on port {port}; from this network:", flush=True)
    print("\n".join(describe(server.urls, config.server.public_ws_url)), flush=True)
    print(admission_note(config.auth.mode, port), flush=True)
    print(api_key_note(server.api_key_place, server.api_key, server.api_key_created), flush=True)
    try:
        await stop.wait()
    finally:
        await server.stop()


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `wren --version` and `wren config` should not load the speech stack.
    from wren.speech.asr.errors import AsrError
    from wren.speech.tts.base import TtsError
    from wren.store import StoreUnreachable
    from wren.tools.server_mcp import ServerConfigError

    # Everything the server writes (sessions, timers, the API key, logs it opens) is the owner's alone.
    os.umask(0o077)
    configure_logging(args.log_level)
    try:
        asyncio.run(_serve(args))
    except (ConfigError, ServerConfigError, AsrError, TtsError, StoreUnreachable) as exc:
        # A setting that cannot work (AsrError/TtsError here: a model or voice that cannot be loaded).
        print(f"wren serve: {exc}", file=sys.stderr)
        return 2
    return 0
