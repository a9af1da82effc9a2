# USER_C_MODULES=<abs>/firmware/modules/micropython.cmake for MicroPython's CMake ports (the ESP32): every
# Wren C module. The make-based unix port takes this directory instead and finds */micropython.mk itself.
include(${CMAKE_CURRENT_LIST_DIR}/opus/micropython.cmake)
