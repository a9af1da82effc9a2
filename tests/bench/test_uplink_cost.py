"""The in-process uplink cost bench measures the server's own uplink path on room noise: real decoders and
the real Silero VAD, whose noise-following gate leaves room noise unscored once the floor is learnt."""

from __future__ import annotations

from tools.bench.common import noise_packets
from tools.bench.uplink_cost import WARM_FRAMES, measure, parts


def test_room_noise_through_the_uplink_costs_microseconds_and_runs_no_vad_model() -> None:
    packets = noise_packets(seconds=(WARM_FRAMES + 10) * 0.06)
    per_frame, decode, scored = measure(n=6, rounds=4, packets=packets)
    assert 0 < decode < per_frame  # the whole path includes the decode, and more
    assert scored == 0.0  # after the 2 s warm-up the gate follows the room: no model run for noise


def test_each_step_of_a_quiet_frame_is_timed_within_the_whole_call() -> None:
    packets = noise_packets(seconds=(WARM_FRAMES + 10) * 0.06)
    steps = parts(rounds=4, packets=packets)
    assert steps["decode"] > 0 and steps["vad"] > 0 and steps["back"] > 0
    assert 0 < steps["plan"] <= steps["vad"]  # timed inside the VAD step, call by call
    assert steps["decode"] < steps["whole"]  # the whole call decodes, and does more
