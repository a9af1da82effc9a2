"""The console tests drive the same real server as tests/server: its fixtures, imported here."""

from __future__ import annotations

import pytest

from tests.server.conftest import server, speech, start_server

__all__ = ["server", "speech", "start_server"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "browser: drives the web console in headless Chromium (Selenium); skipped when chromium "
        "or chromedriver is missing (`make test` installs them)")
