"""How stages are written and joined.

A stage does one job with one processing method; frames it does not handle pass through unchanged.
There are two kinds, because the turn's two halves run differently:

- `BlockingStage` (the uplink: decode, resample, VAD, turn detection, recognition) is CPU work that runs
  inside the listen executor. `Chain` joins such stages in order and pushes a whole run of packets
  through in one executor job: one thread hand-off per run instead of one per stage per packet.
- `Stage` (the downlink: respond, synthesise, pace) is async. `Pipeline` runs each stage as a task, joined
  by bounded queues whose overflow policy is to block the producer (back-pressure): synthesis waits when
  the pacer is far enough ahead, and the agent waits when synthesis is behind. Nothing is dropped. A
  `SystemFrame` from the source skips the queues: it goes through every stage at once.

Interruption is by turn: a turn's pipeline is cancelled as a whole (every task, every queue) and the next
turn builds a new one, so no state of an aborted turn survives into the next (Pipecat's
cancel-and-re-create). A stage that cannot handle one frame puts out a `StageError` frame and goes on;
an exception that escapes a stage ends the pipeline, and `Pipeline.run` re-raises it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Sequence

from wren.pipeline.frames import EndOfStream, Frame, SystemFrame

Push = Callable[[Frame], Awaitable[None]]


class StageCancelled(RuntimeError):
    """A stage's task ended cancelled though the pipeline was not (e.g. its executor was shut down)."""


class BlockingStage:
    """A synchronous stage; `process` returns the frames it puts out for one frame in."""

    name = "stage"

    def process(self, frame: Frame) -> Iterable[Frame]:
        return (frame,)

    def close(self) -> None:
        """Give back what the stage holds (a VAD context, a recogniser); called once, on any path."""


class Chain:
    """Blocking stages in order. `push(frame)` returns what comes out of the last stage."""

    def __init__(self, stages: Sequence[BlockingStage]) -> None:
        self.stages = tuple(stages)

    def push(self, frame: Frame) -> list[Frame]:
        frames: list[Frame] = [frame]
        for stage in self.stages:
            out: list[Frame] = []
            for f in frames:
                out.extend(stage.process(f))
            if not out:
                return out
            frames = out
        return frames

    def close(self) -> None:
        errors: list[Exception] = []
        for stage in self.stages:
            try:
                stage.close()
            except Exception as exc:  # every stage gets its chance to release
                errors.append(exc)
        if errors:
            raise errors[0]


class Stage:
    """An async stage: `process` handles one frame and pushes what it makes; `flush` runs at the end."""

    name = "stage"

    async def process(self, frame: Frame, push: Push) -> None:
        await push(frame)

    async def flush(self, push: Push) -> None:
        """The stream ended: put out anything held back (the last sentence, the padded last frame)."""


async def _discard(_frame: Frame) -> None:
    return None


class Pipeline:
    """Async stages joined by bounded queues; `run(source)` feeds them and returns once all are done.

    `capacities[i]` bounds the queue in front of stage i (overflow policy: the producer waits)."""

    def __init__(self, stages: Sequence[Stage], capacities: Sequence[int], name: str = "pipeline") -> None:
        if len(capacities) != len(stages):
            raise ValueError("one queue capacity per stage")
        if any(c < 1 for c in capacities):
            raise ValueError("every queue is bounded: capacities must be ≥ 1")
        self.stages = tuple(stages)
        self.capacities = tuple(capacities)
        self.name = name

    async def run(self, source: AsyncIterable[Frame]) -> None:
        queues: list[asyncio.Queue[Frame]] = [asyncio.Queue(c) for c in self.capacities]

        async def at_once(i: int, frame: Frame) -> None:
            if i < len(self.stages):
                await self.stages[i].process(frame, lambda out: at_once(i + 1, out))

        async def feed() -> None:
            async for frame in source:
                if isinstance(frame, SystemFrame):
                    await at_once(0, frame)  # through every stage now, ahead of the queues
                else:
                    await queues[0].put(frame)
            await queues[0].put(EndOfStream())

        async def drive(i: int, stage: Stage) -> None:
            push = queues[i + 1].put if i + 1 < len(queues) else _discard
            while True:
                frame = await queues[i].get()
                if isinstance(frame, EndOfStream):
                    await stage.flush(push)
                    await push(frame)
                    return
                await stage.process(frame, push)

        spawn = asyncio.get_running_loop().create_task
        tasks = [spawn(feed(), name=f"{self.name}:source")]
        tasks += [spawn(drive(i, s), name=f"{self.name}:{s.name}") for i, s in enumerate(self.stages)]
        try:
            # Every task finishing means every frame went through; any failure ends the lot. A task that
            # ended cancelled without us cancelling it (an executor shut down under it) is a failure too:
            # the stages after it would wait forever for frames that never come.
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task.cancelled():
                        raise StageCancelled(f"{task.get_name()} was cancelled")
                    if task.exception() is not None:
                        raise task.exception()  # type: ignore[misc]
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
