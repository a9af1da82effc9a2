"""webrtcvad behind the VAD interface of `wren.speech.vad` (`[vad] engine = "webrtc"`): 30 ms windows, each
exactly 0.0 or 1.0."""

from __future__ import annotations

from wren.speech.vad_windows import SAMPLE_RATE, NoiseFloor, WindowBuffer


class WebrtcVadModel:
    engine = "webrtc"
    window_ms = 30

    def __init__(self, aggressiveness: int = 2) -> None:
        import webrtcvad

        self._webrtcvad = webrtcvad
        self.aggressiveness = aggressiveness

    def new_stream(self, room: NoiseFloor | None = None) -> WebrtcVadStream:  # webrtcvad has its own
        return WebrtcVadStream(self._webrtcvad.Vad(self.aggressiveness))


class WebrtcVadStream:
    """webrtcvad's noise estimator starts from zero, so the first ≈90 ms of any signal (even -60 dBFS
    hiss) read as speech; those settling windows are reported as 0.0. Speech that really starts at once
    loses at most 90 ms of detection, which the session's pre-roll buffer covers."""

    window_ms = WebrtcVadModel.window_ms
    settle_windows = 3

    def __init__(self, vad: object) -> None:
        self._vad = vad
        self._buffer = WindowBuffer(SAMPLE_RATE * self.window_ms // 1000 * 2)
        self._seen = 0

    def process(self, pcm16k: bytes) -> list[float]:
        out = []
        for window in self._buffer.windows(pcm16k):
            speech = self._vad.is_speech(window, SAMPLE_RATE)
            self._seen += 1
            out.append(1.0 if speech and self._seen > self.settle_windows else 0.0)
        return out

    def reset(self) -> None:
        # webrtcvad has no reset; its noise estimate is worth keeping, only our buffer goes.
        self._buffer.clear()

    def close(self) -> None:
        self._buffer.clear()
