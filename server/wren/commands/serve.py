"""Run the Wren server: device WebSocket, OTA endpoint and status page on one port.

Loads the speech models once, then serves until SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from wren.config import ConfigError, load_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", help="address to bind (default: [server] host, 0.0.0.0)")
    parser.add_argument("--port", type=int, help="port to bind (default: [server] port, 8000; 0 = any free)")
    parser.add_argument("--config", help="TOML config file (default: $WREN_CONFIG, else built-in defaults)")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")


async def _serve(args: argparse.Namespace) -> None:
    from wren.app import WrenServer

    config = load_config(args.config)
    server = WrenServer(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    port = await server.start(args.host, args.port)
    print(f"Wren server listening on port {port}", flush=True)
    try:
        await stop.wait()
    finally:
        await server.stop()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        asyncio.run(_serve(args))
    except ConfigError as exc:
        print(f"wren serve: {exc}")
        return 2
    return 0
