"""Engines behind one interface (`Engine`), chosen by `[agent] engine`: builtin, openai, ovos or
homeassistant."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wren.agent.engines.base import Engine
    from wren.config import Config


def make_engine(config: Config) -> Engine:
    name = config.agent.engine.strip().lower()
    if name == "builtin":
        from wren.agent.engines.builtin import BuiltinEngine

        return BuiltinEngine()
    if name == "openai":
        from wren.agent.engines.openai import OpenAIEngine

        return OpenAIEngine.from_config(config.agent, max_tokens=config.limits.llm_max_tokens)
    if name == "ovos":
        from wren.agent.engines.ovos import OvosEngine

        return OvosEngine.from_config(config.agent)
    if name == "homeassistant":
        from wren.agent.engines.homeassistant import HomeAssistantEngine

        return HomeAssistantEngine.from_config(config.agent)
    raise ValueError(f"unknown agent engine {config.agent.engine!r} (builtin, openai, ovos or homeassistant)")
