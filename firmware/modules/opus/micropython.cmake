# The `opus` user C module for MicroPython's CMake ports (the ESP32: USER_C_MODULES=<abs>/firmware/modules/
# micropython.cmake). Not built here (no ESP-IDF on these machines): the host build is micropython.mk.
# OPUS_DIR (a -D cache variable or the environment) is an extracted libopus 1.5.2 source tree; libopus
# is compiled in fixed point from its own source lists (celt_sources.mk, silk_sources.mk, opus_sources.mk)
# as a static library with its private defines and include paths, so its header names (main.h, debug.h,
# ...) cannot shadow anybody else's.
if(NOT OPUS_DIR)
    set(OPUS_DIR "$ENV{OPUS_DIR}")
endif()
if(NOT EXISTS "${OPUS_DIR}/opus_sources.mk")
    message(FATAL_ERROR "the opus module needs OPUS_DIR=<libopus 1.5.2 source tree> (got '${OPUS_DIR}')")
endif()

# The files of one `NAME = a.c \ b.c ...` list in one of libopus's .mk files.
function(wren_opus_sources mkfile name out)
    file(READ "${OPUS_DIR}/${mkfile}" text)
    string(REGEX MATCH "${name} =[^\n\\]*(\\\\\n[^\n\\]*)*" block "${text}")
    string(REGEX MATCHALL "[a-z]+/[A-Za-z0-9_/]+\\.c" files "${block}")
    list(TRANSFORM files PREPEND "${OPUS_DIR}/")
    set(${out} ${files} PARENT_SCOPE)
endfunction()

wren_opus_sources(celt_sources.mk CELT_SOURCES celt)
wren_opus_sources(silk_sources.mk SILK_SOURCES silk)
wren_opus_sources(silk_sources.mk SILK_SOURCES_FIXED silk_fixed)
wren_opus_sources(opus_sources.mk OPUS_SOURCES opus)

add_library(wren_libopus STATIC ${celt} ${silk} ${silk_fixed} ${opus})
target_include_directories(wren_libopus
    PUBLIC "${OPUS_DIR}/include"
    PRIVATE "${OPUS_DIR}/celt" "${OPUS_DIR}/silk" "${OPUS_DIR}/silk/fixed")
# NONTHREADSAFE_PSEUDOSTACK: libopus's scratch is one heap block (allocated at first use, PSRAM on an
# S3 through malloc), not the 16 KB MicroPython task stack.
target_compile_definitions(wren_libopus PRIVATE
    OPUS_BUILD FIXED_POINT=1 DISABLE_FLOAT_API NONTHREADSAFE_PSEUDOSTACK PACKAGE_VERSION="1.5.2")
target_compile_options(wren_libopus PRIVATE -O2 -w)

add_library(usermod_opus INTERFACE)
target_sources(usermod_opus INTERFACE ${CMAKE_CURRENT_LIST_DIR}/modopus.c)
target_include_directories(usermod_opus INTERFACE "${OPUS_DIR}/include")
target_link_libraries(usermod_opus INTERFACE wren_libopus)
target_link_libraries(usermod INTERFACE usermod_opus)
