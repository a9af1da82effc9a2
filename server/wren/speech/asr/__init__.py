"""Streaming speech recognition: `load_asr(config) -> AsrEngine`.

Usage per utterance (all calls blocking CPU work; the server runs them in its executor):

    stream = engine.open_stream(speaker=device_id)
                                      # a warm recogniser from the pool; `speaker` (optional) lets it start
                                      # from that device's channel adaptation (pocketsphinx CMN);
                                      # AsrUnavailable past the stream ceiling (`cap`)
    stream.accept(pcm16k)             # as audio arrives; decoding happens here, while the user speaks
    stream.pause() / stream.resume()  # optional: the VAD heard a pause / speech again (moonshine decodes
                                      # speculatively at a pause)
    stream.partial()                  # best guess so far
    text = stream.finish()            # end of utterance: final lowercase words, noise tokens removed
    stream.close()                    # recogniser back to the pool (also after an abandoned utterance)

Thread-safety: the engine (its pool) is thread-safe; one AsrStream must be used by one thread at a time
(consecutive executor jobs are fine, concurrent ones are not).
"""

from __future__ import annotations

from wren.config import AsrConfig
from wren.speech.asr.base import AsrEngine, AsrStream
from wren.speech.asr.errors import AsrError, AsrUnavailable
from wren.speech.asr.local import ENGINES, engine_name, load_in_process, try_moonshine, without_moonshine


def close_asr(engine: object) -> None:
    """Release what an engine holds outside this process (worker processes); in-process engines: nothing."""
    close = getattr(engine, "close", None)
    if callable(close):
        close()


def load_asr(config: AsrConfig, max_streams: int = 0) -> AsrEngine:
    """The configured engine. moonshine: one shared model in this process (`wren.speech.asr.moonshine`);
    pocketsphinx/vosk: with `config.workers > 0` in that many worker processes
    (`wren.speech.asr.workers`), with 0 in this process (`wren.speech.asr.local`). At most `max_streams`
    streams are open at once (`[limits] asr_streams`, `wren.speech.asr.cap`; 0 = no limit): past it
    `open_stream` raises `AsrUnavailable`. wyoming: a remote server (`wren.speech.asr.wyoming`)."""
    if config.engine.strip().lower() == "wyoming":  # nothing to load here, so never in worker processes
        from wren.speech.asr.wyoming import load_wyoming_asr

        return load_wyoming_asr(config, max_streams)
    if engine_name(config) == "moonshine":
        loaded = try_moonshine(config, max_streams)
        if loaded is not None:
            return loaded
        config = without_moonshine(config)  # and then in worker processes, if configured
    if config.workers > 0:
        from wren.speech.asr.workers import ProcessAsrEngine

        return ProcessAsrEngine(config, workers=config.workers, max_streams=max_streams)
    return load_in_process(config, max_streams)


__all__ = ["ENGINES", "AsrEngine", "AsrError", "AsrStream", "AsrUnavailable", "close_asr", "load_asr"]
