"""The uplink's CPU per frame, in process: what one 60 ms frame of a streaming device costs the event loop.

At 200 streaming devices the server's event loop spends most of a core on per-frame work, and the
end-to-end bench (`concurrency.py --n 200`) moves by 100-300 ms of lag p99 from one run to the next on the
same code, so a change of a few microseconds a frame cannot be seen there. This measures the same code path
on its own: N `Uplink`s (real Opus decoder, the real Silero VAD with its gates, turn detection, the
recognition stage's pre-roll), fed real Opus room noise (30 dB SNR, as the benches) through
`feed_together` in rounds of R sessions, as the server's loop rounds feed them (3-4 sessions a round at
N = 200). The first 2 s only warm the noise floors up (a device's room is carried from one utterance to the
next); the CPU time of the rest is divided by the frames fed. No recogniser opens: room noise never starts
speech, which is also what most frames of 200 devices are.

    .venv/bin/python tools/bench/uplink_cost.py [--n 200] [--rounds 4] [--seconds 10] [--repeat 3]
    WREN_BENCH_SERVER_TREE=<dir> ...   # the same for another checkout (a before / after pair)

Prints µs of CPU per frame for each repeat (each 60 ms step of all N devices is timed; the lower quartile
of the steps), and of that the libopus decode alone (the same packets through the same decoders, nothing
else), so what is Python and what is libopus stay apart.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

TREE = Path(os.environ.get("WREN_BENCH_SERVER_TREE") or Path(__file__).resolve().parents[2])
sys.path[:0] = [str(TREE / "server"), str(TREE)]
sys.path.append(str(Path(__file__).resolve().parents[2]))  # tools.bench.common, from this checkout

from wren.config import VadConfig  # noqa: E402
from wren.pipeline.turn_detection import ListenMode  # noqa: E402
from wren.pipeline.uplink import Uplink, feed_together  # noqa: E402
from wren.speech.codec import OpusDecoder  # noqa: E402
from wren.speech.vad import load_vad  # noqa: E402

from tools.bench.common import noise_packets  # noqa: E402

WARM_FRAMES = 34  # 2 s of 60 ms frames: every noise floor is known (it needs 512 ms)


def measure(n: int, rounds: int, packets: list[bytes]) -> tuple[float, float, float]:
    """(µs of CPU per frame through `feed_together`, µs of it in libopus alone, windows scored a frame)."""
    # As `concurrency.py`'s server: a device quiet for longer than the default 8 s is not given up on.
    config = VadConfig(no_speech_timeout_s=120.0)
    vad = load_vad(config)
    speech = SimpleNamespace(vad=vad, asr=None)  # room noise never opens a recogniser
    uplinks = [Uplink(speech, config, OpusDecoder(16000), 16000, ListenMode.AUTO) for _ in range(n)]
    for packet in packets[:WARM_FRAMES]:
        for start in range(0, n, rounds):
            feed_together([(uplink, [packet]) for uplink in uplinks[start : start + rounds]])
    scored = vad.inferences
    steps = []
    for packet in packets[WARM_FRAMES:]:
        started = time.process_time()
        for start in range(0, n, rounds):
            feed_together([(uplink, [packet]) for uplink in uplinks[start : start + rounds]])
        steps.append(time.process_time() - started)
    scored = (vad.inferences - scored) / (len(steps) * n)
    for uplink in uplinks:
        uplink.close()
    decoders = [OpusDecoder(16000) for _ in range(n)]
    for packet in packets[:WARM_FRAMES]:
        for decoder in decoders:
            decoder.decode(packet)
    decodes = []
    for packet in packets[WARM_FRAMES:]:
        started = time.process_time()
        for decoder in decoders:
            decoder.decode(packet)
        decodes.append(time.process_time() - started)
    return _typical(steps) / n * 1e6, _typical(decodes) / n * 1e6, scored


def _typical(seconds: list[float]) -> float:
    """The lower quartile of the per-step times: on a shared virtual machine, steps that lost the core to a
    neighbour come out slower, never faster, so the low end is the code's own cost (the median moved by
    half between two runs of the same code, the lower quartile by a few percent)."""
    return sorted(seconds)[len(seconds) // 4]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="streaming devices (default 200)")
    parser.add_argument("--rounds", type=int, default=4, help="sessions fed in one call (default 4)")
    parser.add_argument("--seconds", type=float, default=10.0, help="audio per device (default 10)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    packets = noise_packets(args.seconds)
    if len(packets) <= WARM_FRAMES:
        parser.error(f"--seconds must give more than {WARM_FRAMES} frames (2 s of warm-up)")
    print(f"uplink CPU per 60 ms frame, N = {args.n}, {args.rounds} sessions a call, tree {TREE}")
    for _ in range(args.repeat):
        per_frame, decode, scored = measure(args.n, args.rounds, packets)
        print(f"  {per_frame:6.1f} µs a frame: libopus {decode:5.1f}, the rest {per_frame - decode:5.1f} "
              f"(Silero windows scored a frame: {scored:.3f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
