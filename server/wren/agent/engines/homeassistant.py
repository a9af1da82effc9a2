"""The Home Assistant engine: each turn is one request to HA's conversation API.

`POST {ha_url}/api/conversation/process` with a long-lived access token (`Authorization: Bearer …`) and
`{"text", "language", "conversation_id", "agent_id"}`; the answer's `response.speech.plain.speech` is spoken.
HA tracks a conversation (its chat log, what "it" refers to, an LLM agent's context) by the
`conversation_id` it generates, so each Wren session key keeps the last id HA returned in this engine's
state (persisted with the turn, like the OVOS engine's session) and sends it back on the next turn: two
devices are two HA conversations, and one device's conversation survives a Wren restart for as long as
HA itself still remembers it (HA forgets idle conversations after a few minutes; whatever id an answer
carries replaces the kept one).

Failures are words, never a stuck turn: HA unreachable, slower than `ha_timeout_s` (one bound for the
whole request: HA answers in one JSON document, never a stream), a refused token (logged as such, since
it needs the owner to act) or any other HTTP error each give a short spoken apology and the turn ends
normally (the device gets its `tts stop`). A `response_type` of "error" is HA's own answer ("Sorry, I
couldn't understand that") and is spoken as it is.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import aiohttp

from wren.agent.engines.base import TurnContext
from wren.agent.events import Emotion, TextChunk, TurnEvent

if TYPE_CHECKING:
    from wren.config import AgentConfig

log = logging.getLogger(__name__)

PROCESS_PATH = "/api/conversation/process"
APOLOGY_DOWN = "Sorry, I can't reach Home Assistant right now."
APOLOGY_SLOW = "Sorry, Home Assistant took too long to answer."
APOLOGY_AUTH = "Sorry, Home Assistant did not accept my access token."
APOLOGY_ERROR = "Sorry, Home Assistant could not answer that."
APOLOGY_SILENT = "Sorry, Home Assistant did not say anything."
STATE_KEY = "conversation_id"


class HomeAssistantError(Exception):
    """A request that gave no answer to speak; `apology` is what the user hears instead."""

    def __init__(self, message: str, apology: str) -> None:
        super().__init__(message)
        self.apology = apology


class HomeAssistantEngine:
    name = "homeassistant"

    def __init__(
        self, url: str, token: str, *, agent_id: str = "", language: str = "", timeout_s: float = 15.0
    ) -> None:
        self.base_url = url.strip().rstrip("/")
        self.url = self.base_url + PROCESS_PATH
        self.token = token.strip()
        self.agent_id = agent_id.strip()
        self.language = language.strip()
        self.timeout_s = timeout_s
        self._http: aiohttp.ClientSession | None = None

    @classmethod
    def from_config(cls, agent: AgentConfig) -> HomeAssistantEngine:
        # Checked here, where the engine is made (`wren serve`, `wren chat`): one line and exit 2, not a
        # 401 on every turn later.
        from wren.config import ConfigError

        url = agent.ha_url.strip()
        if not url:
            raise ConfigError("agent.engine = homeassistant needs agent.ha_url (e.g. http://homeassistant.local:8123)")
        if not re.match(r"^https?://[^/\s]+", url):
            raise ConfigError(f"agent.ha_url must be an http:// or https:// URL (got {url!r})")
        if not agent.ha_token.strip():
            raise ConfigError("agent.engine = homeassistant needs agent.ha_token (a long-lived access token; "
                              "WREN_AGENT_HA_TOKEN)")
        if agent.ha_timeout_s <= 0:
            raise ConfigError(f"agent.ha_timeout_s must be more than 0 (got {agent.ha_timeout_s})")
        return cls(url, agent.ha_token, agent_id=agent.ha_agent_id, language=agent.ha_language,
                   timeout_s=agent.ha_timeout_s)

    async def start(self) -> None:
        # No request at start: HA may come up after Wren, and a down HA is an apology per turn, not fatal.
        if self._http is None:
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                headers={"Authorization": f"Bearer {self.token}"},
            )

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    def _body(self, ctx: TurnContext) -> dict[str, Any]:
        body: dict[str, Any] = {"text": ctx.text}
        if self.language:  # empty: HA's own configured language
            body["language"] = self.language
        conversation_id = ctx.state.get(STATE_KEY)
        if isinstance(conversation_id, str) and conversation_id:
            body["conversation_id"] = conversation_id
        if self.agent_id:  # empty: HA's default agent (Assist, or whatever the owner made default)
            body["agent_id"] = self.agent_id
        return body

    async def respond(self, ctx: TurnContext) -> AsyncIterator[TurnEvent]:
        await self.start()
        try:
            answer = await self._process(self._body(ctx))
        except HomeAssistantError as exc:
            yield Emotion("sad")
            yield TextChunk(exc.apology)
            return
        conversation_id = answer.get("conversation_id")
        if isinstance(conversation_id, str) and conversation_id:
            ctx.state[STATE_KEY] = conversation_id  # HA may start a new one (the old expired): follow it
        response = answer.get("response") if isinstance(answer.get("response"), dict) else {}
        kind = response.get("response_type")
        speech = _speech(response)
        if kind == "error":
            data = response.get("data")
            code = data.get("code") if isinstance(data, dict) else None  # no_intent_match, no_valid_targets…
            log.info("Home Assistant could not handle a request in session %s (%s)", ctx.session_key,
                     code or "no code")
        if answer.get("continue_conversation"):
            # HA's agent asked something back. The device's own listening mode decides whether the mic
            # reopens after `tts stop`; the id kept above makes the next utterance the answer to it.
            log.debug("Home Assistant expects a reply in session %s", ctx.session_key)
        if not speech:
            log.warning("Home Assistant answered without speech (response_type %r)", kind)
            yield Emotion("confused")
            yield TextChunk(APOLOGY_SILENT)
            return
        yield Emotion("confused" if kind == "error" else "happy")
        yield TextChunk(speech)

    async def _process(self, body: dict[str, Any]) -> dict[str, Any]:
        """One POST; the decoded answer, or HomeAssistantError with the apology to speak."""
        assert self._http is not None
        try:
            async with self._http.post(self.url, json=body) as resp:
                if resp.status in (401, 403):
                    # Logged as an error: nothing will work until the owner makes a new token. (HA bans an
                    # address after repeated failed logins if its http.ip_ban_enabled is on.)
                    log.error("Home Assistant at %s refused the access token (HTTP %d): check agent.ha_token "
                              "(WREN_AGENT_HA_TOKEN)", self.base_url, resp.status)
                    raise HomeAssistantError(f"HTTP {resp.status}", APOLOGY_AUTH)
                if resp.status >= 400:
                    detail = " ".join((await resp.text())[:200].split())
                    hint = " (is ha_url Home Assistant's base URL?)" if resp.status == 404 else ""
                    log.warning("Home Assistant %s: HTTP %d%s: %s", self.url, resp.status, hint, detail)
                    raise HomeAssistantError(f"HTTP {resp.status}", APOLOGY_ERROR)
                answer = await resp.json(content_type=None)
        except TimeoutError:  # before ClientError: aiohttp's timeouts are both
            log.warning("Home Assistant %s did not answer within %.1f s", self.url, self.timeout_s)
            raise HomeAssistantError("timeout", APOLOGY_SLOW) from None
        except (aiohttp.ClientError, OSError) as exc:
            log.warning("Home Assistant %s unreachable: %s: %s", self.url, exc.__class__.__name__, exc)
            raise HomeAssistantError("unreachable", APOLOGY_DOWN) from None
        except ValueError as exc:  # not JSON
            log.warning("Home Assistant %s answered something that is not JSON: %s", self.url, exc)
            raise HomeAssistantError("not JSON", APOLOGY_ERROR) from None
        if not isinstance(answer, dict):
            log.warning("Home Assistant %s answered JSON that is not an object", self.url)
            raise HomeAssistantError("not an object", APOLOGY_ERROR)
        return answer


def _speech(response: dict[str, Any]) -> str:
    """`speech.plain.speech`, else the text of `speech.ssml.speech` (an agent may set only SSML)."""
    speech = response.get("speech") if isinstance(response.get("speech"), dict) else {}
    for kind in ("plain", "ssml"):
        part = speech.get(kind)
        text = part.get("speech") if isinstance(part, dict) else None
        if isinstance(text, str) and text.strip():
            if kind == "ssml":
                text = re.sub(r"<[^>]+>", " ", text)
            return " ".join(text.split())
    return ""
