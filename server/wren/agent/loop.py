"""The agent loop: per-session serial, cross-session concurrent.

- One `asyncio.Lock` per session key (in a WeakValueDictionary, so idle keys cost nothing): one turn at a
  time per session; every entry point (voice `begin_turn`, the bus, `process_direct`) takes it.
- A global gate (`asyncio.Semaphore`, `[agent] max_concurrent_turns`) bounds engine work across sessions.
  The lock is taken before the gate.
- Bus turns register a bounded pending queue right after taking the lock (before waiting on the gate), so
  follow-ups that arrive mid-turn are queued, answered at a safe boundary, and any leftovers are
  re-published as fresh turns; a full queue makes the message its own turn. Nothing is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from datetime import datetime, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wren.agent.bus import MessageBus
from wren.agent.engines import make_engine
from wren.agent.engines.base import Engine, render_empty_prompt
from wren.agent.messages import InboundMessage, OutboundMessage
from wren.agent.store import SessionStore
from wren.agent.timeparse import check_timezone_setting, local_timezone
from wren.agent.timers import TimerService
from wren.agent.turn import Turn
from wren.tools.router import ToolRouter
from wren.tools.spec import ToolSource

if TYPE_CHECKING:
    from wren.config import Config

log = logging.getLogger(__name__)

PENDING_QUEUE_SIZE = 20


class AgentLoop:
    def __init__(
        self,
        engine: Engine,
        store: SessionStore,
        *,
        server_tools: Any | None = None,
        max_concurrent_turns: int = 8,
        tool_timeout_s: float = 10.0,
        timezone_offset_minutes: int = 0,
        timezone_name: str = "",
        bus: MessageBus | None = None,
    ) -> None:
        self.engine = engine
        self.store = store
        self.server_tools = server_tools  # a ToolSource with start()/close() (ServerMcpTools), or None
        self.tool_timeout_s = tool_timeout_s
        self.bus = bus or MessageBus()
        self.gate = asyncio.Semaphore(max_concurrent_turns if max_concurrent_turns > 0 else 1_000_000)
        # The IANA zone ([server] timezone) wins over the fixed offset; ValueError names a bad zone.
        self._tz: tzinfo = local_timezone(timezone_name, timezone_offset_minutes)
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._pending: dict[str, asyncio.Queue[InboundMessage]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._runner: asyncio.Task[None] | None = None
        # Timers, alarms and reminders of every session, on the agent's clock (tests may replace `now`).
        self.timers = TimerService(store, now=lambda: self.now())
        use_timers = getattr(engine, "use_timers", None)
        if callable(use_timers):
            use_timers(self.timers)

    @classmethod
    def from_config(cls, config: Config) -> AgentLoop:
        check_timezone_setting(config.server.timezone)
        server_tools = None
        if config.mcp.config_file:
            from wren.tools.server_mcp import ServerMcpTools

            server_tools = ServerMcpTools.from_file(config.mcp.config_file, config.mcp)
        return cls(
            make_engine(config),
            SessionStore(
                Path(config.server.data_dir) / "sessions.sqlite3", config.agent.history_max_messages
            ),
            server_tools=server_tools,
            max_concurrent_turns=config.agent.max_concurrent_turns,
            tool_timeout_s=config.mcp.tool_timeout_s,
            timezone_offset_minutes=config.server.timezone_offset_minutes,
            timezone_name=config.server.timezone,
        )

    async def start(self) -> None:
        await self.store.open()
        await self.timers.start()
        if hasattr(self.server_tools, "start"):
            await self.server_tools.start()
        await self.engine.start()
        self._runner = asyncio.get_running_loop().create_task(self.run(), name="agent-bus")

    async def close(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
            self._runner = None
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.timers.close()
        await self.engine.close()
        if hasattr(self.server_tools, "close"):
            await self.server_tools.close()
        await self.store.close()

    # helpers used by Turn ------------------------------------------------------------------------
    def track(self, task: asyncio.Task[Any]) -> None:
        """Keep a reference to a background task so close() can cancel it."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def now(self) -> datetime:
        return datetime.now(self._tz)

    def session_lock(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock

    def register_pending(self, key: str) -> asyncio.Queue[InboundMessage]:
        queue: asyncio.Queue[InboundMessage] = asyncio.Queue(PENDING_QUEUE_SIZE)
        self._pending[key] = queue
        return queue

    def unregister_pending(self, key: str, queue: asyncio.Queue[InboundMessage]) -> list[InboundMessage]:
        """Remove the session's pending queue (if still this one) and return what was left in it."""
        if self._pending.get(key) is queue:
            del self._pending[key]
        leftovers = []
        while not queue.empty():
            leftovers.append(queue.get_nowait())
        return leftovers

    def tool_router(self, device_tools: ToolSource | None = None) -> ToolRouter:
        return ToolRouter(server=self.server_tools, device=device_tools, timeout=self.tool_timeout_s)

    # entry points ------------------------------------------------------------------------------
    def begin_turn(self, msg: InboundMessage, device_tools: ToolSource | None = None) -> Turn:
        """Start a turn (voice): iterate it for TextChunk/Emotion events; `interrupt(spoken)` on barge-in."""
        return Turn(self, msg, self.tool_router(device_tools))

    def render_prompt(self, session_key: str, kind: str, count: int) -> str:
        render = getattr(self.engine, "render_prompt", None)
        if callable(render):
            return str(render(kind, count))
        return render_empty_prompt(kind, count)

    async def process_direct(
        self,
        content: str,
        session_key: str = "cli:direct",
        channel: str = "cli",
        chat_id: str = "direct",
        sender_id: str = "user",
        device_tools: ToolSource | None = None,
    ) -> OutboundMessage:
        """A text turn through the same core (same lock and history), returning the reply."""
        msg = InboundMessage(channel=channel, sender_id=sender_id, chat_id=chat_id, content=content,
                             session_key_override=session_key)
        turn = Turn(self, msg, self.tool_router(device_tools))
        text = await turn.text()
        return OutboundMessage(channel=channel, chat_id=chat_id, content=text)

    async def run(self) -> None:
        """Consume the bus: queue follow-ups into an active session's turn, start a task otherwise."""
        while True:
            msg = await self.bus.consume_inbound()
            queue = self._pending.get(msg.session_key)
            if queue is not None:
                try:
                    queue.put_nowait(msg)
                    continue
                except asyncio.QueueFull:
                    log.info("pending queue full for %s; message becomes its own turn", msg.session_key)
            self.track(asyncio.get_running_loop().create_task(self._dispatch(msg)))

    async def _dispatch(self, msg: InboundMessage) -> None:
        turn = Turn(self, msg, self.tool_router(), accept_pending=True)
        async for _ in turn:
            pass
        for reply in turn.replies:  # every finished answer is delivered, none silently dropped
            await self.bus.publish_outbound(
                OutboundMessage(channel=msg.channel, chat_id=msg.chat_id, content=reply,
                                metadata={"session_key": msg.session_key})
            )
