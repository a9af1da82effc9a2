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
    ... --parts                        # and where a frame's time goes, step by step (one call's sessions)

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

import wren.pipeline.uplink as uplink_module  # noqa: E402
from wren.config import VadConfig  # noqa: E402
from wren.pipeline.frames import Pcm, UplinkPacket  # noqa: E402
from wren.pipeline.turn_detection import ListenMode  # noqa: E402
from wren.pipeline.uplink import Uplink, VadStage, feed_together  # noqa: E402
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


def parts(rounds: int, packets: list[bytes]) -> dict[str, float]:
    """µs per frame of each step of the uplink, for one call's `rounds` sessions fed the same room noise: the
    steps `feed_together` runs, called one by one (decode, the rest of the front, the VAD with its energy
    planning apart, turn detection and the recogniser), and `feed_together` whole on twin uplinks, whose
    difference from the steps' sum is its own bookkeeping."""
    config = VadConfig(no_speech_timeout_s=120.0)
    speech = SimpleNamespace(vad=load_vad(config), asr=None)
    stepped = [Uplink(speech, config, OpusDecoder(16000), 16000, ListenMode.AUTO) for _ in range(rounds)]
    whole = [Uplink(speech, config, OpusDecoder(16000), 16000, ListenMode.AUTO) for _ in range(rounds)]
    alone = [OpusDecoder(16000) for _ in range(rounds)]
    planning = [0.0]
    plan_together = uplink_module.plan_together

    def timed_plan(work):  # type: ignore[no-untyped-def]
        started = time.process_time()
        try:
            return plan_together(work)
        finally:
            planning[0] += time.process_time() - started

    steps: dict[str, list[float]] = {k: [] for k in ("whole", "decode", "front", "vad", "plan", "back")}
    for at, packet in enumerate(packets):
        t0 = time.process_time()
        feed_together([(uplink, [packet]) for uplink in whole])
        t1 = time.process_time()
        for decoder in alone:
            decoder.decode(packet)
        t2 = time.process_time()
        fronts = [uplink._front.push(UplinkPacket(packet)) for uplink in stepped]
        t3 = time.process_time()
        planning[0] = 0.0
        uplink_module.plan_together = timed_plan  # the stepped VAD's planning only, not the whole call's
        try:
            fed = [(uplink, f) for uplink, out in zip(stepped, fronts, strict=True) for f in out
                   if isinstance(f, Pcm)]
            activity = VadStage.process_together([(uplink._vad, f) for uplink, f in fed])
        finally:
            uplink_module.plan_together = plan_together
        t4 = time.process_time()
        for (uplink, _), done in zip(fed, activity, strict=True):
            uplink._back.push(done)
        t5 = time.process_time()
        if at >= WARM_FRAMES:
            for key, spent in (("whole", t1 - t0), ("decode", t2 - t1), ("front", t3 - t2),
                               ("vad", t4 - t3), ("plan", planning[0]), ("back", t5 - t4)):
                steps[key].append(spent)
    per = {key: _typical(spent) / rounds * 1e6 for key, spent in steps.items()}
    per["front"] -= per["decode"]  # the front's own frames and chain, the decode being timed alone
    per["bookkeeping"] = per["whole"] - per["decode"] - per["front"] - per["vad"] - per["back"]
    return per


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
    parser.add_argument("--parts", action="store_true", help="also where one frame's time goes, by step")
    args = parser.parse_args()
    packets = noise_packets(args.seconds)
    if len(packets) <= WARM_FRAMES:
        parser.error(f"--seconds must give more than {WARM_FRAMES} frames (2 s of warm-up)")
    print(f"uplink CPU per 60 ms frame, N = {args.n}, {args.rounds} sessions a call, tree {TREE}")
    for _ in range(args.repeat):
        per_frame, decode, scored = measure(args.n, args.rounds, packets)
        print(f"  {per_frame:6.1f} µs a frame: libopus {decode:5.1f}, the rest {per_frame - decode:5.1f} "
              f"(Silero windows scored a frame: {scored:.3f})", flush=True)
    if args.parts:
        print(f"by step, µs a frame ({args.rounds} sessions a call; the lower quartile of the calls):")
        for _ in range(args.repeat):
            p = parts(args.rounds, packets)
            print(f"  {p['whole']:6.1f} whole: libopus {p['decode']:5.1f}, the front's frames "
                  f"{p['front']:4.1f}, VAD {p['vad']:5.1f} (energy and gate planning {p['plan']:5.1f}), "
                  f"turn detection and recogniser {p['back']:4.1f}, feed_together's own "
                  f"{p['bookkeeping']:4.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
