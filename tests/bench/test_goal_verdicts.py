"""`make bench` judges each goal the way the issue states it: the uplink lag's goal is strict (p99 < 100 ms).

The lag percentiles are the floors of 1 ms histogram buckets below 100 ms and 10 ms buckets above
(server/wren/pipeline/timing.py), so a p99 printed as 100 ms lies in 100–110 ms and misses the goal.
"""

from __future__ import annotations

import pytest

from tools.bench.run_all import table_rows


def _streaming(p99: float, answered: int = 200) -> dict:
    return {"concurrency": {"rows": [{"n": 200, "answered": answered, "utterances": 200,
                                      "uplink_lag_ms": {"p99": p99}}]}}


def _row(rows: list[dict], metric: str) -> dict:
    return next(row for row in rows if row["metric"] == metric)


@pytest.mark.parametrize(
    ("p99", "status"), [(9.0, "met"), (99.0, "met"), (100.0, "MISSED"), (180.0, "MISSED")]
)
def test_uplink_lag_goal_is_strictly_below_100_ms(p99: float, status: str):
    row = _row(table_rows(_streaming(p99)), "N=200 streaming: uplink lag p99")
    assert (row["target"], row["status"]) == ("< 100 ms", status)


def test_a_goal_stated_as_at_most_is_met_at_its_bound():
    one_person = {"first_audio_ms": {"p50": 150.0, "p95": 250.0}}
    rows = table_rows({"one_person": one_person})
    p95 = _row(rows, "one person, push-to-talk, 30 dB SNR, 180 ms trailing audio: first audio p95")
    assert (p95["target"], p95["status"]) == ("≤ 250 ms", "met")


def test_every_utterance_must_be_answered_whatever_the_lag():
    rows = table_rows(_streaming(9.0, answered=199))
    assert _row(rows, "N=200 streaming: utterances answered")["status"] == "MISSED"
