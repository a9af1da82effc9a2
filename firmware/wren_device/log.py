# One line per event on the console (UART on the board, stdout in the simulation; tests read it).
import time

_t0 = time.ticks_ms()


def log(tag, *parts):
    print("[%7d] %s:" % (time.ticks_diff(time.ticks_ms(), _t0), tag), *parts)
