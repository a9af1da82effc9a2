"""Moonshine (the default recogniser): conversion cache, words, speculation at pauses, guards, windowing."""

from __future__ import annotations

import os
import re
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest
import wren.speech.asr.moonshine.model as model_module
from wren.agent.vocabulary import recognition_phrases
from wren.config import AsrConfig
from wren.speech.asr import AsrError, load_asr
from wren.speech.asr.bias import STRONG_MARGIN
from wren.speech.asr.moonshine.assets import find_assets
from wren.speech.asr.moonshine.convert import cached_folder, is_complete
from wren.speech.asr.moonshine.engine import DRAFT_EVERY_S, _Guess
from wren.speech.asr.moonshine.model import Use, strip_wrapping_quotes, trim_repeats
from wren.speech.asr.moonshine.scheduler import (
    COMMIT,
    SPECULATIVE,
    SPILL_NICE,
    URGENT,
    DecodeScheduler,
    default_decode_threads,
    thread_plan,
    usable_cpus,
)
from wren.speech.asr.moonshine.tokenizer import MoonshineTokenizer
from wren.speech.priority import per_thread_priority

from tests.speech.conftest import feed_in_chunks, recognise, spoken


@pytest.fixture(scope="module")
def moonshine():
    engine = load_asr(AsrConfig(engine="moonshine"))
    yield engine
    engine.close()


def plain(text: str) -> str:
    return " ".join(re.sub(r"[^\w' ]+", " ", text.lower()).split())


def test_moonshine_is_the_default_engine():
    assert AsrConfig().engine == "moonshine"


@pytest.mark.parametrize(
    "sentence",
    ["please tell me the date", "what is my name", "set the volume to thirty", "turn the light red"],
)
def test_recognises_everyday_requests_pocketsphinx_got_wrong(moonshine, sentence):
    assert plain(recognise(moonshine, spoken(sentence))) == sentence


def test_converted_model_is_cached_per_machine_and_keyed_by_the_weights(moonshine):
    folder = cached_folder(find_assets(), Path(moonshine_cache_dir()))
    assert is_complete(folder)
    assert find_assets().fingerprint() in folder.name
    started = time.perf_counter()
    second = load_asr(AsrConfig(engine="moonshine"))  # found in the cache: no conversion
    try:
        assert time.perf_counter() - started < 10
    finally:
        second.close()


def moonshine_cache_dir() -> str:
    from wren.speech.cache_dir import default_cache_dir

    return str(default_cache_dir())


def test_a_pause_is_decoded_in_the_background_so_finish_has_nothing_left(moonshine):
    pcm = spoken("set a timer for five minutes")
    full = recognise(moonshine, pcm)
    stream = moonshine.open_stream()
    feed_in_chunks(stream, pcm)
    before, urgent = moonshine.stats.speculation_used, moonshine.stats.urgent_runs
    stream.pause()
    # The guess is decoded in the background: its words show up in `partial()` with nobody waiting.
    deadline = time.monotonic() + 30
    while stream.partial() != full and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stream.partial() == full
    # ... so finish() takes them, and decodes nothing more (counted, not timed: the box may be busy).
    assert stream.finish() == full
    assert moonshine.stats.speculation_used == before + 1
    assert moonshine.stats.urgent_runs == urgent
    stream.close()


def test_speech_after_a_pause_is_recognised_too(moonshine):
    stream = moonshine.open_stream()
    feed_in_chunks(stream, spoken("what time is it", tail_ms=100))
    stream.pause()
    stream.resume()
    feed_in_chunks(stream, spoken("and what is the date", lead_ms=100))
    words = plain(stream.finish())
    stream.close()
    assert "time" in words and "date" in words


def test_audio_after_the_last_pause_is_not_decoded_again(moonshine):
    """The VAD said the speaker stayed quiet after the pause: the guess is final, whatever follows."""
    stream = moonshine.open_stream()
    feed_in_chunks(stream, spoken("what is my name"))
    stream.pause()
    feed_in_chunks(stream, bytes(16000 * 2))  # a second of silence while the button is still held
    assert plain(stream.finish()) == "what is my name"
    stream.close()


def test_silence_and_low_noise_give_no_words(moonshine):
    rng = np.random.default_rng(3)
    noise = np.clip(rng.normal(0, 30, 32000), -32768, 32767).astype("<i2").tobytes()  # ≈ -60 dBFS
    assert recognise(moonshine, bytes(32000 * 2)) == ""
    assert recognise(moonshine, noise) == ""


def test_an_utterance_longer_than_a_window_is_split_not_dropped(moonshine):
    sentences = ["set a timer for five minutes", "turn the light red", "what is the weather like today",
                 "please tell me the date", "set the volume to thirty", "remind me to call my mother",
                 "what can you do"]
    pcm = b"".join(spoken(s, lead_ms=0, tail_ms=0) for s in sentences + sentences[:3])
    assert len(pcm) / 32000 > 10  # past MAX_WINDOW_S with no pause: cut at the quietest point
    before = moonshine.stats.windows_committed
    words = plain(recognise(moonshine, pcm)).split()
    assert moonshine.stats.windows_committed > before
    expected = " ".join(sentences).split()  # (the words of the repeated three are in there too)
    missing = [w for w in expected if w not in words]
    assert len(missing) <= 2, (missing, words)


def test_a_stream_cannot_be_used_after_close(moonshine):
    stream = moonshine.open_stream()
    stream.close()
    with pytest.raises(AsrError):
        stream.accept(b"\0\0")


def test_repeated_phrases_of_a_decoder_loop_are_trimmed():
    assert trim_repeats("Cancel the timer cancel the timer cancel the timer.") == "Cancel the timer."
    assert trim_repeats("no no") == "no no"
    assert trim_repeats("go go go go go") == "go"
    assert trim_repeats("set the volume to thirty") == "set the volume to thirty"


def test_quotes_around_the_whole_transcript_are_dropped_and_apostrophes_kept():
    assert strip_wrapping_quotes('"\'What day is it?\'') == "What day is it?"
    assert strip_wrapping_quotes("\u201cHello.\u201d") == "Hello."
    assert strip_wrapping_quotes("What's the time? It's noon.") == "What's the time? It's noon."
    assert strip_wrapping_quotes("'") == ""


def test_tokenizer_reads_long_pieces_and_byte_fallback(tmp_path):
    long_piece = "\u2581" + "x" * 200
    blob = bytearray()
    for piece in [b"<unk>", b"<s>", b"</s>", "\u2581hi".encode(), long_piece.encode(), b"\xc3", b"\xa9"]:
        n = len(piece)
        blob += bytes([n]) if n < 128 else bytes([(n & 0x7F) | 0x80, n >> 7])
        blob += piece
    (tmp_path / "tokenizer.bin").write_bytes(bytes(blob))
    tokenizer = MoonshineTokenizer.load(tmp_path / "tokenizer.bin")
    assert len(tokenizer) == 7
    assert tokenizer.decode([1, 3, 5, 6, 2]) == "hié"
    assert tokenizer.decode([4]) == "x" * 200


@pytest.mark.parametrize(("cpus", "threads"), [(1, 1), (2, 1), (3, 2), (4, 3), (5, 4), (64, 4)])
def test_decode_threads_by_default_leave_a_core_to_the_event_loop(cpus, threads):
    assert default_decode_threads(cpus) == threads


def test_the_engine_without_a_thread_count_uses_the_default_for_this_machine(moonshine):
    assert AsrConfig().decode_threads == 0
    assert moonshine.threads == default_decode_threads(usable_cpus())
    assert moonshine.scheduler.threads == moonshine.threads
    assert moonshine.scheduler.spill_threads == (1 if usable_cpus() > moonshine.threads else 0)
    assert thread_plan(3) == (3, 0)  # a count that was set is the count, with no spill thread


def test_a_spill_thread_takes_only_a_decode_someone_is_waiting_for():
    scheduler = DecodeScheduler(threads=1, spill_threads=1)
    gate: Future = Future()
    guessed = threading.Event()
    try:
        name = scheduler.submit(lambda: threading.current_thread().name, SPECULATIVE).result(5)
        assert name == "wren-moonshine-0"  # a free steady thread takes any work at once
        busy = threading.Event()
        scheduler.submit(lambda: (busy.set(), gate.result(10)), SPECULATIVE)  # occupies the steady thread
        assert busy.wait(5)
        guess = scheduler.submit(guessed.set, SPECULATIVE)
        urgent = scheduler.submit(lambda: threading.current_thread().name, URGENT)
        assert urgent.result(5) == "wren-moonshine-spill-0"
        assert not guessed.wait(0.3)  # a guess waits for the steady thread, however long
        gate.set_result(None)
        guess.result(5)
    finally:
        if not gate.done():
            gate.set_result(None)
        scheduler.close()


def test_the_scheduler_counts_decodes_run_and_their_cpu_by_class_not_those_cancelled_while_waiting():
    scheduler = DecodeScheduler(threads=1)
    gate: Future = Future()

    def burn() -> int:
        end = time.thread_time() + 0.02
        while time.thread_time() < end:
            pass
        return 1

    def fail() -> None:
        raise ValueError("a bad window")

    try:
        busy = threading.Event()
        scheduler.submit(lambda: (busy.set(), gate.result(10)), COMMIT)  # holds the only thread
        assert busy.wait(5)
        dropped = scheduler.submit(burn, SPECULATIVE)
        assert dropped.cancel()  # superseded while waiting: it never runs
        urgent = scheduler.submit(burn, URGENT)
        failed = scheduler.submit(fail, SPECULATIVE)
        gate.set_result(None)
        assert urgent.result(5) == 1
        with pytest.raises(ValueError):
            failed.result(5)
        assert scheduler.ran == {"urgent": 1, "commit": 1, "speculative": 1}
        assert scheduler.cpu_seconds["urgent"] >= 0.02
        assert scheduler.cpu_seconds["commit"] < 0.02  # waiting on the gate is not CPU
    finally:
        if not gate.done():
            gate.set_result(None)
        scheduler.close()


@pytest.mark.skipif(not per_thread_priority(), reason="per-thread nice values are Linux only")
def test_the_spill_thread_runs_at_a_lower_priority_and_the_steady_one_does_not():
    scheduler = DecodeScheduler(threads=1, spill_threads=1)
    gate: Future = Future()
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def nice_here() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    try:
        assert scheduler.submit(nice_here, SPECULATIVE).result(5) == own  # the steady thread
        busy = threading.Event()
        scheduler.submit(lambda: (busy.set(), gate.result(10)), SPECULATIVE)
        assert busy.wait(5)
        assert scheduler.submit(nice_here, URGENT).result(5) == max(own, SPILL_NICE)  # the spill thread
    finally:
        if not gate.done():
            gate.set_result(None)
        scheduler.close()


def test_without_a_spill_thread_a_decode_waits_for_the_busy_one():
    scheduler = DecodeScheduler(threads=1)
    gate: Future = Future()
    try:
        scheduler.submit(lambda: gate.result(10), URGENT)
        waiting = scheduler.submit(lambda: "done", URGENT)
        time.sleep(0.3)
        assert not waiting.done()
        gate.set_result(None)
        assert waiting.result(5) == "done"
    finally:
        if not gate.done():
            gate.set_result(None)
        scheduler.close()


def test_scheduler_runs_urgent_work_before_speculation_and_sheds_the_oldest_guess():
    scheduler = DecodeScheduler(threads=1, max_speculative=2)
    order: list[str] = []
    gate: Future = Future()
    try:
        scheduler.submit(lambda: gate.result(5), URGENT)  # occupies the only thread
        time.sleep(0.05)
        guesses = [scheduler.submit(lambda i=i: order.append(f"guess{i}"), SPECULATIVE) for i in range(3)]
        urgent = scheduler.submit(lambda: order.append("urgent"), URGENT)
        gate.set_result(None)
        urgent.result(5)
        for guess in guesses[1:]:
            guess.result(5)
        assert guesses[0].cancelled()  # past max_speculative: the oldest waiting guess is dropped
        assert order == ["urgent", "guess1", "guess2"]
        assert scheduler.dropped_speculative == 1
    finally:
        scheduler.close()


def test_a_missing_model_folder_is_a_clear_error(tmp_path):
    with pytest.raises(AsrError, match=r"lacks encoder_model\.ort"):
        load_asr(AsrConfig(engine="moonshine", model_path=str(tmp_path)))


def test_an_unknown_engine_names_the_choices():
    with pytest.raises(AsrError, match="moonshine, pocketsphinx, vosk"):
        load_asr(AsrConfig(engine="whisper"))


def test_without_the_moonshine_wheel_the_default_falls_back_to_pocketsphinx(monkeypatch, caplog):
    """An ARM box, where pip cannot install the x86_64-only wheel: the server still recognises speech."""
    import importlib.util

    real_find_spec = importlib.util.find_spec
    def find_spec(name, *args):
        return None if name == "moonshine_cpp" else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    engine = load_asr(AsrConfig(workers=0, pool_size=1))
    assert engine.name == "pocketsphinx"
    assert "falling back to pocketsphinx" in caplog.text and "moonshine-cpp" in caplog.text


@pytest.mark.parametrize("sentence", ["set a timer for five minutes", "what is the weather like today"])
def test_a_draft_from_an_earlier_guess_gives_exactly_the_greedy_result(moonshine, sentence):
    """Drafts only save decoder steps: right, partly right or wrong, the words are the same."""
    pcm = spoken(sentence)
    audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    model = moonshine.model
    plain_result = model.transcribe(audio)
    prefix = model.transcribe(audio[: len(audio) * 2 // 3]).tokens
    other_audio = np.frombuffer(spoken("turn the light red"), "<i2").astype(np.float32) / 32768.0
    other = model.transcribe(other_audio).tokens
    for draft in (plain_result.tokens, prefix, other, [*plain_result.tokens, 5, 6, 7]):
        assert model.transcribe(audio, draft=draft) == plain_result


def test_while_speaking_guesses_become_drafts_for_the_final_decode(moonshine):
    stream = moonshine.open_stream()
    before = moonshine.stats.drafted_runs
    pcm = spoken("please set a timer for twenty five minutes and then remind me to check the oven", tail_ms=0)
    for i in range(0, len(pcm), 1920):
        stream.accept(pcm[i : i + 1920])
    # A guess made while speaking finishes in the background, however busy the box (the suite runs on
    # several workers): wait for one to be this window's draft, then end.
    deadline = time.monotonic() + 60
    while not stream._draft and time.monotonic() < deadline:
        time.sleep(0.01)
    text = plain(stream.finish())
    stream.close()
    assert moonshine.stats.drafted_runs == before + 1
    assert "timer" in text and "oven" in text


def test_a_pause_right_after_a_draft_of_the_same_audio_still_gives_finish_its_answer(moonshine):
    """The chunk that completes a draft's stretch of audio can be the one the VAD ends with a pause: the
    draft becomes the guess if its decode has not reached the grammar yet, else the pause guesses again;
    either way finish() answers from a guess, not from a decode with the person waiting."""
    pcm = spoken("set a timer for five minutes")
    draft_bytes = int(DRAFT_EVERY_S * 16000) * 2
    stream = moonshine.open_stream()
    used, urgent = moonshine.stats.speculation_used, moonshine.stats.urgent_runs
    stream.accept(pcm[:draft_bytes])  # this accept starts a draft of exactly this audio...
    stream.pause()  # ...and the same chunk ended with a pause
    time.sleep(1.0)
    stream.finish()
    stream.close()
    assert (moonshine.stats.speculation_used, moonshine.stats.urgent_runs) == (used + 1, urgent)


def _held_decodes(monkeypatch, model):  # type: ignore[no-untyped-def]
    """Decodes wait for `go` once begun, and record what each was for (`Use`) when it asks."""
    real = model.transcribe
    running, go = threading.Event(), threading.Event()
    uses: list[Use] = []

    def transcribe(audio, bias=None, draft=None, use=Use.COMMAND):  # type: ignore[no-untyped-def]
        running.set()
        assert go.wait(10)

        def asked() -> Use:
            purpose = use() if callable(use) else use
            uses.append(purpose)
            return purpose

        return real(audio, bias, draft, asked)

    monkeypatch.setattr(model, "transcribe", transcribe)
    return running, go, uses


def test_a_pause_at_the_end_of_a_running_draft_makes_it_the_guess_with_one_decode(moonshine, monkeypatch):
    """Push-to-talk: the draft of the last stretch starts, and the same chunk ends with the pause. Decoding
    that audio twice at once slowed both decodes (4 turns in 16 of the one-person bench); the running
    draft is rescored and matched against the grammar instead, and its result is the answer."""
    running, go, uses = _held_decodes(monkeypatch, moonshine.model)
    pcm = spoken("what is the weather like today")  # no command: the grammar has its say
    stream = moonshine.open_stream()
    stream.bias(recognition_phrases(), STRONG_MARGIN)
    stats = moonshine.stats
    guesses, used, urgent = stats.speculative_runs, stats.speculation_used, stats.urgent_runs
    stream.accept(pcm[: int(DRAFT_EVERY_S * 16000) * 2])
    assert running.wait(10)  # the draft's decode has begun
    stream.pause()
    go.set()
    words = plain(stream.finish())
    stream.close()
    assert uses == [Use.COMMAND]  # one decode, and it was the answer's
    assert stats.speculative_runs == guesses + 1
    assert (stats.speculation_used, stats.urgent_runs) == (used + 1, urgent)
    assert words.startswith("what")


def test_a_guess_the_speaker_spoke_past_finishes_as_a_draft(moonshine, monkeypatch):
    """A false pause (a quiet consonant, a breath): the guess is running when speech resumes. Its words can
    no longer be the answer, so it skips the rescoring and the grammar; its tokens still serve as the
    next decode's draft."""
    running, go, uses = _held_decodes(monkeypatch, moonshine.model)
    stream = moonshine.open_stream()
    stream.drafts(False)
    stream.bias(recognition_phrases(), STRONG_MARGIN)
    feed_in_chunks(stream, spoken("what is the weather", tail_ms=100))
    stream.pause()
    assert running.wait(10)
    stream.resume()
    go.set()
    feed_in_chunks(stream, spoken("like today", lead_ms=100))
    words = plain(stream.finish())
    stream.close()
    assert sorted(use.value for use in uses) == ["command", "draft"]  # the finish decodes the answer
    assert "weather" in words and "today" in words


def test_what_a_guess_is_for_is_settled_when_its_decode_asks():
    draft = _Guess(16000, final=False, windowed=False)
    assert draft.use() is Use.DRAFT
    assert draft.make_final() is False  # too late: the pause decodes again
    upgraded = _Guess(16000, final=False, windowed=False)
    assert upgraded.make_final() is True
    assert upgraded.use() is Use.COMMAND
    spoken_past = _Guess(16000, final=True, windowed=False)
    spoken_past.superseded()
    assert spoken_past.use() is Use.DRAFT
    assert _Guess(16000, final=True, windowed=True).use() is Use.WORDS  # part of a long utterance


def test_rescoring_skips_candidates_the_greedy_search_rules_out_and_hears_the_same(moonshine, monkeypatch):
    """A phrase-set sentence that parts from the greedy words at a token the model found unlikely cannot
    win ("What is the date today?" for "what is the capital of France"): no decoder pass for it."""
    model = moonshine.model
    bias = moonshine.phrase_bias(recognition_phrases(), STRONG_MARGIN)
    real_score = model.score
    passes: list[str] = []

    def score(cross, text):  # type: ignore[no-untyped-def]
        passes.append(text)
        return real_score(cross, text)

    monkeypatch.setattr(model, "score", score)
    sentences = ["what is the capital of france", "turn off the lights in the bedroom", "tell me a joke",
                 "set the volume to thirty", "play some music", "make the light pink"]
    audio = [np.frombuffer(spoken(s), "<i2").astype(np.float32) / 32768.0 for s in sentences]

    def heard() -> list[str]:
        passes.clear()
        return [model.transcribe(a, bias).text for a in audio]

    pruned = heard()
    pruned_passes = len(passes)
    monkeypatch.setattr(model_module, "PRUNE_SLACK", 1e9)  # every candidate scored, as before
    assert heard() == pruned
    assert pruned_passes < len(passes) / 2


def test_a_stream_told_not_to_draft_decodes_once_at_the_end(moonshine):
    stream = moonshine.open_stream()
    stream.drafts(False)
    guesses, urgent = moonshine.stats.speculative_runs, moonshine.stats.urgent_runs
    pcm = spoken("please set a timer for twenty five minutes and then remind me to check the oven", tail_ms=0)
    for i in range(0, len(pcm), 1920):
        stream.accept(pcm[i : i + 1920])
    text = plain(stream.finish())
    stream.close()
    assert (moonshine.stats.speculative_runs, moonshine.stats.urgent_runs) == (guesses, urgent + 1)
    assert "timer" in text and "oven" in text


@pytest.mark.parametrize("sentence", ["make the light pink", "is the battery charging", "what is my name"])
def test_the_tokenizer_splits_text_the_way_the_model_writes_it(moonshine, sentence):
    """Rescoring needs the model's own split of a word: any other split is far less likely to it."""
    result = moonshine.model.transcribe(np.frombuffer(spoken(sentence), "<i2").astype(np.float32) / 32768.0)
    assert moonshine.model.tokenizer.encode(result.text) == result.tokens


def test_weights_are_unsigned_exactly_where_the_cpu_has_no_vnni_and_cached_apart():
    """Without VNNI, ONNX Runtime's u8 × s8 kernel saturates: the accuracy tests above failed on an AVX2-only
    CPU until the weights went unsigned there."""
    from wren.speech.asr.moonshine.convert import has_vnni, unsigned_weights

    assert has_vnni("fpu sse4_2 avx2 avx512f avx512bw avx512_vnni")
    assert has_vnni("fpu avx2 avx_vnni")
    assert not has_vnni("fpu sse4_2 avx2 avx512f avx512bw")  # AVX-512 without VNNI still saturates
    folder = cached_folder(find_assets(), Path(moonshine_cache_dir()))
    assert folder.name.endswith("-u8") == unsigned_weights()
    assert unsigned_weights() == (not has_vnni(Path("/proc/cpuinfo").read_text()))
