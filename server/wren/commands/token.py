"""Print a signed device token for auth mode `token`.

The token binds the client id and the device id (HMAC-SHA256 with [auth] secret); the device sends it
as `Authorization: Bearer <token>`. The OTA endpoint renews a token a device already holds (and mints
one for `[auth] allowed_devices`); a new device gets its first token from this command.
"""

from __future__ import annotations

import argparse
import sys

from wren.config import ConfigError, load_config
from wren.transport.auth import check_secret, sign_token
from wren.transport.identity import id_problem


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("device_id", help="the device's Device-Id (its MAC, e.g. a0:85:e3:f4:49:34)")
    parser.add_argument("--client-id", default="", help="the device's Client-Id (must match what it sends)")
    parser.add_argument("--config", help="TOML config file (for [auth] secret)")


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
        check_secret(config.auth.secret)  # the server would refuse to start with it: no token from it
        for kind, value in (("device id", args.device_id), ("client id", args.client_id)):
            problem = id_problem(kind, value) if value or kind == "device id" else None
            if problem is not None:
                raise ConfigError(f"invalid {problem}")
        print(sign_token(config.auth.secret, args.client_id, args.device_id))
    except ConfigError as exc:
        print(f"wren token: {exc}", file=sys.stderr)
        return 2
    return 0
