"""The interop tests drive the same real server as tests/server: its fixtures, imported here."""

from __future__ import annotations

import pytest

from tests.server.conftest import server, speech, start_server

__all__ = ["server", "speech", "start_server"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "spoken: speaks a sentence into the server (piper speech in, a spoken reply out); "
        "one sentence a test, so `-m 'not spoken'` leaves the quick protocol checks")
