"""The respond stage: the agent's streaming words → sentences to synthesise, and the face to show.

The first clause leaves as soon as the splitter sees its end, so speech starts while the agent is still
writing. The face changes before the first words: if the agent named no emotion by then, the default one
goes out first. `Sentence` frames that arrive ready-made (a prompt the session decided to speak) pass
through as they are, without a face change.
"""

from __future__ import annotations

from wren.pipeline.frames import EmotionFrame, Frame, Sentence, TextDelta
from wren.pipeline.stage import Push, Stage
from wren.pipeline.timing import TurnTiming
from wren.speech.sentences import SentenceSplitter

DEFAULT_EMOTION = "neutral"


class RespondStage(Stage):
    name = "respond"

    def __init__(self, timing: TurnTiming | None = None) -> None:
        self._splitter = SentenceSplitter()
        self._timing = timing
        self._emotion_sent = False

    async def process(self, frame: Frame, push: Push) -> None:
        if isinstance(frame, TextDelta):
            for text in self._splitter.feed(frame.text):
                await self._sentence(Sentence(text), push)
        elif isinstance(frame, Sentence):  # ready-made (a prompt): no face change, as the device shows none
            if frame.text.strip():
                self._mark()
                await push(frame)
        elif isinstance(frame, EmotionFrame):
            self._emotion_sent = True
            await push(frame)
        else:
            await push(frame)

    async def flush(self, push: Push) -> None:
        for text in self._splitter.flush():
            await self._sentence(Sentence(text), push)

    async def _sentence(self, sentence: Sentence, push: Push) -> None:
        if not sentence.text.strip():
            return
        if not self._emotion_sent:
            self._emotion_sent = True
            await push(EmotionFrame(DEFAULT_EMOTION))
        self._mark()
        await push(sentence)

    def _mark(self) -> None:
        if self._timing is not None:
            self._timing.mark("first_sentence")
