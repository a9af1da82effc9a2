"""The `wren` command line: one entry point, one module per subcommand."""

from __future__ import annotations

import argparse
import importlib
import sys

from wren.config import package_version

# subcommand -> module with `add_arguments(parser)` and `run(args) -> int`
COMMANDS = {
    "serve": "wren.commands.serve",
    "chat": "wren.commands.chat",
    "token": "wren.commands.token",
    "config": "wren.commands.config",
    "devices": "wren.commands.devices",
    "wyoming": "wren.commands.wyoming",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wren", description="Wren voice assistant server")
    parser.add_argument("--version", action="version", version=f"wren {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    modules = {}
    for name, module_name in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue  # subcommand not built yet
        modules[name] = module
        module.add_arguments(sub.add_parser(name, help=module.__doc__.strip().splitlines()[0]))
    args = parser.parse_args(argv)
    return modules[args.command].run(args)


if __name__ == "__main__":
    sys.exit(main())
