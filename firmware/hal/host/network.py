# Host stand-in for `network`: a station interface that is always on the loopback network.
STA_IF = 0
AP_IF = 1


class WLAN:
    IF_STA = 0
    IF_AP = 1

    def __init__(self, interface=0):
        self._active = False
        self._ssid = None
        self._mac = b"\x02\x00\x00\x00\x00\x01"

    def active(self, on=None):
        if on is None:
            return self._active
        self._active = bool(on)

    def connect(self, ssid=None, key=None):
        if not self._active:
            raise OSError("WLAN not active")
        self._ssid = ssid

    def disconnect(self):
        self._ssid = None

    def isconnected(self):
        return self._active and self._ssid is not None

    def status(self, param=None):
        if param == "rssi":
            return -40
        return 1010 if self.isconnected() else 1000

    def ifconfig(self):
        return ("127.0.0.1", "255.0.0.0", "127.0.0.1", "127.0.0.1")

    def config(self, name):
        if name == "mac":
            return self._mac
        if name in ("ssid", "essid"):
            return self._ssid or ""
        if name == "channel":
            return 1
        raise ValueError(name)

    def scan(self):
        return []
