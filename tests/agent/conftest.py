from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from wren.agent.loop import AgentLoop
from wren.config import Config


def make_config(data_dir: Path, **agent: Any) -> Config:
    config = Config()
    config.server.data_dir = str(data_dir)
    for key, value in agent.items():
        setattr(config.agent, key, value)
    return config


@pytest.fixture
async def agent_factory(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """Start AgentLoops on a temp data dir; every started loop is closed at teardown."""
    started: list[AgentLoop] = []

    async def start(data_dir: Path | None = None, **agent_options: Any) -> AgentLoop:
        loop = AgentLoop.from_config(make_config(data_dir or tmp_path / "data", **agent_options))
        await loop.start()
        started.append(loop)
        return loop

    yield start
    for loop in started:
        await loop.close()


@pytest.fixture
async def agent(agent_factory: Callable[..., Any]) -> AgentLoop:
    return await agent_factory()
