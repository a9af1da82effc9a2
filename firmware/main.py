# Kept tiny and stable: everything lives in the wren_device package (deployed as .mpy).
import wren_device.app

wren_device.app.run()
