# Wren device firmware (MicroPython). The app is identical on the board and in the host simulation;
# only hal/ differs (chosen by sys.platform in wren_device.hal).
VERSION = "0.1.0"
