"""Wire vectors (vectors.json) checked on CPython, and the same file run on real MicroPython."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.protocol import vector_check

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
VECTORS_PATH = HERE / "vectors.json"
MICROPYTHON = REPO / ".venv" / "bin" / "micropython"

DOC = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))
CASES = [(kind, vector) for kind in vector_check.KINDS for vector in DOC[kind]]


def test_vector_names_are_unique_so_failures_are_traceable() -> None:
    names = [kind + ":" + vector["name"] for kind, vector in CASES]
    assert len(names) == len(set(names))


def test_every_kind_has_valid_and_invalid_vectors() -> None:
    for kind in vector_check.KINDS:
        assert any("error" in v for v in DOC[kind]), kind
        assert any("error" not in v for v in DOC[kind]), kind


@pytest.mark.parametrize(("kind", "vector"), CASES, ids=[k + ":" + v["name"] for k, v in CASES])
def test_vector_holds_on_cpython(kind: str, vector: dict) -> None:
    problem = vector_check.CHECKS[kind](vector)
    assert problem is None, problem


def run_micropython_vectors(vectors_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, MICROPYPATH=str(REPO) + ":" + str(HERE))
    return subprocess.run(
        [str(MICROPYTHON), "-X", "heapsize=64wk", str(HERE / "mp_vectors.py"), str(vectors_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_all_vectors_hold_on_micropython_with_a_small_heap() -> None:
    proc = run_micropython_vectors(VECTORS_PATH)
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert summary == "ran " + str(len(CASES)) + " vectors, 0 failed", proc.stdout + proc.stderr


def test_micropython_runner_reports_a_broken_vector_and_fails(tmp_path: Path) -> None:
    # Guards against a runner that cannot fail: corrupt one expectation and demand a failure line.
    text = VECTORS_PATH.read_text(encoding="utf-8")
    broken = text.replace('"field": "audio_params.sample_rate"', '"field": "audio_params.rate"', 1)
    assert broken != text
    path = tmp_path / "vectors.json"
    path.write_text(broken, encoding="utf-8")
    proc = run_micropython_vectors(path)
    assert proc.returncode == 1
    lines = proc.stdout.strip().splitlines()
    assert [line for line in lines if line.startswith("FAIL json hello sample rate 44100")]
    assert lines[-1] == "ran " + str(len(CASES)) + " vectors, 1 failed"


def corrupted(kind: str, vector: dict) -> dict:
    """The same vector with a wrong expectation, which the checker must notice."""
    bad = json.loads(json.dumps(vector))
    if "error" in bad:
        if "field" in bad["error"]:
            bad["error"]["field"] = "no.such.field"
        else:
            bad["error"]["message"] = "a different message"
    elif kind == "json":
        expected = bad.get("expect") or (
            json.loads(bad["frame"]) if isinstance(bad["frame"], str) else bad["frame"]
        )
        bad["expect"] = dict(expected, unexpected_extra=1)
    elif kind == "binary":
        bad["timestamp"] += 1
    elif kind == "jsonrpc":
        bad["kind"] = "request" if bad["kind"] != "request" else "response"
    else:
        bad["page"] = [*bad["page"], "self.extra"]
    return bad


@pytest.mark.parametrize(("kind", "vector"), CASES, ids=[k + ":" + v["name"] for k, v in CASES])
def test_checker_notices_a_wrong_expectation(kind: str, vector: dict) -> None:
    assert vector_check.CHECKS[kind](corrupted(kind, vector)) is not None
