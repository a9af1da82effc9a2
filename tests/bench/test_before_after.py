"""`make bench` prints each goal's number from before the work beside today's (tools/bench/before_after.py).

No run here: the table is built from a result shaped like a full `make bench`, so the names in
tools/bench/data/before.json are checked against the names the table really uses.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.bench.before_after import DEFAULT_BEFORE, BeforeError, attach_before, load_before
from tools.bench.run_all import markdown_table, print_table, table_rows


def _full_size_result() -> dict:
    """The parts of a full `make bench` result that issue 11's goal rows are made from."""
    turns = {"first_audio_ms": {"p50": 190.0, "p95": 212.0}, "answered": 30, "turns": 30,
             "active_devices": 10, "idle_devices": 100}
    alone = {"first_audio_ms": {"p50": 189.0, "p95": 192.0}, "answered": 16, "turns": 16,
             "active_devices": 1, "idle_devices": 0}
    streaming = [{"n": n, "answered": n, "utterances": n, "uplink_lag_ms": {"p99": 9.0}} for n in (100, 200)]
    return {
        "meta": {"date_utc": "2026-12-06 03:10 UTC", "command": "make bench", "commit": "abc1234",
                 "machine": {"cores": 2, "cpu": "test", "python": "3.11", "memory_gb": 1,
                             "load_avg_at_start": [0.0]}},
        "overlap": turns, "one_person": alone, "concurrency": {"rows": streaming},
    }


def test_every_before_number_names_a_row_of_the_full_table():
    _, before = load_before(DEFAULT_BEFORE)
    names = {row["metric"] for row in table_rows(_full_size_result())}
    assert before and set(before) <= names, set(before) - names


def test_the_three_goals_have_their_before_numbers_beside_todays(capsys):
    result = _full_size_result()
    result["table"] = table_rows(result)
    source, before = load_before(DEFAULT_BEFORE)
    assert attach_before(result["table"], before) == len(before)
    result["meta"]["before_source"] = source
    print_table(result)
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("before: ") and "8aefbc8" in line for line in lines)
    lag = next(line for line in lines if line.startswith("N=200 streaming: uplink lag p99"))
    assert lag.split()[-8:] == ["34300", "ms", "9.0", "ms", "<", "100", "ms", "met"]  # before, then measured
    assert "first audio p50 | 218 ms | 189 ms | ≤ 150 ms | MISSED |" in markdown_table(result)


def test_a_saved_run_can_be_the_before(tmp_path: Path):
    earlier = _full_size_result()
    earlier["table"] = table_rows(earlier)
    saved = tmp_path / "earlier.json"
    saved.write_text(json.dumps(earlier))
    source, before = load_before(saved)
    assert "abc1234" in source and "2026-12-06 03:10 UTC" in source
    today = _full_size_result()
    today["overlap"]["first_audio_ms"]["p95"] = 250.0
    rows = table_rows(today)
    attach_before(rows, before)
    p95 = next(row for row in rows if row["metric"].startswith("overlapping") and "p95" in row["metric"])
    assert (p95["before"], p95["value"]) == (212.0, 250.0)
    unknown = next(row for row in rows if row["metric"].startswith("manual: end of speech → stt p50"))
    assert unknown["before"] is None  # the earlier run had no such number


def test_a_file_that_is_not_a_run_is_refused_by_name(tmp_path: Path):
    odd = tmp_path / "odd.json"
    odd.write_text('{"rows": []}')
    with pytest.raises(BeforeError, match=r"odd\.json"):
        load_before(odd)
    with pytest.raises(BeforeError, match="cannot read"):
        load_before(tmp_path / "missing.json")
