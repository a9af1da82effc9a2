# The `opus` user C module for MicroPython's make-based ports (the unix port: `make firmware-host`, which
# passes USER_C_MODULES=firmware/modules and OPUS_DIR). OPUS_DIR is an extracted libopus 1.5.2 source tree;
# its own source lists (celt_sources.mk, silk_sources.mk, opus_sources.mk) say what to compile: the
# fixed-point build (SILK_SOURCES_FIXED, no float API), as on an ESP32-class target.
OPUS_MOD_DIR := $(USERMOD_DIR)

ifeq ($(OPUS_DIR),)
$(error the opus module needs OPUS_DIR=<libopus source tree> (make firmware-host sets it))
endif

include $(OPUS_DIR)/celt_sources.mk
include $(OPUS_DIR)/silk_sources.mk
include $(OPUS_DIR)/opus_sources.mk

SRC_USERMOD_C += $(OPUS_MOD_DIR)/modopus.c
# Library sources: compiled and linked, not scanned for qstrs.
SRC_USERMOD_LIB_C += $(addprefix $(OPUS_DIR)/,$(CELT_SOURCES) $(SILK_SOURCES) $(SILK_SOURCES_FIXED) $(OPUS_SOURCES))
CFLAGS_USERMOD += -I$(OPUS_DIR)/include

# libopus's own objects get its build defines, include paths and -O2, and not MicroPython's -Werror
# warning set (upstream code, compiled unmodified). VAR_ARRAYS: scratch on the C stack (the host's is 8 MB;
# the ESP32 build, micropython.cmake, uses a pseudostack instead).
$(BUILD)/$(OPUS_DIR)/%.o: CFLAGS += -O2 -w -DOPUS_BUILD -DFIXED_POINT=1 -DDISABLE_FLOAT_API -DVAR_ARRAYS \
	-DPACKAGE_VERSION='"1.5.2"' -I$(OPUS_DIR)/celt -I$(OPUS_DIR)/silk -I$(OPUS_DIR)/silk/fixed
