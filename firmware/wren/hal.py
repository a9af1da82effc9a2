# The only place that knows which hardware we run on: hal/esp32 on the board, hal/host in the simulation.
import sys

if sys.platform == "esp32":
    from hal.esp32.board import make_board, on_fatal
else:
    from hal.host.board import make_board, on_fatal

__all__ = ["make_board", "on_fatal"]
