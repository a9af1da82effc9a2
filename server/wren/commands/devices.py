"""Pair, list and revoke devices (auth mode `pair`, the default).

    wren devices list                # paired devices and the codes waiting for approval
    wren devices approve 123456      # the code the new device shows and says
    wren devices revoke a0:85:e3:f4:49:34

Works on the data dir of the config (`--config`, `WREN_*`), while the server runs or not: the server reads
the same file at each OTA check and each connection, so an approval or a revocation counts at once.
"""

from __future__ import annotations

import argparse
import sys
import time

from wren.config import ConfigError, load_config
from wren.store import (
    DeviceRegistry,
    StoreUnreachable,
    describe,
    open_device_registry,
    pairing_secret,
    unreachable_errors,
)
from wren.transport.auth import check_secret, sign_token


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML config file (for [server] data_dir and [auth] secret)")
    actions = parser.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="paired devices and pairing requests waiting for a code")
    approve = actions.add_parser("approve", help="pair the device showing this code")
    approve.add_argument("code", help="the 6-digit code the device shows and says")
    revoke = actions.add_parser("revoke", help="unpair a device: its token stops working at once")
    revoke.add_argument("device_id", help="the device id, as `wren devices list` shows it")


def _ago(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago" if seconds < 172800 else f"{seconds / 86400:.0f} days ago"


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
        if config.auth.secret:
            check_secret(config.auth.secret)
        registry = open_device_registry(config)
    except ConfigError as exc:
        print(f"wren devices: {exc}", file=sys.stderr)
        return 2
    try:
        if config.auth.mode != "pair":
            print(f"note: [auth] mode is {config.auth.mode!r}; pairings count only in mode 'pair'",
                  file=sys.stderr)
        return _act(args, registry, pairing_secret(config))
    except unreachable_errors(config) as exc:
        reason = exc if isinstance(exc, StoreUnreachable) else (
            f"the store at {describe(config)} cannot be reached: {exc}")
        print(f"wren devices: {reason}", file=sys.stderr)
        return 1
    finally:
        registry.close()


def _act(args: argparse.Namespace, registry: DeviceRegistry, secret: str) -> int:
    now = time.time()
    if args.action == "list":
        paired, pending = registry.paired_devices(), registry.pending()
        print(f"paired devices ({len(paired)}):")
        for device in paired:
            approved = _ago(now - device.approved_at)
            print(f"  {device.device_id}  client {device.client_id}  approved {approved}")
        print(f"waiting for approval ({len(pending)}):")
        for request in pending:
            print(f"  code {request.code}  {request.device_id}  client {request.client_id}  from "
                  f"{request.remote}, {_ago(now - request.created_at)}")
        return 0
    if args.action == "approve":
        device = registry.approve(args.code, lambda client, ident, ts: sign_token(secret, client, ident, ts))
        if device is None:
            print(f"wren devices: no device is waiting with code {args.code.strip()!r} (codes last 10 min; "
                  "`wren devices list` shows the waiting ones)", file=sys.stderr)
            return 1
        print(f"paired {device.device_id} (client {device.client_id}); it gets its token at its next OTA "
              "check")
        return 0
    if registry.revoke(args.device_id.strip()):
        print(f"revoked {args.device_id.strip()}: it must pair again")
        return 0
    print(f"wren devices: {args.device_id.strip()!r} is not paired", file=sys.stderr)
    return 1
