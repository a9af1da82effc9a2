"""Every cell of the listen-state table (wren.session.listen_rules.TABLE) as behaviour of a real
DeviceSession, and the session's leniency rules (docs/protocol.md, "Leniency").

The test is parametrised over the table's keys, so a new cell is tested as soon as it is added: the session
is put into the cell's state and mode, the cell's event is produced (a message, audio, or for the VAD's
events the frames that make them: speech for an onset, speech then silence for the end, silence for "no
speech"), and the cell's action is checked by what the session then says and does (tests/session/harness.py).

States are entered the way a device gets there: *listening* after `listen start`; *speaking* while a
reply is held in progress (the agent double holds the reply to a typed query after its first sentence);
*listening + speaking* by a `listen start` during that reply. *Idle* in a mode is a `listen start` in that
mode followed by a second hello, which drops the utterance and keeps the mode: no event of the table stops
listening in every mode without answering something first, and hello is not one of them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable

import pytest
from wren.pipeline.turn_detection import ListenMode
from wren.session.listen_rules import TABLE, Action, ListenEvent, ListenState

from shared_protocol.constants import CLOSE_NORMAL
from tests.session.harness import (
    SLOW_FIRST,
    SLOW_QUERY,
    SLOW_REST,
    TYPED,
    WAKE,
    WORDS,
    Harness,
    Sent,
    hello,
    listen,
    prompt_words,
    silence_frames,
    speech_frames,
)

IDLE, LISTENING, SPEAKING, BOTH = ListenState
AUTO, MANUAL, REALTIME = ListenMode.AUTO, ListenMode.MANUAL, ListenMode.REALTIME
E = ListenEvent
OTHER_MODE = {AUTO: MANUAL, MANUAL: REALTIME, REALTIME: AUTO}  # a `listen start` in a mode not yet in use
MAX_LENGTH_FRAMES = 17  # vad.max_utterance_s = 0.9: onset at frame 3, then 15 frames of 60 ms

@pytest.fixture
async def h():
    harness = Harness()
    try:
        yield harness
    finally:
        await harness.aclose()


# ---- getting into a state -----------------------------------------------------------------------------


async def enter(h: Harness, state: ListenState, mode: ListenMode) -> None:
    await h.start()
    await h.send(listen("start", mode))
    if state is not LISTENING:
        await h.send(hello())  # drops the utterance, keeps the mode
    if state in (SPEAKING, BOTH):
        h.agent.hold_next()
        await h.send(listen("detect", text=SLOW_QUERY))
        await h.wait(lambda: _audio_after(h, SLOW_FIRST), "the held reply's first sentence")
    if state is BOTH:
        await h.send(listen("start", mode))
    await h.sync()
    assert h.state is state
    assert (h.listening_mode or h.session.turns.mode) is mode
    h.mark()


def _audio_after(h: Harness, sentence: str) -> bool:
    sent = h.since(0)
    at = next((i for i, s in enumerate(sent) if s.is_("tts", "sentence_start") and s.msg["text"] == sentence),
              None)
    return at is not None and any(s.data is not None for s in sent[at:])


async def capture_words(h: Harness, state: ListenState) -> None:
    """Speech into the utterance being captured, so it has words. In realtime the onset barges in: then a
    timer announcement, started after it, is the reply in progress that keeps the state."""
    await h.audio(speech_frames(300))
    await h.sync()
    await keep_speaking(h, state)
    assert h.state is state
    h.mark()


async def keep_speaking(h: Harness, state: ListenState) -> None:
    """Speech in realtime mode barges in; in "listening + speaking" a reply must then be in progress again."""
    if state is BOTH and h.session.listener.mode is REALTIME:
        assert h.count(is_stop) == 1  # the barge-in
        await h.wait(lambda: not h.session.replies.busy, "the barged-in reply to end")
        await h.announce()
        await h.sync()


# ---- producing an event ---------------------------------------------------------------------------------


async def produce(h: Harness, event: ListenEvent, state: ListenState, mode: ListenMode) -> None:
    if event is E.START:
        await h.send(listen("start", OTHER_MODE[mode]))
    elif event is E.STOP:
        await h.send(listen("stop"))
    elif event is E.WAKE_WORD:
        await h.send(listen("detect", text=WAKE))
    elif event is E.TYPED:
        await h.send(listen("detect", text=TYPED))
    elif event in (E.AUDIO, E.ONSET):
        await h.audio(speech_frames(300))
    elif event is E.END_MARK:
        await h.audio([b""])
    elif event is E.ABORT:
        await h.send({"type": "abort"})
    elif event is E.INPUT_END:
        if mode is MANUAL:  # silence never ends a manual utterance: the maximum length does
            await h.audio(speech_frames(MAX_LENGTH_FRAMES * 60))
        else:
            await h.audio(speech_frames(300))
            await h.sync()
            await keep_speaking(h, state)
            assert h.state is state
            await h.audio(silence_frames(300))
    elif event is E.NO_SPEECH:
        await h.audio(silence_frames(1200 if mode is MANUAL else 600))
    elif event is E.REPLY_ENDED:
        h.release()
        await h.settle()
    else:
        raise NotImplementedError(f"no way to produce {event!r} yet")
    await h.sync()


# ---- observing ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Shape:
    """What a NOTHING leaves as it was."""

    state: ListenState
    listening: ListenMode | None
    utterances: int  # VAD streams: one per utterance begun
    onsets: int  # recogniser streams: one per speech onset
    empty_turns: int
    stats: tuple


def shape(h: Harness) -> Shape:
    return Shape(h.state, h.listening_mode, len(h.vad.streams), len(h.asr.streams),
                 h.session.turns.decider.rule.empty_count, dataclasses.astuple(h.session.stats))


def is_stop(s: Sent) -> bool:
    return s.is_("tts", "stop")


def brief(msgs: list[dict]) -> list[tuple]:
    return [(m["type"], m.get("state"), m.get("text")) for m in msgs]


async def answers_speech(h: Harness, mode: ListenMode) -> None:
    """Listening in `mode`, shown by behaviour: speech then silence makes an utterance (ended by the VAD,
    or by `listen stop` in manual mode, where silence ends nothing) and its words are answered."""
    assert h.listening_mode is mode
    h.mark()
    await h.audio(speech_frames(300) + silence_frames(300))
    await h.sync()
    if mode is MANUAL:
        assert h.listening_mode is MANUAL
        await h.send(listen("stop"))
    h.release()
    stt = await h.stt(WORDS)
    assert stt.listening is (mode is REALTIME)  # realtime begins again at once


async def reply_goes_on(h: Harness) -> None:
    """The held reply was not cancelled: released, the rest of it is spoken and it ends normally."""
    assert not h.count(is_stop), h.summary()
    h.release()
    await h.wait(lambda: h.sentences(SLOW_REST) and h.count(is_stop), "the rest of the held reply")


async def reply_is_gone(h: Harness) -> None:
    """Exactly one `tts stop`, and nothing of the cancelled reply after it, even once the agent goes on."""
    assert h.count(is_stop) == 1, h.summary()
    stop_at = h.index(is_stop)
    h.release()
    await h.wait(lambda: not h.session.replies.busy, "the cancelled reply to end")
    await asyncio.sleep(0.05)
    await h.sync()
    after = h.since()[stop_at + 1:]
    assert not h.sentences(SLOW_REST)
    assert not [s for s in after if s.data is not None or (s.msg and s.msg["type"] in ("tts", "llm"))]
    held = h.agent.turns[0]
    assert held.interrupted == [SLOW_FIRST] and not held.finished  # the history keeps what was heard


# ---- the checks, one per action ---------------------------------------------------------------------------

Check = Callable[[Harness, ListenEvent, ListenState, ListenMode], Awaitable[None]]


async def begins(h, event, state, mode):
    """BEGIN: a fresh utterance in the message's mode; BEGIN_AGAIN: in the mode already in use."""
    new_mode = OTHER_MODE[mode] if TABLE[(event, state, mode)] is Action.BEGIN else mode
    before = shape(h)
    await produce(h, event, state, mode)
    assert h.listening_mode is new_mode
    assert len(h.vad.streams) == before.utterances + 1  # nothing carried over
    assert h.session.turns.decider.rule.empty_count == 0  # not an empty turn
    assert not h.texts()  # nothing said, nothing cancelled
    await answers_speech(h, new_mode)


async def ends(h, event, state, mode):
    """The utterance ends and its words are answered (an empty one: the empty-input rule); listening is not
    begun again (END), or is, at once (END_THEN_AGAIN)."""
    again = TABLE[(event, state, mode)] is Action.END_THEN_AGAIN
    if event is E.NO_SPEECH:
        await no_speech_ends(h, mode, again)
        return
    if event in (E.STOP, E.END_MARK):
        await capture_words(h, state)
    before = shape(h)
    await produce(h, event, state, mode)
    if again:
        assert h.listening_mode is mode and len(h.vad.streams) == before.utterances + 1
    h.release()
    stt = await h.stt(WORDS)
    assert stt.listening is again, h.summary()
    if again:
        await h.settle()
        await answers_speech(h, mode)


async def no_speech_ends(h: Harness, mode: ListenMode, again: bool) -> None:
    """No speech for the timeout is an empty turn: the rule keeps listening quietly twice, and the third time
    says goodbye and closes. With END the goodbye is said while not listening; END_THEN_AGAIN listens on."""
    before = shape(h)
    await produce(h, E.NO_SPEECH, LISTENING, mode)
    assert h.session.turns.decider.rule.empty_count == 1
    assert not h.texts()
    assert h.listening_mode is mode and len(h.vad.streams) == before.utterances + 1
    await h.audio(silence_frames(1200))  # two more timeouts
    await h.wait(lambda: h.conn.closed, "the goodbye")
    goodbye = h.sentences(prompt_words("silence", 3))
    assert goodbye, h.summary()
    assert goodbye[0].listening is again
    assert not h.stts(WORDS)
    assert h.conn.closed_with[0] == CLOSE_NORMAL


async def feeds(h, event, state, mode):
    before = shape(h)
    dropped = h.session.stats.binary_not_listening
    await produce(h, event, state, mode)
    assert h.session.stats.binary_not_listening == dropped
    assert len(h.asr.streams) == before.onsets + 1  # the speech reached the recogniser
    await h.send(listen("stop"))
    h.release()
    await h.stt(WORDS)


async def drops(h, event, state, mode):
    before = shape(h)
    dropped = h.session.stats.binary_not_listening
    await produce(h, event, state, mode)
    assert h.session.stats.binary_not_listening == dropped + len(speech_frames(300))
    assert dataclasses.replace(shape(h), stats=before.stats) == before
    assert not h.texts()
    if state is SPEAKING:
        await reply_goes_on(h)


async def answers(h, event, state, mode):
    """ANSWER: the typed text, after the reply in progress (which goes on), not listening."""
    await produce(h, event, state, mode)
    h.release()
    stt = await h.stt(TYPED)
    assert not stt.listening
    if state is SPEAKING:
        rest = h.index(lambda s: s.is_("tts", "sentence_start") and s.msg["text"] == SLOW_REST)
        typed = h.index(lambda s: s.is_("stt") and s.msg["text"] == TYPED)
        assert rest < typed and any(is_stop(s) for s in h.since()[rest:typed]), h.summary()


async def abandons(h, event, state, mode):
    """ABANDON_AND_ANSWER: the utterance is dropped (its words never answered), the typed text is."""
    await capture_words(h, state)
    await produce(h, event, state, mode)
    h.release()
    stt = await h.stt(TYPED)
    assert not stt.listening
    await h.settle()
    assert not h.stts(WORDS)


async def restarts(h, event, state, mode):
    """RESTART_AND_ANSWER: a fresh utterance (the old one's words are dropped), the typed text answered while
    listening goes on."""
    await capture_words(h, state)
    before = shape(h)
    await produce(h, event, state, mode)
    assert h.listening_mode is mode and len(h.vad.streams) == before.utterances + 1
    h.release()
    stt = await h.stt(TYPED)
    assert stt.listening
    await h.settle()
    assert not h.stts(WORDS)
    await answers_speech(h, mode)


async def cancels(h, event, state, mode):
    before = shape(h)
    await produce(h, event, state, mode)
    stop = next(s for s in h.since() if is_stop(s))
    assert stop.listening is (state is BOTH)  # listening is left as it was
    await reply_is_gone(h)
    if state is BOTH:  # (after SPEAKING, the reply's end is a cell of its own: RESUME or NOTHING)
        assert h.state is LISTENING and len(h.vad.streams) == before.utterances


async def answers_abort(h, event, state, mode):
    before = shape(h)
    await produce(h, event, state, mode)
    assert brief(h.texts()) == [("tts", "stop", None)]
    assert shape(h) == before


async def barges_in(h, event, state, mode):
    before = shape(h)
    await produce(h, event, state, mode)
    assert len(h.asr.streams) == before.onsets + 1  # speech began
    assert (h.listening_mode, len(h.vad.streams)) == (mode, before.utterances)
    await reply_is_gone(h)
    assert not h.stts(WORDS)  # the utterance goes on


async def touches(h, event, state, mode):
    before = shape(h)
    await asyncio.sleep(0.01)
    t0 = time.monotonic()
    assert h.session.last_activity < t0
    await produce(h, event, state, mode)
    assert h.session.last_activity >= t0
    assert dataclasses.replace(shape(h), onsets=before.onsets) == before
    assert len(h.asr.streams) == before.onsets + 1  # it was the onset
    assert not h.texts()
    if state is BOTH:
        await reply_goes_on(h)


async def resumes(h, event, state, mode):
    before = shape(h)
    await produce(h, event, state, mode)
    assert h.sentences(SLOW_REST)  # the reply ended as it should
    assert h.listening_mode is mode and len(h.vad.streams) == before.utterances + 1
    await answers_speech(h, mode)


async def does_nothing(h, event, state, mode):
    before = shape(h)
    await produce(h, event, state, mode)
    if event is E.REPLY_ENDED:  # the reply's own end goes out, then nothing
        assert brief(h.texts()) == [("tts", "sentence_start", SLOW_REST), ("tts", "stop", None)]
        assert shape(h) == dataclasses.replace(before, state=state)
        return
    assert not h.texts()
    assert shape(h) == before
    if h.session.replies.busy:
        await reply_goes_on(h)


CHECKS: dict[Action, Check] = {
    Action.BEGIN: begins,
    Action.BEGIN_AGAIN: begins,
    Action.END: ends,
    Action.END_THEN_AGAIN: ends,
    Action.FEED: feeds,
    Action.DROP: drops,
    Action.ANSWER: answers,
    Action.ABANDON_AND_ANSWER: abandons,
    Action.RESTART_AND_ANSWER: restarts,
    Action.CANCEL_REPLY: cancels,
    Action.ANSWER_STOP: answers_abort,
    Action.BARGE_IN: barges_in,
    Action.TOUCH: touches,
    Action.RESUME: resumes,
    Action.NOTHING: does_nothing,
}


def test_every_action_has_a_check():
    assert set(CHECKS) == set(Action)


def _cells():
    for cell in TABLE:
        event, state, mode = cell
        yield pytest.param(cell, id=f"{event.name}-{state.name}-{mode.value}")


@pytest.mark.parametrize("cell", list(_cells()))
async def test_cell(h, cell):
    event, state, mode = cell
    # A reply ends only once it is no longer in progress: its end is seen in the state it leaves behind.
    start = {IDLE: SPEAKING, LISTENING: BOTH}[state] if event is E.REPLY_ENDED else state
    await enter(h, start, mode)
    await CHECKS[TABLE[cell]](h, event, state, mode)


# ---- leniency (docs/protocol.md) ---------------------------------------------------------------------------


async def test_a_minimal_hello_is_answered_with_transport_websocket(h):
    await h.start({"type": "hello"})
    reply = next(s.msg for s in h.since(0) if s.is_("hello"))
    assert reply["transport"] == "websocket"
    assert reply["session_id"] == h.session.session_id
    a = h.config.audio
    assert reply["audio_params"] == {"format": a.downlink_format, "sample_rate": a.downlink_sample_rate,
                                     "channels": 1, "frame_duration": a.downlink_frame_ms}
    assert h.session.outbox.protocol_version == 1
    await h.send(listen("start", AUTO))
    await h.sync()
    assert h.listening_mode is AUTO


@pytest.mark.parametrize("mode", [AUTO, REALTIME])
async def test_listening_again_after_tts_stop_without_a_listen_start(h, mode):
    await h.start()
    await h.send(listen("start", mode))
    await h.audio(speech_frames(300) + silence_frames(300))
    await h.stt(WORDS)
    await h.settle()
    assert h.count(is_stop) == 1
    assert h.listening_mode is mode
    await answers_speech(h, mode)


async def test_a_listen_start_after_tts_stop_changes_nothing(h):
    """The official auto firmware sends `listen start` after `tts stop` anyway."""
    await h.start()
    await h.send(listen("start", AUTO))
    await h.audio(speech_frames(300) + silence_frames(300))
    await h.stt(WORDS)
    await h.settle()
    await h.send(listen("start", AUTO))
    await h.sync()
    assert h.listening_mode is AUTO
    await answers_speech(h, AUTO)


async def test_no_listening_after_a_reply_if_the_device_never_listened(h):
    await h.start()
    await h.send(listen("detect", text=TYPED))
    await h.stt(TYPED)
    await h.settle()
    assert h.listening_mode is None


async def not_listening_after_the_reply(h: Harness) -> None:
    await h.stt(WORDS)
    await h.settle()
    assert h.count(is_stop) == 1
    assert h.listening_mode is None
    dropped = h.session.stats.binary_not_listening
    await h.audio(speech_frames(300))
    await h.sync()
    assert h.session.stats.binary_not_listening == dropped + len(speech_frames(300))


async def test_no_listening_again_after_tts_stop_in_manual_mode(h):
    await h.start()
    await h.send(listen("start", MANUAL))
    await h.audio(speech_frames(300))
    await h.send(listen("stop"))
    await not_listening_after_the_reply(h)


@pytest.mark.parametrize("mode", [AUTO, REALTIME])
async def test_no_listening_again_after_listen_stop(h, mode):
    await h.start()
    await h.send(listen("start", mode))
    await h.audio(speech_frames(300))
    await h.send(listen("stop"))
    await not_listening_after_the_reply(h)


async def test_a_listen_stop_while_the_reply_plays_means_no_listening_again_after_it(h):
    await h.start()
    await h.send(listen("start", AUTO))
    h.agent.hold_next()
    await h.audio(speech_frames(300) + silence_frames(300))
    await h.wait(lambda: _audio_after(h, SLOW_FIRST), "the held reply")
    await h.send(listen("stop"))
    h.release()
    await h.settle()
    assert h.sentences(SLOW_REST) and h.listening_mode is None


async def test_a_typed_query_in_realtime_keeps_listening(h):
    await h.start()
    await h.send(listen("start", REALTIME))
    await h.audio(speech_frames(300))  # an utterance under way: restarted, its words dropped
    await h.send(listen("detect", text=TYPED))
    await h.sync()
    assert h.listening_mode is REALTIME
    stt = await h.stt(TYPED)
    assert stt.listening
    await h.settle()
    assert not h.stts(WORDS)
    await answers_speech(h, REALTIME)


@pytest.mark.parametrize("mode", [AUTO, MANUAL, REALTIME])
async def test_an_empty_binary_frame_ends_the_utterance(h, mode):
    await h.start()
    await h.send(listen("start", mode))
    await h.audio([*speech_frames(300), b""])
    await h.stt(WORDS)


@pytest.mark.parametrize("end", ["listen stop", "empty binary frame"])
async def test_an_empty_utterance_is_answered_by_the_empty_input_rule(h, end):
    """END with no words: a push-to-talk press without speech gets the manual prompt (and no `stt`)."""
    await h.start()
    await h.send(listen("start", MANUAL))
    await h.audio(silence_frames(300))
    if end == "listen stop":
        await h.send(listen("stop"))
    else:
        await h.audio([b""])
    await h.wait(lambda: h.sentences(prompt_words("manual", 1)), "the empty-input prompt")
    prompt = h.sentences(prompt_words("manual", 1))[0]
    assert not prompt.listening and not [s for s in h.since() if s.is_("stt")]


async def test_an_empty_binary_frame_while_not_listening_is_ignored(h):
    await h.start()
    h.mark()
    before = shape(h)
    await h.audio([b""])
    await h.sync()
    assert not h.texts() and shape(h) == before


async def test_audio_before_any_listen_is_dropped_and_counted(h):
    await h.start()
    h.mark()
    await h.audio(speech_frames(300) + silence_frames(300))
    await h.sync()
    assert h.session.stats.binary_not_listening == 10
    assert not h.texts() and not h.vad.streams


@pytest.mark.parametrize("reason", [None, ""])
async def test_abort_with_no_reason_or_an_empty_one_is_answered(h, reason):
    await enter(h, SPEAKING, AUTO)
    await h.send({"type": "abort"} if reason is None else {"type": "abort", "reason": reason})
    await h.sync()
    await reply_is_gone(h)


@pytest.mark.parametrize("session_id", ["missing", "", None, "someone-else"])
async def test_any_session_id_is_accepted(h, session_id):
    await h.start()
    start = listen("start", AUTO)
    if session_id != "missing":
        start["session_id"] = session_id
    await h.send(start)
    await h.sync()
    assert h.listening_mode is AUTO
    await answers_speech(h, AUTO)


@pytest.mark.parametrize("frame_ms", [20, 40, 60])
async def test_uplink_frames_of_20_40_or_60_ms(h, frame_ms):
    await h.start(hello(frame_duration=frame_ms))
    await h.send(listen("start", AUTO))
    await h.audio(speech_frames(300, frame_ms) + silence_frames(300, frame_ms))
    await h.stt(WORDS)

