"""What one session biases its recogniser toward: the agent's phrase set for this device, kept current.

The phrase set changes when the device's tool list arrives or changes, and when the person teaches a name
(the built-in engine's state, read from the store after each turn). `current()` is called in the listen
executor at each speech onset and must be cheap: it recomputes only when the tool names or the taught name
changed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from wren.agent.vocabulary import recognition_phrases
from wren.speech.asr.bias import margin_for
from wren.tools.spec import ToolSpec

log = logging.getLogger(__name__)


class RecognitionBias:
    def __init__(
        self,
        agent: Any,
        session_key: str,
        device_tools: Callable[[], list[ToolSpec]],
        setting: str,
        engine: str,
    ) -> None:
        self._agent = agent
        self._session_key = session_key
        self._device_tools = device_tools  # the device MCP client's current list (replaced on change)
        self.margin = margin_for(setting, engine)
        self._names: tuple[str, ...] = ()
        self._tools_seen: object = None
        self._phrases: tuple[str, ...] = recognition_phrases()

    def current(self) -> tuple[tuple[str, ...], float]:
        tools = self._device_tools()
        key = tuple(t.name for t in tools)
        if key != self._tools_seen:
            self._tools_seen = key
            self._phrases = recognition_phrases(tools, self._names)
        return self._phrases, self.margin

    async def refresh(self) -> None:
        """Re-read taught names (after a turn); never fails the session."""
        if self.margin <= 0:
            return
        try:
            _, state = await self._agent.store.load(self._session_key, self._agent.engine.name)
        except Exception as exc:  # the store is closing, or a corrupt row: keep the old phrase set
            log.debug("recognition bias: cannot read taught names: %s", exc)
            return
        name = state.get("user_name") if isinstance(state, dict) else None
        names = (str(name)[:60],) if name else ()
        if names != self._names:
            self._names = names
            self._tools_seen = None  # recompute at the next onset
