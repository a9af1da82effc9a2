"""Where a server keeps what it derives once and reuses on every start (the converted Moonshine model, the
audio of the agent's fixed phrases): `$WREN_CACHE_DIR`, else `$XDG_CACHE_HOME/wren`, else `~/.cache/wren`.
Outside the data dir on purpose, so every server on the machine (and every test server with its own data
dir) shares one copy. Everything in it can be deleted; it is made again."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir(configured: str = "") -> Path:
    """`configured` (a `cache_dir` setting) when set, else the default above."""
    if configured:
        return Path(configured).expanduser()
    explicit = os.environ.get("WREN_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "wren"
