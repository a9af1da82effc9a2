"""The agent loop: the dispatcher. Per-session serial, cross-session concurrent.

Entry points: voice `begin_turn`, the bus (`run`), `process_direct`. Each starts a `Turn` with its
dependencies (`TurnDeps`); the rules for running them live in `wren.agent.sessions.SessionTurns`:

- one turn at a time per session key (a lock per key; every entry point takes it);
- a global gate (`[agent] max_concurrent_turns`) bounds engine work across sessions; lock before gate;
- a bus message for a key whose bus turn is active is offered to that turn as a follow-up (answered at a
  safe boundary, leftovers re-published as fresh turns); if it is refused (no active bus turn, or its
  queue is full) it becomes its own turn here. Nothing is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Any

from wren.agent.bus import MessageBus
from wren.agent.engines import make_engine
from wren.agent.engines.base import Engine, render_empty_prompt
from wren.agent.messages import InboundMessage, OutboundMessage
from wren.agent.sessions import SessionTurns
from wren.agent.timeparse import check_timezone_setting, local_timezone
from wren.agent.timers import TimerService
from wren.agent.turn import Turn, TurnDeps
from wren.store import SessionStore, open_session_store
from wren.tools.router import ToolRouter
from wren.tools.spec import ToolSource

if TYPE_CHECKING:
    from wren.config import Config


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
        reply_chars: int = 0,
        turn_deadline_s: float = 0.0,
    ) -> None:
        self.engine = engine
        # Bounds of every answer, whatever the engine ([limits] reply_chars, turn_deadline_s; 0 = none).
        self.reply_chars = reply_chars
        self.turn_deadline_s = turn_deadline_s
        self.store = store
        self.server_tools = server_tools  # a ToolSource with start()/close() (ServerMcpTools), or None
        self.tool_timeout_s = tool_timeout_s
        self.bus = bus or MessageBus()
        # Who runs a turn for which key, and how many run at once; leftovers go back onto the bus.
        # The store's lease makes that one turn per key across every instance sharing the store.
        self.sessions = SessionTurns(max_concurrent_turns, republish=self.bus.publish_inbound,
                                     lease=store.turn_lease)
        # The IANA zone ([server] timezone) wins over the fixed offset; ValueError names a bad zone.
        self._tz: tzinfo = local_timezone(timezone_name, timezone_offset_minutes)
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
            open_session_store(config),  # SQLite in the data dir, or the Redis store instances share
            server_tools=server_tools,
            max_concurrent_turns=config.agent.max_concurrent_turns,
            tool_timeout_s=config.mcp.tool_timeout_s,
            timezone_offset_minutes=config.server.timezone_offset_minutes,
            timezone_name=config.server.timezone,
            reply_chars=config.limits.reply_chars,
            turn_deadline_s=config.limits.turn_deadline_s,
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

    # what turns are given ----------------------------------------------------------------------
    def track(self, task: asyncio.Task[Any]) -> None:
        """Keep a reference to a background task so close() can cancel it."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def now(self) -> datetime:
        """Local wall-clock time in the configured zone (tests may replace it on the instance)."""
        return datetime.now(self._tz)

    def tool_router(self, device_tools: ToolSource | None = None) -> ToolRouter:
        """Server tools as they are now (tests may swap them after start) plus this turn's device tools."""
        return ToolRouter(server=self.server_tools, device=device_tools, timeout=self.tool_timeout_s)

    def turn_deps(self) -> TurnDeps:
        """A turn's dependencies, read at its start (the engine, store and clock may be replaced)."""
        return TurnDeps(sessions=self.sessions, store=self.store, engine=self.engine,
                        now=lambda: self.now(), track=self.track,
                        reply_chars=self.reply_chars, deadline_s=self.turn_deadline_s)

    def _start_turn(
        self, msg: InboundMessage, device_tools: ToolSource | None = None, *, accept_follow_ups: bool = False
    ) -> Turn:
        """The one place turns are made; `accept_follow_ups` only for bus turns (they answer follow-ups)."""
        tools = self.tool_router(device_tools)
        return Turn(self.turn_deps(), msg, tools, accept_follow_ups=accept_follow_ups)

    # entry points ------------------------------------------------------------------------------
    def begin_turn(self, msg: InboundMessage, device_tools: ToolSource | None = None) -> Turn:
        """Start a turn (voice): iterate it for TextChunk/Emotion events; `interrupt(spoken)` on barge-in."""
        return self._start_turn(msg, device_tools)

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
        text = await self._start_turn(msg, device_tools).text()
        return OutboundMessage(channel=channel, chat_id=chat_id, content=text)

    async def run(self) -> None:
        """Consume the bus: a follow-up the key's active turn accepts goes there; anything else is a turn."""
        while True:
            msg = await self.bus.consume_inbound()
            if self.sessions.offer(msg):
                continue
            self.track(asyncio.get_running_loop().create_task(self._dispatch(msg)))

    async def _dispatch(self, msg: InboundMessage) -> None:
        turn = self._start_turn(msg, accept_follow_ups=True)
        async for _ in turn:
            pass
        for reply in turn.replies:  # every finished answer is delivered, none silently dropped
            await self.bus.publish_outbound(
                OutboundMessage(channel=msg.channel, chat_id=msg.chat_id, content=reply,
                                metadata={"session_key": msg.session_key})
            )
