"""The common message objects every channel speaks (the nanobot shape).

A session key is `session_key_override` if given, else `"channel:chat_id"`; a device is
`InboundMessage(channel="xiaozhi", chat_id=<device-id>)` and so owns the key `xiaozhi:<device-id>`.
`sender_id` is deliberately not part of the key: the conversation, not the speaker, owns the history.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class InboundMessage:
    channel: str
    sender_id: str
    chat_id: str
    content: str
    timestamp: float = field(default_factory=time.time)
    media: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    session_key_override: str | None = None

    @property
    def session_key(self) -> str:
        return self.session_key_override or f"{self.channel}:{self.chat_id}"


@dataclass
class OutboundMessage:
    channel: str
    chat_id: str
    content: str
    reply_to: str | None = None
    media: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
