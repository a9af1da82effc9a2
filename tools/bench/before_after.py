"""The `before` column of `make bench`: each row's number from an earlier run, beside today's.

By default the earlier run is tools/bench/data/before.json, the numbers of issue 11's three goals as they
stood when the work on them began (the first `make bench` that printed all three rows; where it came from
is in the file). `run_all.py --before PATH` compares against any other run instead: a saved `--json`
result (say, the last bench-results/latest.json copied aside before a change), or a file shaped like
before.json. Rows are matched by their metric name, so a row that an earlier run did not have, or that
was renamed since, shows no before value; tests/bench/test_before_after.py keeps before.json's names in
step with the table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DEFAULT_BEFORE = Path(__file__).resolve().parent / "data" / "before.json"


class BeforeError(ValueError):
    """A --before file that is neither a saved run nor a before.json."""


def load_before(path: str | Path) -> tuple[str, dict[str, Any]]:
    """(where the numbers come from, metric name → value) from before.json or a saved `--json` result."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BeforeError(f"cannot read the before run {path}: {exc}") from exc
    if isinstance(data.get("values"), dict):  # before.json
        return str(data.get("source") or path), dict(data["values"])
    if isinstance(data.get("table"), list):  # a saved run_all.py --json result
        meta = data.get("meta") or {}
        command, commit = meta.get("command", "run_all.py"), meta.get("commit", "?")
        source = f"{command} at {commit}, {meta.get('date_utc', '?')}"
        return source, {row["metric"]: row.get("value") for row in data["table"] if "metric" in row}
    raise BeforeError(f"{path} is neither a saved run_all.py --json result nor a before.json ('values')")


def attach_before(rows: list[dict], before: dict[str, Any]) -> int:
    """Give every row its `before` value (None where the earlier run had no such row); how many had one."""
    found = 0
    for row in rows:
        row["before"] = before.get(row["metric"])
        found += row["before"] is not None
    return found


def before_text(row: dict, fmt: Any) -> str:
    """The before cell: the earlier number in the row's unit, or empty."""
    value = row.get("before")
    if value is None:
        return ""
    return value if isinstance(value, str) else fmt(value, row.get("unit", ""))
