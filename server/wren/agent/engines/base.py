"""The one interface every engine implements, and the context a turn hands it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from wren.agent.events import TurnEvent
from wren.agent.messages import InboundMessage
from wren.tools.router import ToolRouter


@dataclass
class TurnContext:
    session_key: str
    message: InboundMessage
    text: str  # the user's words for this turn (several merged messages if injected)
    history: list[dict[str, str]]  # earlier {"role": "user"|"assistant", "content": ...}, oldest first
    state: dict[str, Any]  # this engine's state for the session; mutate it, the loop persists it
    tools: ToolRouter
    now: Callable[[], datetime]  # local wall-clock time (server timezone offset applied)
    # Safe-boundary hook: returns follow-up messages that arrived mid-turn (empty for voice/direct turns).
    take_pending: Callable[[], list[InboundMessage]] = field(default=lambda: [])


class Engine(Protocol):
    name: str

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def respond(self, ctx: TurnContext) -> AsyncIterator[TurnEvent]:
        """Yield the reply as TextChunk/Emotion events; may be cancelled at any await (barge-in)."""
        ...


# Graded empty-input wording (the session decides kind and count; the engine only words it).
_PROMPTS: dict[str, tuple[str, str, str]] = {
    "manual": (
        "I didn't hear anything. Hold the button while you speak.",
        "Still nothing. Hold the button and talk.",
        "I can't hear you. Please try again.",
    ),
    "silence": (
        "Are you still there?",
        "I'm listening, whenever you're ready.",
        "I'll wait quietly. Say my name when you need me.",
    ),
    "wake": (
        "Yes? How can I help?",
        "I'm here. What would you like?",
        "I didn't catch that. Try asking again.",
    ),
}


def render_empty_prompt(kind: str, count: int) -> str:
    options = _PROMPTS.get(kind, _PROMPTS["silence"])
    return options[min(max(count, 1), len(options)) - 1]


def empty_prompts() -> list[str]:
    """Every empty-input prompt wording (their audio is cached at start: wren.speech.tts.phrase_cache)."""
    return [text for options in _PROMPTS.values() for text in options]
