"""The whole downlink/uplink audio path with real engines: piper → 24 kHz → Opus 60 ms frames → decode →
16 kHz → pocketsphinx. Opus at 24 kbps shifts recognition a little (see speech-stack-notes), so robust
words are asserted, compared with the text that was spoken."""

from __future__ import annotations

import pytest
from wren.speech.codec import encode_stream, make_decoder, make_encoder
from wren.speech.resample import Resampler

from tests.speech.conftest import CHUNK_60MS_16K, deterministic_voice

CASES = {
    "Set the volume to thirty.": {"volume", "thirty"},
    "What time is it?": {"what", "time"},
    "What can you do?": {"what", "can", "you", "do"},
}


@pytest.mark.parametrize("sentence", list(CASES))
def test_piper_through_opus_24k_and_back_is_recognised(pocketsphinx_engine, sentence):
    voice = deterministic_voice()  # repeatable: piper's natural output varies from run to run
    to_device = Resampler(voice.sample_rate, 24000)
    encoder = make_encoder("opus", 24000, 60, 24000)
    pcm24 = b"".join(to_device.process(chunk) for chunk in voice.synthesize(sentence))
    pcm24 += to_device.flush()
    packets = list(
        encode_stream(encoder, bytes(24000 * 2 * 300 // 1000) + pcm24 + bytes(24000 * 2 * 300 // 1000))
    )

    decoder = make_decoder("opus", 24000, 1, 60)
    to_asr = Resampler(24000, 16000)
    stream = pocketsphinx_engine.open_stream()
    for packet in packets:  # as the server receives them: one 60 ms packet at a time
        pcm16 = to_asr.process(decoder.decode(packet))
        assert len(pcm16) <= CHUNK_60MS_16K + 64
        stream.accept(pcm16)
    stream.accept(to_asr.flush())
    text = stream.finish()
    stream.close()
    assert CASES[sentence] <= set(text.split()), text
