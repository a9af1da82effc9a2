"""Streaming ASR in worker processes, behind the same `AsrEngine`/`AsrStream` contract.

`load_asr` uses this when `asr.workers > 0` (pocketsphinx and vosk): pocketsphinx holds the GIL while it
decodes, and a worker process has its own. Each part where it lives:
- `supervisor`: `ProcessAsrEngine`: starting, least-loaded pick within each worker's share of the stream
  ceiling, restart, stop (and the atexit hook);
- `restarts`: the backoff between restarts of a worker that keeps failing;
- `child`: the worker process's main loop (why processes at all: its docstring);
- `channel`: the pipe protocol (named message types), the sender/reader threads, and the overflow policy
  of audio queued for a worker;
- `proxy`: `ProcessAsrStream`, one utterance on a worker;
- `wren.speech.asr.cmn`: the per-speaker cepstral means that follow a speaker to any worker.
"""

from __future__ import annotations

from wren.speech.asr.workers.proxy import ProcessAsrStream
from wren.speech.asr.workers.supervisor import ProcessAsrEngine

__all__ = ["ProcessAsrEngine", "ProcessAsrStream"]
