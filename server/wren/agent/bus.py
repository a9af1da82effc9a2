"""The message bus: two bounded queues and nothing more (channels -> agent, agent -> channels).

No topics, routing, persistence or retries: channels publish `InboundMessage`s, the agent loop
consumes them and publishes `OutboundMessage`s, a channel manager routes those by `channel`. Bounded,
so a flood from one channel applies back-pressure instead of growing memory without limit.
"""

from __future__ import annotations

import asyncio

from wren.agent.messages import InboundMessage, OutboundMessage

BUS_QUEUE_SIZE = 256  # messages per direction; full -> the publisher waits (back-pressure, nothing dropped)


class MessageBus:
    def __init__(self, maxsize: int = BUS_QUEUE_SIZE) -> None:
        # Both bounded (BUS_QUEUE_SIZE by default); full -> publish_*() waits for the consumer.
        self.inbound: asyncio.Queue[InboundMessage] = asyncio.Queue(maxsize)
        self.outbound: asyncio.Queue[OutboundMessage] = asyncio.Queue(maxsize)

    async def publish_inbound(self, msg: InboundMessage) -> None:
        await self.inbound.put(msg)

    async def consume_inbound(self) -> InboundMessage:
        return await self.inbound.get()

    async def publish_outbound(self, msg: OutboundMessage) -> None:
        await self.outbound.put(msg)

    async def consume_outbound(self) -> OutboundMessage:
        return await self.outbound.get()

    @property
    def inbound_size(self) -> int:
        return self.inbound.qsize()

    @property
    def outbound_size(self) -> int:
        return self.outbound.qsize()
