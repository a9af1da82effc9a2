"""Turning a streamed LLM reply into speakable chunks, and text into something TTS can say.

`SentenceSplitter.feed(delta)` returns the chunks that are complete so far. The first chunk is released at
the first clause boundary (a comma is enough) once it is at least `first_min_chars` long, because time to
first audio is proportional to the length of the first chunk piper synthesises. If the first `first_max_words`
words (8) have arrived with no boundary among them and no sentence end after them yet (an LLM still writing
a long first sentence), they are released at that word boundary, so synthesis can start; a sentence that is
already whole in the buffer is never cut, so it keeps its sentence-final prosody. Later chunks end at sentence
ends (. ! ? ; : and CJK 。！？；：, or a line break). A boundary is only trusted once the character after it
has arrived (so "3." + "5" is never split, nor "Mr." + " Smith"); `flush()` releases whatever is left.
"""

from __future__ import annotations

import re
import unicodedata

SENTENCE_END = ".!?;:…"
CJK_SENTENCE_END = "。！？；：!?"  # CJK needs no following space; ASCII ?! after CJK text counts too
CLAUSE_END = ",，、"
# May follow the punctuation before the space: 'He said "no." Then', '**Note:** Then'.
CLOSERS = "\"')]}”’»」』*_`"
_ABBREVIATION_WORDS = (
    # Only words that rarely end a sentence: "no" is missing on purpose ("The answer is no. Next").
    "mr mrs ms dr prof sr jr st vs etc e.g i.e a.m p.m approx dept fig inc ltd corp mt vol "
    "jan feb mar apr jun jul aug sep sept oct nov dec u.s u.k"
)
ABBREVIATIONS = frozenset(_ABBREVIATION_WORDS.split())
# Words that begin a phrase: a long first sentence with no comma is cut before one of them (first_max_words).
_JOINING = (
    "and or but so because for with without to at in on of from by about that which who when where while "
    "if than then until after before since as into"
)
JOINING_WORDS = frozenset(_JOINING.split())
_WORD = re.compile(r"\S+")


def _is_cjk(ch: str) -> bool:
    return ch != "" and (
        "\u3000" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af" or "\uff00" <= ch <= "\uffef"
    )


class SentenceSplitter:
    def __init__(self, first_min_chars: int = 10, min_chars: int = 2, max_chars: int = 220,
                 first_max_words: int = 8) -> None:
        self.first_min_chars = first_min_chars
        self.first_max_words = first_max_words  # 0: the first chunk waits for a boundary like the others
        self.min_chars = min_chars
        self.max_chars = max_chars  # no boundary for this long: cut at the last space rather than wait
        self._buffer = ""
        self._released = 0

    def feed(self, text_delta: str) -> list[str]:
        self._buffer += text_delta
        chunks = []
        while True:
            cut = self._find_cut()
            if cut is None:
                break
            chunk, self._buffer = self._buffer[:cut].strip(), self._buffer[cut:]
            if _speakable(chunk):  # punctuation or markup alone ("...", "---") has nothing to say
                chunks.append(chunk)
                self._released += 1
        return chunks

    def flush(self) -> list[str]:
        """Everything not yet released (end of the reply); the splitter is then ready for a new reply."""
        rest, self._buffer = self._buffer.strip(), ""
        self._released = 0
        return [rest] if _speakable(rest) else []

    # ------------------------------------------------------------------ boundaries

    def _find_cut(self) -> int | None:
        """Index just past the first releasable boundary in the buffer, or None to wait for more text."""
        text = self._buffer
        first = self._released == 0
        for i, ch in enumerate(text):
            if ch == "\n":
                if text[:i].strip():
                    return i + 1
                continue
            is_sentence_end = ch in SENTENCE_END or ch in CJK_SENTENCE_END
            # Only the first chunk of a reply may end at a comma, and only once it is long enough to be
            # worth saying on its own ("Well," alone would be an awkward fragment).
            is_clause = first and not is_sentence_end and ch in CLAUSE_END
            if not is_sentence_end and not is_clause:
                continue
            end = self._boundary_end(text, i, clause=is_clause)
            if end is None:
                if is_sentence_end and self._needs_more(text, i):
                    return None  # "3." might become "3.5": wait for the next delta
                continue
            min_len = self.first_min_chars if is_clause else self.min_chars
            if len(text[:end].strip()) < min_len:
                continue
            return end
        if len(text) > self.max_chars:
            space = text.rfind(" ", 0, self.max_chars)
            return space + 1 if space > 0 else None
        if first and self.first_max_words > 0:
            return self._after_words(text, self.first_max_words)
        return None

    @staticmethod
    def _after_words(text: str, count: int) -> int | None:
        """Where to cut a first chunk of `count` words that has no boundary, once the `count`-th word is
        complete (its following whitespace arrived): before the last joining word among words 5..count, so
        at least 4 words go first ("... at 10:30 | for 1,000 people"), where a speaker would pause anyway;
        else after word `count`."""
        starts = [m.start() for m in _WORD.finditer(text)]
        ends = [m.end() for m in _WORD.finditer(text)]
        if len(starts) < count or ends[count - 1] >= len(text):
            return None
        for n in range(count - 1, 3, -1):  # word index n (0-based) begins a phrase: cut before it
            word = text[starts[n]:ends[n]].lower().strip("\"'([{")
            if word in JOINING_WORDS:
                return starts[n]
        return ends[count - 1] + 1

    def _needs_more(self, text: str, i: int) -> bool:
        j = i + 1
        while j < len(text) and (text[j] in SENTENCE_END or text[j] in CLOSERS):
            j += 1
        return j >= len(text)

    def _boundary_end(self, text: str, i: int, clause: bool) -> int | None:
        """If the punctuation at i ends a chunk, the index after it (and after closing quotes); else None."""
        ch = text[i]
        prev = text[i - 1] if i else ""
        if ch in "。！？；：，、" or (_is_cjk(prev) and ch in CJK_SENTENCE_END + CLAUSE_END):
            j = i + 1
            while j < len(text) and (text[j] in CJK_SENTENCE_END or text[j] in CLOSERS):
                j += 1
            return j
        # ASCII punctuation: run of punctuation/closers, then whitespace must follow.
        j = i + 1
        while j < len(text) and (text[j] in SENTENCE_END or text[j] in CLOSERS):
            j += 1
        if j >= len(text) or not text[j].isspace():
            return None  # "3.5", "10:30", "1,000", "e.g." mid-token, or not arrived yet
        if ch == "." and not clause and self._is_abbreviation(text, i):
            return None
        if ch == "." and text[:i].strip().isdigit():
            return None  # a list marker ("1. Preheat the oven"), not a sentence "1."
        return j

    @staticmethod
    def _is_abbreviation(text: str, dot: int) -> bool:
        start = dot
        while start > 0 and not text[start - 1].isspace():
            start -= 1
        word = text[start:dot].lower().lstrip("\"'([{")
        if not word:
            return False
        if word in ABBREVIATIONS:
            return True
        # Initials: "J. R. R. Tolkien", "U.S" (a single letter, or letters separated by dots)
        return len(word.replace(".", "")) == 1 and word.replace(".", "").isalpha()


def _speakable(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


# ---------------------------------------------------------------------- cleaning

_CODE_BLOCK = re.compile(r"```.*?(```|$)", re.S)
_INLINE_CODE = re.compile(r"`([^`]*)`")
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_URL = re.compile(r"https?://\S+")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s*", re.M)
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+", re.M)
_QUOTE = re.compile(r"^\s*>\s?", re.M)
_EMPHASIS = re.compile(r"(\*{1,3}|_{2,3}|~~)(?=\S)(.+?)(?<=\S)\1")
_UNDERSCORE_EMPHASIS = re.compile(r"(?<!\w)_(?=\S)(.+?)(?<=\S)_(?!\w)")  # _word_, never snake_case
_LONE_MARKS = re.compile(r"[*#~^|<>]+")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}.*$", re.M)
_SPACES = re.compile(r"[ \t\u00a0]+")


def _is_emoji_or_symbol(ch: str) -> bool:
    cat = unicodedata.category(ch)
    if cat in ("Cs", "Co") or (cat == "So" and ord(ch) >= 0x2190):
        return True  # arrows, dingbats, pictographs; keeps sayable symbols such as ° © ™ ℃
    code = ord(ch)
    # variation selectors, zero-width joiner, skin tones, keycap combiner
    return code in (0x200D, 0x20E3) or 0xFE00 <= code <= 0xFE0F or 0x1F3FB <= code <= 0x1F3FF


_CLOCK = re.compile(r"\b([01]?\d|2[0-3]):([0-5]\d)\b(?!:\d)")
_DAY_HALF = re.compile(r"\s*(?:[AaPp]\.?[Mm]\b\.?)")


def _say_clock(match: re.Match[str]) -> str:
    hour, minute = match.group(1).lstrip("0") or "0", match.group(2)
    if minute == "00":  # "6:00 PM" → "6 PM"; "18:00" → "18 hundred"
        followed_by_half = _DAY_HALF.match(match.string, match.end()) is not None
        return hour if followed_by_half else f"{hour} hundred"
    return f"{hour} oh {minute[1]}" if minute[0] == "0" else f"{hour} {minute}"


def say_clock_times(text: str) -> str:
    """Clock times as people say them: "6:07" → "6 oh 7", "6:45" → "6 45", "6:00 PM" → "6 PM" (piper
    reads "6:07" as "six zero seven", which listeners and recognisers mishear)."""
    return _CLOCK.sub(_say_clock, text)


def clean_for_speech(text: str) -> str:
    """Strip what TTS cannot say: markdown (code, links, emphasis, headings, bullets, tables), URLs and
    emoji/pictographs. Keeps words, numbers, ordinary punctuation and CJK text."""
    text = _CODE_BLOCK.sub(" ", text)
    text = _INLINE_CODE.sub(r"\1", text)
    text = _IMAGE.sub(r"\1", text)
    text = _LINK.sub(r"\1", text)
    text = _URL.sub("", text)
    text = _TABLE_RULE.sub("", text)
    text = _HEADING.sub("", text)
    text = _QUOTE.sub("", text)
    text = _BULLET.sub("", text)
    text = _EMPHASIS.sub(r"\2", text)
    text = _UNDERSCORE_EMPHASIS.sub(r"\1", text)
    # Table rows: "| a | b |" → "a, b" (outer pipes dropped, inner ones become pauses)
    text = "\n".join(
        ", ".join(cell.strip() for cell in line.strip().strip("|").split("|")) if "|" in line else line
        for line in text.splitlines()
    )
    text = _LONE_MARKS.sub(" ", text)
    text = "".join(ch for ch in text if not _is_emoji_or_symbol(ch))
    lines = [_SPACES.sub(" ", line).strip() for line in text.splitlines()]
    # A line break is a pause: give lines without end punctuation a full stop so they are not run together.
    lines = [line for line in lines if line]
    text = " ".join(
        line if line[-1] in ".!?;:,…。！？；：" or n == len(lines) - 1 else line + "."
        for n, line in enumerate(lines)
    )
    text = re.sub(r"\s+([,.!?;:])", r"\1", text)
    text = re.sub(r"(,\s*){2,}", ", ", text).strip(" ,")
    return say_clock_times(text)
