"""Per-speaker cepstral means (pocketsphinx CMN): the one cache both places that keep them use.

pocketsphinx_engine explains why a stream starts from its speaker's last mean. In-process, the engine
keeps the means; with worker processes, the server process keeps them (`workers.supervisor`) so a speaker
keeps its adaptation on whichever worker serves it next, and across worker restarts.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

# ≈200 bytes each; past this the least recently heard speaker is forgotten first (policy: drop oldest).
MAX_REMEMBERED_SPEAKERS = 4096


class SpeakerCmnCache:
    """speaker → the mean (pocketsphinx's comma-separated string) its last utterance ended with.

    Thread-safe: sessions finish utterances on several executor threads (and proxies in reader threads)."""

    def __init__(self, max_speakers: int = MAX_REMEMBERED_SPEAKERS) -> None:
        self._max_speakers = max_speakers
        self._means: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, speaker: str) -> str | None:
        """The remembered mean, without counting as a use (a peek, e.g. to pass it to another process)."""
        with self._lock:
            return self._means.get(speaker)

    def recall(self, speaker: str) -> str | None:
        """The remembered mean for a stream about to start: the speaker counts as recently heard."""
        with self._lock:
            cmn = self._means.get(speaker)
            if cmn is not None:
                self._means.move_to_end(speaker)
            return cmn

    def remember(self, speaker: str, cmn: str) -> None:
        with self._lock:
            self._means[speaker] = cmn
            self._means.move_to_end(speaker)
            while len(self._means) > self._max_speakers:
                self._means.popitem(last=False)

    def forget(self, speaker: str) -> None:
        with self._lock:
            self._means.pop(speaker, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._means)
