"""An engine for any OpenAI-compatible chat-completions endpoint (Ollama, llama.cpp server, vLLM, cloud).

Streams (`stream: true`, server-sent events) so the first words can be spoken while the model is still
writing; assembles `tool_calls` deltas by index; runs tools through the router and loops, at most
`openai_max_tool_rounds` rounds (the last request offers no tools, so the model must answer in words).
Follow-ups that arrived mid-turn are injected after a tool round (a safe boundary). Connection and
read timeouts are `openai_timeout_s`; if the endpoint is down or errors, the reply is a spoken apology.
Each request asks for at most `[limits] llm_max_tokens` tokens (`max_tokens`); the turn cuts a reply that
is longer or takes too long anyway (`wren.agent.turn`), and closing this engine's iterator closes the
HTTP stream at once, so an endless stream is not read on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp

from wren.agent.engines.base import TurnContext
from wren.agent.events import Emotion, TextChunk, TurnEvent
from wren.tools.spec import ToolSpec

if TYPE_CHECKING:
    from wren.config import AgentConfig

log = logging.getLogger(__name__)

APOLOGY_DOWN = "Sorry, I can't reach my language model right now. Please try again in a moment."
APOLOGY_CUT = " Sorry, I lost my train of thought."


class EndpointError(Exception):
    """The endpoint could not be reached, answered with an error status, or stalled."""


@dataclass
class _ToolCall:
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class _Reply:
    text: str = ""
    tool_calls: dict[int, _ToolCall] = field(default_factory=dict)


def openai_tool_name(name: str) -> str:
    """Function names must match ^[a-zA-Z0-9_-]{1,64}$; device names have dots (`self.audio_speaker.x`)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "tool"


def _tool_table(tools: list[ToolSpec]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """OpenAI `tools` entries and the map back from the sanitised name to the real one."""
    entries: list[dict[str, Any]] = []
    back: dict[str, str] = {}
    for tool in tools:
        name = openai_tool_name(tool.name)
        suffix = 2
        while name in back:
            name = f"{openai_tool_name(tool.name)[:60]}_{suffix}"
            suffix += 1
        back[name] = tool.name
        schema = tool.input_schema if tool.input_schema.get("type") == "object" else {"type": "object"}
        entries.append({
            "type": "function",
            "function": {"name": name, "description": tool.description[:1024], "parameters": schema},
        })
    return entries, back


class OpenAIEngine:
    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str = "",
        timeout_s: float = 30.0,
        max_tool_rounds: int = 5,
        system_prompt: str = "",
        max_tokens: int = 0,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_tool_rounds = max(0, max_tool_rounds)
        self.system_prompt = system_prompt
        self.max_tokens = max(0, max_tokens)  # 0: not sent (the server's own default applies)
        self._http: aiohttp.ClientSession | None = None

    @classmethod
    def from_config(cls, agent: AgentConfig, max_tokens: int = 0) -> OpenAIEngine:
        return cls(
            agent.openai_base_url,
            agent.openai_model,
            api_key=agent.openai_api_key,
            timeout_s=agent.openai_timeout_s,
            max_tool_rounds=agent.openai_max_tool_rounds,
            system_prompt=agent.system_prompt,
            max_tokens=max_tokens,
        )

    async def start(self) -> None:
        if self._http is None:
            # Idle read timeout, not a total: a long answer may stream for a while, a stalled one may not.
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.timeout_s, sock_read=self.timeout_s)
            self._http = aiohttp.ClientSession(timeout=timeout)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    def _messages(self, ctx: TurnContext) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        if self.system_prompt:
            now = ctx.now()
            messages.append({
                "role": "system",
                "content": f"{self.system_prompt}\nIt is now {now:%A %d %B %Y, %H:%M}.",
            })
        messages += [{"role": m["role"], "content": m["content"]} for m in ctx.history if m.get("content")]
        messages.append({"role": "user", "content": ctx.text})
        return messages

    async def respond(self, ctx: TurnContext) -> AsyncIterator[TurnEvent]:
        await self.start()
        messages = self._messages(ctx)
        tool_entries, back = _tool_table(ctx.tools.tools)
        yield Emotion("neutral")
        spoke = False
        for round_index in range(self.max_tool_rounds + 1):
            offer_tools = bool(tool_entries) and round_index < self.max_tool_rounds
            reply = _Reply()
            try:
                # aclosing: when the turn stops reading (reply too long, deadline, barge-in), the response
                # is closed now rather than whenever the generator is collected.
                stream = self._stream(messages, tool_entries if offer_tools else None, reply)
                async with contextlib.aclosing(stream) as deltas:
                    async for delta in deltas:
                        spoke = True
                        yield TextChunk(delta)
            except EndpointError as exc:
                log.warning("openai endpoint %s: %s", self.url, exc)
                yield TextChunk(APOLOGY_CUT if spoke else APOLOGY_DOWN)
                return
            if not reply.tool_calls:
                return
            calls = [reply.tool_calls[i] for i in sorted(reply.tool_calls)]
            for n, call in enumerate(calls):
                call.id = call.id or f"call_{round_index}_{n}"
            messages.append({
                "role": "assistant",
                "content": reply.text or None,
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments or "{}"},
                    }
                    for c in calls
                ],
            })
            for call in calls:
                content = await self._run_tool(ctx, back, call)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
            # Safe boundary: follow-ups that arrived during the tool round join the conversation now.
            for follow_up in ctx.take_pending():
                messages.append({"role": "user", "content": follow_up.content})

    async def _run_tool(self, ctx: TurnContext, back: dict[str, str], call: _ToolCall) -> str:
        real = back.get(call.name)
        if real is None:
            return f"Error: there is no tool named {call.name}."
        try:
            arguments = json.loads(call.arguments) if call.arguments.strip() else {}
        except ValueError:
            return f"Error: the arguments for {call.name} were not valid JSON."
        if not isinstance(arguments, dict):
            return f"Error: the arguments for {call.name} must be a JSON object."
        result = await ctx.tools.call(real, arguments)
        return result.text if result.ok else f"Error: {result.text}"

    async def _stream(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, reply: _Reply
    ) -> AsyncIterator[str]:
        """POST one streaming request; yields content deltas, fills `reply` (text and tool calls)."""
        assert self._http is not None
        body: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True}
        if tools:
            body["tools"] = tools
        if self.max_tokens:
            body["max_tokens"] = self.max_tokens
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            async with self._http.post(self.url, json=body, headers=headers) as resp:
                if resp.status >= 400:
                    detail = (await resp.text())[:200]
                    raise EndpointError(f"HTTP {resp.status}: {detail}")
                if "text/event-stream" not in resp.headers.get("Content-Type", ""):
                    # Some servers ignore `stream` and answer with one JSON document.
                    self._absorb(await resp.json(content_type=None), reply, streamed=False)
                    if reply.text:
                        yield reply.text
                    return
                async for data in _sse_events(resp.content):
                    if data == "[DONE]":
                        break
                    try:
                        chunk = json.loads(data)
                    except ValueError:
                        log.debug("skipping a non-JSON SSE event: %r", data[:80])
                        continue
                    if isinstance(chunk, dict) and chunk.get("error"):
                        raise EndpointError(f"error event: {chunk['error']}")
                    delta = self._absorb(chunk, reply, streamed=True)
                    if delta:
                        yield delta
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise EndpointError(f"{exc.__class__.__name__}: {exc}") from None

    @staticmethod
    def _absorb(chunk: Any, reply: _Reply, streamed: bool) -> str:
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        if not choices or not isinstance(choices[0], dict):
            return ""
        part = choices[0].get("delta" if streamed else "message") or {}
        text = part.get("content") or ""
        if not isinstance(text, str):
            text = ""
        reply.text += text
        for index, item in enumerate(part.get("tool_calls") or []):
            if not isinstance(item, dict):
                continue
            slot = reply.tool_calls.setdefault(int(item.get("index", index)), _ToolCall())
            slot.id = item.get("id") or slot.id
            function = item.get("function") or {}
            slot.name += function.get("name") or ""
            slot.arguments += function.get("arguments") or ""
        return text


async def _sse_events(stream: aiohttp.StreamReader) -> AsyncIterator[str]:
    """The `data:` payloads of a server-sent-event stream (multi-line data joined with newlines)."""
    data: list[str] = []
    async for raw in stream:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)
