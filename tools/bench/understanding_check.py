"""The understanding bench's request set, its WER normaliser and its checker (the real built-in agent).

`understanding.py` decides what was heard; this module decides whether that was understood: the heard text
goes through `wren.agent.loop.AgentLoop` with the built-in engine (SQLite store in a temp dir) and a fake
xiaozhi device whose tool calls are recorded, and the calls and the reply are compared with the request's
`expect` from tools/bench/data/requests.toml (the format is described at the top of that file).
"""

from __future__ import annotations

import re
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REQUESTS_PATH = Path(__file__).resolve().parent / "data" / "requests.toml"
# Reading the device's status changes nothing, so an agent may always do it (e.g. before "louder").
READ_ONLY_TOOLS = {"self.get_device_status"}
# The built-in engine's answers for "no idea" and "heard nothing": never an understanding, whatever the regex.
FALLBACK_REPLY = re.compile(r"don't understand|didn't catch", re.IGNORECASE)


@dataclass(frozen=True)
class Request:
    text: str
    category: str
    quick: bool = False
    setup: tuple[str, ...] = ()
    expect: dict[str, Any] | None = None  # None: an open question, for WER only

    @property
    def judged(self) -> bool:
        return self.expect is not None


def load_requests(quick: bool = False, path: Path = REQUESTS_PATH) -> list[Request]:
    with open(path, "rb") as f:
        raw = tomllib.load(f)["request"]
    requests = [
        Request(r["text"], r["category"], bool(r.get("quick")), tuple(r.get("setup", ())), r.get("expect"))
        for r in raw
    ]
    return [r for r in requests if r.quick] if quick else requests


# ---- WER: normalised words -----------------------------------------------------------------------------

_UNIT_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
               "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
               "nineteen"]
_TEN_WORDS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_UNITS = {w: i for i, w in enumerate(_UNIT_WORDS)}
_TENS = {w: 10 * i for i, w in enumerate(_TEN_WORDS, 2)}
_CONTRACTIONS = {"what's": "what is", "it's": "it is", "i'm": "i am", "that's": "that is", "let's": "let us"}


def _numbers_as_digits(words: list[str]) -> list[str]:
    """ "eighty five" -> "85", "one hundred" -> "100"; so "set the volume to 30" and "... thirty" agree."""
    out: list[str] = []
    value: int | None = None
    for word in words:
        after_tens = value is not None and value % 10 == 0 and value % 100 != 10  # "eighty" + "five"
        if word in _UNITS and (value is None or (after_tens and _UNITS[word] < 10)):
            value = (value or 0) + _UNITS[word]
        elif word in _TENS and (value is None or value % 100 == 0):
            value = (value or 0) + _TENS[word]
        elif word == "hundred" and value is not None and value < 10:
            value *= 100
        else:
            if value is not None:
                out.append(str(value))
                value = None
            if word in _UNITS or word in _TENS:  # "two three": a new number starts
                value = _UNITS.get(word, _TENS.get(word))
            else:
                out.append(word)
    if value is not None:
        out.append(str(value))
    return out


def normalise(text: str) -> list[str]:
    """Lowercase words, punctuation removed ("%" read as "percent"), common contractions expanded, numbers
    as digits. Deliberately not `wren.agent.nlu.normalize`: that one also repairs recogniser slips
    ("thirdy" -> 30) and folds spellings, which would hide errors the WER is there to count."""
    words = re.findall(r"[a-z0-9]+(?:'[a-z]+)?", text.lower().replace("-", " ").replace("%", " percent "))
    expanded = " ".join(_CONTRACTIONS.get(w, w) for w in words).replace("'", "").split()
    return _numbers_as_digits(expanded)


def word_errors(reference: list[str], hypothesis: list[str]) -> int:
    """Levenshtein distance in words (substitutions + insertions + deletions)."""
    row = list(range(len(hypothesis) + 1))
    for i, ref in enumerate(reference, 1):
        prev, row[0] = row[0], i
        for j, hyp in enumerate(hypothesis, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ref != hyp))
    return row[-1]


# ---- the checker ---------------------------------------------------------------------------------------


def _argument_matches(want: Any, got: Any) -> bool:
    if isinstance(want, dict):  # {min = .., max = ..}
        if not isinstance(got, int | float) or isinstance(got, bool):
            return False
        return want.get("min", got) <= got <= want.get("max", got)
    return bool(want == got)


def _call_matches(want: dict[str, Any], call: tuple[str, dict[str, Any]]) -> bool:
    name, args = call
    wanted_args = want.get("args", {})
    if name != want["tool"] or set(args) != set(wanted_args):
        return False
    return all(_argument_matches(wanted_args[k], args[k]) for k in wanted_args)


def check(expect: dict[str, Any], reply: str, calls: list[tuple[str, dict[str, Any]]]) -> tuple[bool, str]:
    """(understood, why not): the expected calls were made, nothing else was changed, the reply matches."""
    if FALLBACK_REPLY.search(reply):
        return False, f"fallback reply {reply[:60]!r}"
    remaining = list(calls)
    for want in expect.get("calls", []):
        hit = next((c for c in remaining if _call_matches(want, c)), None)
        if hit is None:
            return False, f"no call {want['tool']}({want.get('args', {})}), calls {calls}"
        remaining.remove(hit)
    changing = [c for c in remaining if c[0] not in READ_ONLY_TOOLS]
    if changing:
        return False, f"unexpected call(s) {changing}"
    pattern = expect.get("reply")
    if pattern and not re.search(pattern, reply):
        return False, f"reply {reply[:80]!r} !~ {pattern!r}"
    return True, ""


@dataclass
class Verdict:
    understood: bool
    reason: str
    reply: str
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


class UnderstandingChecker:
    """The real built-in agent on a temp data dir; `async with UnderstandingChecker() as checker: ...`."""

    def __init__(self) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._agent: Any = None
        self._turns = 0

    async def __aenter__(self) -> UnderstandingChecker:
        from wren.agent.loop import AgentLoop
        from wren.config import Config

        self._tmp = tempfile.TemporaryDirectory(prefix="wren-understanding-")
        config = Config()
        config.server.data_dir = self._tmp.name
        config.agent.engine = "builtin"
        self._agent = AgentLoop.from_config(config)
        await self._agent.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._agent.close()
        if self._tmp is not None:
            self._tmp.cleanup()

    async def judge(self, request: Request, heard: str) -> Verdict:
        """Send the setup turns (typed) and the heard text to a fresh session; compare with `expect`."""
        from tests.agent.fakes import DEVICE_STATUS, XIAOZHI_TOOLS, RecordingTools

        self._turns += 1
        key = f"bench:understanding:{self._turns}"
        for text in request.setup:
            setup_tools = RecordingTools(XIAOZHI_TOOLS, {"self.get_device_status": DEVICE_STATUS})
            await self._agent.process_direct(text, session_key=key, device_tools=setup_tools)
        tools = RecordingTools(XIAOZHI_TOOLS, {"self.get_device_status": DEVICE_STATUS})
        reply = (await self._agent.process_direct(heard, session_key=key, device_tools=tools)).content
        if request.expect is None:
            return Verdict(False, "open question (not judged)", reply, tools.calls)
        understood, reason = check(request.expect, reply, tools.calls)
        return Verdict(understood, reason, reply, tools.calls)

