"""Suite-wide: nothing the tests start writes into the developer's own Wren data dir or into the repo.

Tests that need a data dir give one (`[server] data_dir`, WREN_SERVER_DATA_DIR); anything that falls back
to the default (`wren.config.default_data_dir`: $WREN_DATA_DIR first) lands in a temporary folder, and so
do the `wren` processes the tests start, which inherit the environment."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def _default_data_dir_is_temporary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    before = os.environ.get("WREN_DATA_DIR")
    os.environ["WREN_DATA_DIR"] = str(tmp_path_factory.mktemp("wren-default-data"))
    yield
    if before is None:
        os.environ.pop("WREN_DATA_DIR", None)
    else:
        os.environ["WREN_DATA_DIR"] = before


@pytest.fixture
async def llm():
    """A local OpenAI-compatible HTTP server whose answers each test scripts (tests/agent/llm_server.py)."""
    from tests.agent.llm_server import ScriptedLLM

    server = ScriptedLLM()
    await server.start()
    yield server
    await server.stop()
