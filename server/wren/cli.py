"""The `wren` command line."""

import sys


def main(argv: list[str] | None = None) -> int:
    print("wren: not built yet", file=sys.stderr)
    return 1
