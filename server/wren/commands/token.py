"""Print a signed device token for auth mode `token`.

The token binds the client id and the device id (HMAC-SHA256 with [auth] secret); the device sends it
as `Authorization: Bearer <token>`. Devices that use the OTA endpoint get a fresh one automatically.
"""

from __future__ import annotations

import argparse
import sys

from wren.config import ConfigError, load_config
from wren.transport.auth import sign_token


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("device_id", help="the device's Device-Id (its MAC, e.g. a0:85:e3:f4:49:34)")
    parser.add_argument("--client-id", default="", help="the device's Client-Id (must match what it sends)")
    parser.add_argument("--config", help="TOML config file (for [auth] secret)")


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
        print(sign_token(config.auth.secret, args.client_id, args.device_id))
    except ConfigError as exc:
        print(f"wren token: {exc}", file=sys.stderr)
        return 2
    return 0
