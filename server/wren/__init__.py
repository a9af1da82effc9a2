"""Wren: an offline-first voice assistant server for ESP32 boards (xiaozhi protocol)."""

__version__ = "0.1.0"
