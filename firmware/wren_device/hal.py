# The only place that knows which hardware we run on: hal/esp32 on the board, hal/host in the simulation.
# What a hal provides (make_board, on_fatal, config_path, state_path, sounds_path and the board object)
# is written down in firmware/hal/README.md.
import sys

if sys.platform == "esp32":
    from hal.esp32.board import config_path, make_board, on_fatal, sounds_path, state_path
else:
    from hal.host.board import config_path, make_board, on_fatal, sounds_path, state_path

__all__ = ["config_path", "make_board", "on_fatal", "sounds_path", "state_path"]
