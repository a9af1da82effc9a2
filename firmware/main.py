# Kept tiny and stable: everything lives in the wren package (deployed as .mpy).
import wren.app

wren.app.run()
