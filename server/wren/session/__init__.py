"""The device session: state, listen modes, uplink capture, turns, empty-input rule and downlink pacing."""

from wren.session.device_session import DeviceSession
from wren.session.services import Connection, ConnectionClosed, SessionServices

__all__ = ["Connection", "ConnectionClosed", "DeviceSession", "SessionServices"]
