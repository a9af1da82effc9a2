"""The aiohttp front door: one port for the device WebSocket, the OTA endpoint and a status page."""
