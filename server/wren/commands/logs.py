"""The log format every long-running command uses (`wren serve`, `wren wyoming`)."""

from __future__ import annotations

import logging


def configure_logging(level: str, default: int = logging.INFO) -> None:
    logging.basicConfig(
        level=getattr(logging, str(level).upper(), default),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
