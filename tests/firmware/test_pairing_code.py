"""An unpaired board shows its pairing code and says it (wren_device.pairing, the sounds of
tools/firmware/digit_sounds.py), on both builds at their heap budgets, against the real `wren serve` in
pair mode: the host display's line carries the code, what the simulated speaker played is, digit by digit,
the sounds of the server's code in order, and once approved the same boot talks. The sounds themselves are
understood: the server's own recogniser (Moonshine) hears the board saying fixed codes that hold every
digit as those digits (fixed, so that the check is the same on every run: recognising a code drawn at
random fails for about one code in 24). Without its sounds, or with broken ones, the board only logs and
shows the code; the code is said at most once per interval however often OTA hands it out; saying it
allocates nothing per block."""

from __future__ import annotations

import re
import subprocess
import sys
import wave
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.firmware.conftest import FIRMWARE, FROZEN_ONLY, REPO, micropython, write_config
from tests.firmware.test_hil import HEAP_BUDGET
from tests.firmware.test_opus_build import OPUS_HEAP_BUDGET
from tests.firmware.test_pairing_sim import approve
from tests.server.helpers import recognise
from tests.support.spoken import spoken_pcm, write_wav
from tests.support.wren_process import WrenProcess, wren_serve

TOOL = REPO / "tools" / "firmware" / "digit_sounds.py"
WORDS = {"zero": "0", "oh": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
         "seven": "7", "eight": "8", "nine": "9"}
# The room after the board spoke is quiet: the capture is recognised with silence around it, in a few
# amounts, since Moonshine sometimes says nothing, or invents a phone number's last four digits, for
# one framing of the same speech. Any framing giving exactly the code counts.
FRAMINGS_MS = ((300, 1000), (100, 600), (0, 1000))
REFERENCE_CODES = ("012345", "678901")  # every digit, said by the board as it says any code
SAME_SOUND = 0.9  # normalised cross-correlation of a played digit with its own sound (others: < 0.6)


@pytest.fixture(scope="module")
def pairing_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WrenProcess, Path]]:
    data = tmp_path_factory.mktemp("wren-pair")
    with wren_serve(data, env={"WREN_AUTH_MODE": "pair", "WREN_TTS_NATURAL_VARIATION": "0"}) as wren:
        yield wren, data


@pytest.fixture(scope="session")
def digit_sounds() -> Path:
    """The ADPCM asset of the stock build, made (or found in .cache/firmware-assets) by the tool."""
    res = subprocess.run([sys.executable, str(TOOL), "--quiet"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return Path(res.stdout.split()[0])


def spoken_digits(text: str) -> str:
    """The digits in a transcript, as numerals or as words ("Pairing code: 1, 2, 3" -> "123")."""
    return "".join(t if t.isdigit() else WORDS.get(t, "") for t in re.findall(r"[a-z]+|\d+", text.lower()))


def acceptable(code: str) -> set[str]:
    # The recogniser's loop guard collapses a word said four or more times in a row into one
    # (wren.speech.asr.moonshine.model.trim_repeats), so "four four four four" may come back once.
    return {code, re.sub(r"(\d)\1{3,}", r"\1", code)}


def heard(wav: Path) -> list[str]:
    with wave.open(str(wav)) as w:
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    assert len(pcm) > rate and np.abs(pcm).max() > 1000, "the speaker played only silence"
    texts = []
    for lead, tail in FRAMINGS_MS:
        pad = lambda ms: np.zeros(rate * ms // 1000, dtype=np.int16)  # noqa: E731
        texts.append(recognise(np.concatenate([pad(lead), pcm, pad(tail)]).tobytes(), rate))
    return texts


@pytest.mark.parametrize("build", ["stock", "opus"])
async def test_an_unpaired_board_shows_its_code_says_it_and_once_approved_talks(
    build: str, pairing_server: tuple[WrenProcess, Path], device_dir: Path, request: pytest.FixtureRequest
) -> None:
    wren, data = pairing_server
    env = write_config(device_dir, volume=100, ota_url=f"http://127.0.0.1:{wren.port}/xiaozhi/ota/")
    mic = write_wav(device_dir / "mic.wav", spoken_pcm("what time is it"), 16000)
    env.update(WREN_SIM_OUT=str(device_dir / "speaker.wav"), WREN_SIM_MIC=str(mic),
               WREN_SIM_BUTTON="press@0.5", WREN_SIM_TURNS="1")
    if build == "stock":  # ADPCM from the filesystem; the app from source
        env["WREN_SIM_SOUNDS"] = str(request.getfixturevalue("digit_sounds"))
        run = micropython(str(FIRMWARE / "main.py"), env=env, cwd=device_dir, heap=HEAP_BUDGET)
    else:  # the Wren build: Opus sounds frozen in with the app (firmware/manifest.py)
        run = micropython("-m", "main", env=env, cwd=device_dir, binary=request.getfixturevalue("opus_build"),
                          path=FROZEN_ONLY, heap=OPUS_HEAP_BUDGET)
    async with run as mp:
        shown = await mp.wait_for(r"\] display: Pairing code (\d{3}) (\d{3})", timeout=60)
        code = shown.group(1) + shown.group(2)
        assert f"ota: pairing code {code}" in mp.output()
        assert "asks to pair: code " + code in wren.log_text()
        await mp.wait_for(r"pairing: code spoken", timeout=30)
        assert "device: ready" not in mp.output()  # still waiting for the owner
        said = device_dir / "said-code.wav"
        said.write_bytes((device_dir / "speaker.wav").read_bytes())  # the reply goes on in the same file
        approved = approve(data, code)
        assert approved.returncode == 0, approved.stderr
        assert await mp.finish(120) == 0, mp.output()  # then the spoken turn, in the same boot
    log = mp.output()
    assert "MemoryError" not in log and "done; playback drained" in log  # within the heap budget
    assert log.count("pairing: saying the code") == 1
    references = request.getfixturevalue(f"reference_{build}")
    assert digits_played(said, references[1]) == code


def pcm_of(wav: Path) -> tuple[np.ndarray, int]:
    with wave.open(str(wav)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float64), w.getframerate()


def words_played(wav: Path) -> list[np.ndarray]:
    """The loud stretches of a capture ("pairing code", then one per digit): 10 ms frames within 40 dB of
    the loudest, split at 120 ms of quiet (the board leaves 200 ms between digits, 400 ms between groups)."""
    pcm, rate = pcm_of(wav)
    win = rate // 100
    frames = len(pcm) // win
    energy = np.sqrt((pcm[: frames * win].reshape(frames, win) ** 2).mean(axis=1))
    loud = energy > energy.max() / 100
    stretches, start, quiet = [], None, 0
    for i, on in enumerate(loud.tolist() + [False] * 12):
        if on:
            start, quiet = i if start is None else start, 0
        elif start is not None:
            quiet += 1
            if quiet == 12:
                stretches.append(pcm[start * win : (i - quiet + 1) * win])
                start = None
    return stretches


def similarity(a: np.ndarray, b: np.ndarray) -> float:
    """The best normalised cross-correlation of two sounds over every lag (1.0: the same sound)."""
    n = len(a) + len(b)
    lags = np.fft.irfft(np.fft.rfft(a, n) * np.fft.rfft(b[::-1], n), n)
    return float(lags.max() / (np.linalg.norm(a) * np.linalg.norm(b) or 1.0))


def digits_played(wav: Path, sounds: dict[str, np.ndarray]) -> str:
    """Which digit sound each word of the capture is, by similarity with the board's own sounds."""
    words = words_played(wav)
    assert len(words) == 7, f"expected 'pairing code' and 6 digits, found {len(words)} sounds"
    played = ""
    for word in words[1:]:
        scores = {digit: similarity(word, sound) for digit, sound in sounds.items()}
        best = max(scores, key=scores.__getitem__)
        assert scores[best] >= SAME_SOUND, f"a digit like none of the sounds: {scores}"
        played += best
    return played


REFERENCE_SCRIPT = """
import asyncio, sys
from hal.host.board import HostBoard, sounds_path
from wren_device.audio import Downlink
from wren_device.codec import make_codec
from wren_device.pairing import Pairing

async def main():
    board = HostBoard({})
    codec = make_codec(sys.argv[1] == "opus")
    dl = Downlink(codec, 1, 24000 if codec.format == "opus" else 16000, 1000)
    p = Pairing(board, dl, codec, 100, sounds_path())
    p.on_code(sys.argv[2], "")
    await asyncio.sleep_ms(100)
    while p._task is not None:
        await asyncio.sleep_ms(50)
    await p.stop()
    board.close()

asyncio.run(main())
"""


async def board_says(build: str, code: str, workdir: Path, sounds: Path | None, binary: Path | None) -> Path:
    """The board's speaker saying `code`, as it does at pairing, at the volume of the boot test (100)."""
    script = workdir / "say_code.py"
    script.write_text(REFERENCE_SCRIPT)
    out = workdir / f"said-{code}.wav"
    env = {"WREN_SIM_OUT": str(out)}
    if sounds is not None:
        env["WREN_SIM_SOUNDS"] = str(sounds)
        run = micropython(str(script), build, code, env=env, cwd=workdir)
    else:
        run = micropython(str(script), build, code, env=env, cwd=workdir, binary=binary, path=FROZEN_ONLY)
    async with run as mp:
        assert await mp.finish(60) == 0, mp.output()
    return out


def references(build: str, workdir: Path, sounds: Path | None, binary: Path | None):
    """The board saying REFERENCE_CODES, and each digit's sound cut from them (made on a loop of their own:
    the fixture may be asked for from inside a running test)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as thread:
        wavs = [thread.submit(asyncio.run, board_says(build, code, workdir, sounds, binary)).result()
                for code in REFERENCE_CODES]
    sounds_by_digit: dict[str, np.ndarray] = {}
    for code, wav in zip(REFERENCE_CODES, wavs, strict=True):
        words = words_played(wav)
        assert len(words) == 7, (code, len(words))
        for digit, word in zip(code, words[1:], strict=True):
            sounds_by_digit.setdefault(digit, word)
    return wavs, sounds_by_digit


@pytest.fixture(scope="module")
def reference_stock(tmp_path_factory: pytest.TempPathFactory, digit_sounds: Path):
    return references("pcm", tmp_path_factory.mktemp("say-stock"), digit_sounds, None)


@pytest.fixture(scope="module")
def reference_opus(tmp_path_factory: pytest.TempPathFactory, opus_build: Path):
    return references("opus", tmp_path_factory.mktemp("say-opus"), None, opus_build)


@pytest.mark.parametrize("build", ["stock", "opus"])
def test_the_digit_sounds_are_told_apart_and_understood(build: str, request: pytest.FixtureRequest) -> None:
    wavs, sounds = request.getfixturevalue(f"reference_{build}")
    assert sorted(sounds) == list("0123456789")
    for code, wav in zip(REFERENCE_CODES, wavs, strict=True):
        assert digits_played(wav, sounds) == code  # each digit is most like itself, and only itself
        texts = heard(wav)
        assert any(spoken_digits(t) == code for t in texts), (code, texts)  # and people hear the digits


SCRIPT = """
import asyncio, sys, time
from hal.host.board import HostBoard
from wren_device.audio import Downlink
from wren_device.codec import make_codec
from wren_device.pairing import Pairing

async def main(path, every_ms, calls):
    board = HostBoard({})
    codec = make_codec(False)
    dl = Downlink(codec, 1, 16000, 1000)
    p = Pairing(board, dl, codec, 100, path, every_ms=every_ms)
    t0 = time.ticks_ms()
    for at in calls:  # OTA replies with the code at these times (ms)
        await asyncio.sleep_ms(max(0, at - time.ticks_diff(time.ticks_ms(), t0)))
        p.on_code("123456", "http://box:8000/\\n123456")
    await asyncio.sleep_ms(50)
    await p.stop()
    board.close()
    print("DONE in %d ms" % time.ticks_diff(time.ticks_ms(), t0))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), [int(t) for t in sys.argv[3].split(",")]))
"""


async def run_script(tmp_path: Path, sounds: Path, every_ms: int, calls: str) -> str:
    script = tmp_path / "pairing_script.py"
    script.write_text(SCRIPT)
    env = {"WREN_SIM_OUT": str(tmp_path / "speaker.wav")}
    async with micropython(str(script), str(sounds), str(every_ms), calls, env=env, cwd=tmp_path) as mp:
        assert await mp.finish(60) == 0, mp.output()
    return mp.output()


def tiny_sounds(path: Path, fmt: int = 1) -> Path:
    """A valid asset of 11 short tones (ADPCM, or an Opus header the stock build cannot play)."""
    sys.path.insert(0, str(TOOL.parent))
    try:
        import digit_sounds as tool
    finally:
        sys.path.remove(str(TOOL.parent))
    t = np.arange(800) / 16000
    clips = [tool.adpcm_encode((8000 * np.sin(2 * np.pi * (300 + 50 * i) * t)).astype(np.int16))
             for i in range(11)]
    path.write_bytes(tool.container(fmt, 16000, clips))
    return path


async def test_a_missing_or_broken_sound_asset_only_logs_and_the_code_is_still_shown(tmp_path: Path) -> None:
    missing = await run_script(tmp_path, tmp_path / "nowhere.wdg", 30000, "0")
    assert "display: Pairing code 123 456 | http://box:8000/" in missing
    assert f"pairing: no digit sounds at {tmp_path / 'nowhere.wdg'}" in missing and "DONE" in missing
    (tmp_path / "junk.wdg").write_bytes(b"RIFF" + bytes(100))
    broken = await run_script(tmp_path, tmp_path / "junk.wdg", 30000, "0")
    assert "unusable (not a Wren digit-sounds asset)" in broken and "DONE" in broken
    opus = await run_script(tmp_path, tiny_sounds(tmp_path / "opus.wdg", fmt=2), 30000, "0")
    assert "the digit sounds are Opus and this build has no opus module" in opus and "DONE" in opus
    for log in (missing, broken, opus):
        assert "Traceback" not in log and "code spoken" not in log


async def test_the_code_is_said_at_most_once_per_interval(tmp_path: Path) -> None:
    # Short tones: one saying takes ~2.3 s (mostly the pauses). Replies at 0, 0.1 s (still saying),
    # 2.8 s (done, but within the 3.5 s interval) and 3.6 s (due again).
    log = await run_script(tmp_path, tiny_sounds(tmp_path / "tones.wdg"), 3500, "0,100,2800,3600")
    assert log.count("display: Pairing code 123 456") == 4  # shown at every reply
    assert log.count("pairing: saying the code") == 2, log
    assert log.count("pairing: code spoken") >= 1 and "Traceback" not in log
    with wave.open(str(tmp_path / "speaker.wav")) as w:
        assert w.getframerate() == 16000 and w.getnframes() > 16000  # through the host speaker


HEAP_LOCK_SCRIPT = """
import asyncio, sys, micropython
from hal.host.board import HostBoard, sounds_path
from wren_device.audio import Downlink
from wren_device.codec import make_codec
from wren_device.pairing import Pairing

async def main():
    board = HostBoard({})
    codec = make_codec(sys.argv[1] == "opus")
    dl = Downlink(codec, 1, 24000 if codec.format == "opus" else 16000, 1000)
    p = Pairing(board, dl, codec, 100, sounds_path())
    p.on_code("907382", "")
    await asyncio.sleep_ms(500)  # the sounds are open, the buffers made, the first words playing
    micropython.heap_lock()
    await asyncio.sleep_ms(2500)  # the digits: read, decoded, queued and played with the heap locked
    micropython.heap_unlock()
    print("UNLOCKED", p._task is not None, board._spk.written)
    while p._task is not None:
        await asyncio.sleep_ms(50)
    board.close()

asyncio.run(main())
"""


@pytest.mark.parametrize("build", ["stock", "opus"])
async def test_saying_the_code_allocates_nothing_per_block(
    build: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # Two and a half seconds in the middle of the saying (file or frozen reads, ADPCM or Opus decoding,
    # the PCM ring, the speaker task) run under heap_lock: any allocation there is a MemoryError.
    script = tmp_path / "pairing_heap_lock.py"
    script.write_text(HEAP_LOCK_SCRIPT)
    env = {"WREN_SIM_OUT": str(tmp_path / "speaker.wav")}
    if build == "stock":
        env["WREN_SIM_SOUNDS"] = str(request.getfixturevalue("digit_sounds"))
        run = micropython(str(script), "pcm", env=env, cwd=tmp_path)
    else:
        binary = request.getfixturevalue("opus_build")
        run = micropython(str(script), "opus", env=env, cwd=tmp_path, binary=binary, path=FROZEN_ONLY)
    async with run as mp:
        assert await mp.finish(30) == 0, mp.output()
    log = mp.output()
    assert "UNLOCKED True" in log and "pairing: code spoken" in log, log
    assert "MemoryError" not in log and "cannot say" not in log and "Traceback" not in log, log
    written = int(re.search(r"UNLOCKED True (\d+)", log).group(1))
    assert written > 2 * (24000 if build == "opus" else 16000) * 2  # > 2 s of audio played by then
