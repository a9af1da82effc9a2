"""The in-process uplink cost bench measures the server's own uplink path on room noise: real decoders and
the real Silero VAD, whose noise-following gate leaves room noise unscored once the floor is learnt."""

from __future__ import annotations

from tools.bench.common import noise_packets
from tools.bench.uplink_cost import WARM_FRAMES, measure


def test_room_noise_through_the_uplink_costs_microseconds_and_runs_no_vad_model() -> None:
    packets = noise_packets(seconds=(WARM_FRAMES + 10) * 0.06)
    per_frame, decode, scored = measure(n=6, rounds=4, packets=packets)
    assert 0 < decode < per_frame  # the whole path includes the decode, and more
    assert scored == 0.0  # after the 2 s warm-up the gate follows the room: no model run for noise
