// Wren's `opus` module for MicroPython: a libopus encoder and decoder for a voice device, written against
// libopus's public API (opus.h) only.
//
//   enc = opus.Encoder(sample_rate=16000, channels=1, duration_ms=60, complexity=0, dtx=True,
//                      bitrate=16000, vbr=True, application=opus.APPLICATION_VOIP)
//   n = enc.encode(pcm, out)        # one frame of int16 PCM from the start of pcm -> packet bytes in out
//   dec = opus.Decoder(sample_rate=24000, channels=1)
//   samples = dec.decode(packet, pcm_out[, nbytes])   # samples per channel now in pcm_out
//
// Both write into the caller's buffers and allocate nothing per call (tests/firmware/test_opus_build.py
// proves it under micropython.heap_lock()). The codec states are allocated once, outside the GC heap:
// malloc() on the host, PSRAM first on an ESP32 (heap_caps_malloc), and freed by close() or the finaliser.

#include <stdint.h>
#include <stdlib.h>

#include "py/obj.h"
#include "py/runtime.h"

#include "opus.h"

#if defined(ESP_PLATFORM)
#include "esp_heap_caps.h"
static void *state_alloc(size_t n) {
    void *p = heap_caps_malloc(n, MALLOC_CAP_SPIRAM | MALLOC_CAP_8BIT);
    return p ? p : heap_caps_malloc(n, MALLOC_CAP_8BIT);
}
#define state_free heap_caps_free
#else
#define state_alloc malloc
#define state_free free
#endif

#define MAX_FRAME_MS (120)  // the longest frame libopus encodes or decodes in one call

static MP_NORETURN void raise_opus(int err) {
    mp_raise_msg_varg(&mp_type_ValueError, MP_ERROR_TEXT("opus: %s"), opus_strerror(err));
}

static MP_NORETURN void raise_closed(void) {
    mp_raise_ValueError(MP_ERROR_TEXT("opus: closed"));
}

static void check_rate_channels(mp_int_t rate, mp_int_t channels) {
    if (rate != 8000 && rate != 12000 && rate != 16000 && rate != 24000 && rate != 48000) {
        mp_raise_ValueError(MP_ERROR_TEXT("opus: sample_rate must be 8000, 12000, 16000, 24000 or 48000"));
    }
    if (channels != 1 && channels != 2) {
        mp_raise_ValueError(MP_ERROR_TEXT("opus: channels must be 1 or 2"));
    }
}

// A buffer of int16 samples: libopus reads and writes opus_int16, which must be aligned (an Xtensa core
// faults on an unaligned 16-bit access), so an odd-offset memoryview is refused rather than crashing.
static void get_pcm_buffer(mp_obj_t obj, mp_buffer_info_t *buf, mp_uint_t flags) {
    mp_get_buffer_raise(obj, buf, flags);
    if ((uintptr_t)buf->buf & 1) {
        mp_raise_ValueError(MP_ERROR_TEXT("opus: pcm buffer not 2-byte aligned"));
    }
}

// ---- Encoder --------------------------------------------------------------------------------------------

typedef struct _opus_encoder_obj_t {
    mp_obj_base_t base;
    OpusEncoder *st;
    mp_int_t frame_size;  // samples per channel in one frame
    mp_int_t channels;
    mp_int_t state_bytes;
} opus_encoder_obj_t;

static mp_obj_t encoder_make_new(const mp_obj_type_t *type, size_t n_args, size_t n_kw, const mp_obj_t *all_args) {
    enum { ARG_sample_rate, ARG_channels, ARG_duration_ms, ARG_complexity, ARG_dtx, ARG_bitrate, ARG_vbr,
           ARG_application };
    static const mp_arg_t allowed_args[] = {
        { MP_QSTR_sample_rate, MP_ARG_INT, {.u_int = 16000} },
        { MP_QSTR_channels, MP_ARG_INT, {.u_int = 1} },
        { MP_QSTR_duration_ms, MP_ARG_INT, {.u_int = 60} },
        { MP_QSTR_complexity, MP_ARG_KW_ONLY | MP_ARG_INT, {.u_int = 0} },
        { MP_QSTR_dtx, MP_ARG_KW_ONLY | MP_ARG_BOOL, {.u_bool = true} },
        { MP_QSTR_bitrate, MP_ARG_KW_ONLY | MP_ARG_INT, {.u_int = 16000} },
        { MP_QSTR_vbr, MP_ARG_KW_ONLY | MP_ARG_BOOL, {.u_bool = true} },
        { MP_QSTR_application, MP_ARG_KW_ONLY | MP_ARG_INT, {.u_int = OPUS_APPLICATION_VOIP} },
    };
    mp_arg_val_t args[MP_ARRAY_SIZE(allowed_args)];
    mp_arg_parse_all_kw_array(n_args, n_kw, all_args, MP_ARRAY_SIZE(allowed_args), allowed_args, args);

    mp_int_t rate = args[ARG_sample_rate].u_int;
    mp_int_t channels = args[ARG_channels].u_int;
    mp_int_t ms = args[ARG_duration_ms].u_int;
    check_rate_channels(rate, channels);
    if (ms != 10 && ms != 20 && ms != 40 && ms != 60 && ms != 80 && ms != 100 && ms != MAX_FRAME_MS) {
        mp_raise_ValueError(MP_ERROR_TEXT("opus: duration_ms must be 10, 20, 40, 60, 80, 100 or 120"));
    }
    if (args[ARG_complexity].u_int < 0 || args[ARG_complexity].u_int > 10) {
        mp_raise_ValueError(MP_ERROR_TEXT("opus: complexity must be 0..10"));
    }

    opus_encoder_obj_t *self = mp_obj_malloc_with_finaliser(opus_encoder_obj_t, type);
    self->st = NULL;
    self->frame_size = rate * ms / 1000;
    self->channels = channels;
    self->state_bytes = opus_encoder_get_size((int)channels);
    OpusEncoder *st = state_alloc(self->state_bytes);
    if (st == NULL) {
        mp_raise_msg(&mp_type_MemoryError, MP_ERROR_TEXT("opus: no memory for the encoder state"));
    }
    int err = opus_encoder_init(st, (opus_int32)rate, (int)channels, (int)args[ARG_application].u_int);
    err = err ? err : opus_encoder_ctl(st, OPUS_SET_COMPLEXITY((opus_int32)args[ARG_complexity].u_int));
    err = err ? err : opus_encoder_ctl(st, OPUS_SET_DTX(args[ARG_dtx].u_bool ? 1 : 0));
    err = err ? err : opus_encoder_ctl(st, OPUS_SET_BITRATE((opus_int32)args[ARG_bitrate].u_int));
    err = err ? err : opus_encoder_ctl(st, OPUS_SET_VBR(args[ARG_vbr].u_bool ? 1 : 0));
    if (err != OPUS_OK) {
        state_free(st);
        raise_opus(err);
    }
    self->st = st;
    return MP_OBJ_FROM_PTR(self);
}

// encode(pcm, out) -> bytes of the packet written to the start of out. pcm holds at least one frame
// (frame_size * channels int16 samples, native byte order); exactly one frame is read from its start.
static mp_obj_t encoder_encode(mp_obj_t self_in, mp_obj_t pcm_in, mp_obj_t out_in) {
    opus_encoder_obj_t *self = MP_OBJ_TO_PTR(self_in);
    if (self->st == NULL) {
        raise_closed();
    }
    mp_buffer_info_t pcm, out;
    get_pcm_buffer(pcm_in, &pcm, MP_BUFFER_READ);
    mp_get_buffer_raise(out_in, &out, MP_BUFFER_WRITE);
    if (pcm.len < (size_t)(self->frame_size * self->channels) * sizeof(opus_int16)) {
        mp_raise_ValueError(MP_ERROR_TEXT("opus: pcm shorter than one frame"));
    }
    opus_int32 room = out.len > 0x7fffffff ? 0x7fffffff : (opus_int32)out.len;
    opus_int32 n = opus_encode(self->st, pcm.buf, (int)self->frame_size, out.buf, room);
    if (n < 0) {
        raise_opus(n);
    }
    return MP_OBJ_NEW_SMALL_INT(n);
}
static MP_DEFINE_CONST_FUN_OBJ_3(encoder_encode_obj, encoder_encode);

static mp_obj_t encoder_close(mp_obj_t self_in) {
    opus_encoder_obj_t *self = MP_OBJ_TO_PTR(self_in);
    if (self->st != NULL) {
        state_free(self->st);
        self->st = NULL;
    }
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_1(encoder_close_obj, encoder_close);

static void encoder_attr(mp_obj_t self_in, qstr attr, mp_obj_t *dest) {
    opus_encoder_obj_t *self = MP_OBJ_TO_PTR(self_in);
    if (dest[0] != MP_OBJ_NULL) {
        return;  // read-only
    }
    if (attr == MP_QSTR_frame_size) {
        dest[0] = MP_OBJ_NEW_SMALL_INT(self->frame_size);
    } else if (attr == MP_QSTR_state_bytes) {
        dest[0] = MP_OBJ_NEW_SMALL_INT(self->state_bytes);
    } else {
        dest[1] = MP_OBJ_SENTINEL;  // go on to the methods
    }
}

static const mp_rom_map_elem_t encoder_locals_table[] = {
    { MP_ROM_QSTR(MP_QSTR_encode), MP_ROM_PTR(&encoder_encode_obj) },
    { MP_ROM_QSTR(MP_QSTR_close), MP_ROM_PTR(&encoder_close_obj) },
    { MP_ROM_QSTR(MP_QSTR___del__), MP_ROM_PTR(&encoder_close_obj) },
};
static MP_DEFINE_CONST_DICT(encoder_locals, encoder_locals_table);

static MP_DEFINE_CONST_OBJ_TYPE(
    opus_encoder_type, MP_QSTR_Encoder, MP_TYPE_FLAG_NONE,
    make_new, encoder_make_new,
    attr, encoder_attr,
    locals_dict, &encoder_locals
    );

// ---- Decoder --------------------------------------------------------------------------------------------

typedef struct _opus_decoder_obj_t {
    mp_obj_base_t base;
    OpusDecoder *st;
    mp_int_t rate;
    mp_int_t channels;
    mp_int_t state_bytes;
} opus_decoder_obj_t;

static mp_obj_t decoder_make_new(const mp_obj_type_t *type, size_t n_args, size_t n_kw, const mp_obj_t *all_args) {
    enum { ARG_sample_rate, ARG_channels };
    static const mp_arg_t allowed_args[] = {
        { MP_QSTR_sample_rate, MP_ARG_INT, {.u_int = 16000} },
        { MP_QSTR_channels, MP_ARG_INT, {.u_int = 1} },
    };
    mp_arg_val_t args[MP_ARRAY_SIZE(allowed_args)];
    mp_arg_parse_all_kw_array(n_args, n_kw, all_args, MP_ARRAY_SIZE(allowed_args), allowed_args, args);
    mp_int_t rate = args[ARG_sample_rate].u_int;
    mp_int_t channels = args[ARG_channels].u_int;
    check_rate_channels(rate, channels);

    opus_decoder_obj_t *self = mp_obj_malloc_with_finaliser(opus_decoder_obj_t, type);
    self->st = NULL;
    self->rate = rate;
    self->channels = channels;
    self->state_bytes = opus_decoder_get_size((int)channels);
    OpusDecoder *st = state_alloc(self->state_bytes);
    if (st == NULL) {
        mp_raise_msg(&mp_type_MemoryError, MP_ERROR_TEXT("opus: no memory for the decoder state"));
    }
    int err = opus_decoder_init(st, (opus_int32)rate, (int)channels);
    if (err != OPUS_OK) {
        state_free(st);
        raise_opus(err);
    }
    self->st = st;
    return MP_OBJ_FROM_PTR(self);
}

// decode(packet, pcm_out[, nbytes]) -> samples per channel written to pcm_out (int16, native byte order).
// The packet is its first nbytes (default: all of it), so a receive buffer needs no slice. A packet of
// None (or no bytes) conceals one lost frame as long as pcm_out holds (whole 2.5 ms steps).
static mp_obj_t decoder_decode(size_t n_args, const mp_obj_t *args) {
    opus_decoder_obj_t *self = MP_OBJ_TO_PTR(args[0]);
    if (self->st == NULL) {
        raise_closed();
    }
    mp_buffer_info_t packet = { .buf = NULL, .len = 0 }, out;
    if (args[1] != mp_const_none) {
        mp_get_buffer_raise(args[1], &packet, MP_BUFFER_READ);
    }
    if (n_args > 3) {
        mp_int_t n = mp_obj_get_int(args[3]);
        if (n < 0 || (size_t)n > packet.len) {
            mp_raise_ValueError(MP_ERROR_TEXT("opus: nbytes outside the packet buffer"));
        }
        packet.len = n;
    }
    get_pcm_buffer(args[2], &out, MP_BUFFER_WRITE);
    mp_int_t room = out.len / (sizeof(opus_int16) * self->channels);
    if (room > self->rate * MAX_FRAME_MS / 1000) {
        room = self->rate * MAX_FRAME_MS / 1000;
    }
    if (packet.len == 0) {
        room -= room % (self->rate / 400);
        packet.buf = NULL;
    }
    int n = opus_decode(self->st, packet.buf, (opus_int32)packet.len, out.buf, (int)room, 0);
    if (n < 0) {
        raise_opus(n);
    }
    return MP_OBJ_NEW_SMALL_INT(n);
}
static MP_DEFINE_CONST_FUN_OBJ_VAR_BETWEEN(decoder_decode_obj, 3, 4, decoder_decode);

static mp_obj_t decoder_close(mp_obj_t self_in) {
    opus_decoder_obj_t *self = MP_OBJ_TO_PTR(self_in);
    if (self->st != NULL) {
        state_free(self->st);
        self->st = NULL;
    }
    return mp_const_none;
}
static MP_DEFINE_CONST_FUN_OBJ_1(decoder_close_obj, decoder_close);

static void decoder_attr(mp_obj_t self_in, qstr attr, mp_obj_t *dest) {
    opus_decoder_obj_t *self = MP_OBJ_TO_PTR(self_in);
    if (dest[0] != MP_OBJ_NULL) {
        return;  // read-only
    }
    if (attr == MP_QSTR_sample_rate) {
        dest[0] = MP_OBJ_NEW_SMALL_INT(self->rate);
    } else if (attr == MP_QSTR_state_bytes) {
        dest[0] = MP_OBJ_NEW_SMALL_INT(self->state_bytes);
    } else {
        dest[1] = MP_OBJ_SENTINEL;
    }
}

static const mp_rom_map_elem_t decoder_locals_table[] = {
    { MP_ROM_QSTR(MP_QSTR_decode), MP_ROM_PTR(&decoder_decode_obj) },
    { MP_ROM_QSTR(MP_QSTR_close), MP_ROM_PTR(&decoder_close_obj) },
    { MP_ROM_QSTR(MP_QSTR___del__), MP_ROM_PTR(&decoder_close_obj) },
};
static MP_DEFINE_CONST_DICT(decoder_locals, decoder_locals_table);

static MP_DEFINE_CONST_OBJ_TYPE(
    opus_decoder_type, MP_QSTR_Decoder, MP_TYPE_FLAG_NONE,
    make_new, decoder_make_new,
    attr, decoder_attr,
    locals_dict, &decoder_locals
    );

// ---- module ---------------------------------------------------------------------------------------------

static mp_obj_t opus_version(void) {
    return mp_obj_new_str_from_cstr(opus_get_version_string());
}
static MP_DEFINE_CONST_FUN_OBJ_0(opus_version_obj, opus_version);

static const mp_rom_map_elem_t opus_module_globals_table[] = {
    { MP_ROM_QSTR(MP_QSTR___name__), MP_ROM_QSTR(MP_QSTR_opus) },
    { MP_ROM_QSTR(MP_QSTR_Encoder), MP_ROM_PTR(&opus_encoder_type) },
    { MP_ROM_QSTR(MP_QSTR_Decoder), MP_ROM_PTR(&opus_decoder_type) },
    { MP_ROM_QSTR(MP_QSTR_version), MP_ROM_PTR(&opus_version_obj) },
    { MP_ROM_QSTR(MP_QSTR_APPLICATION_VOIP), MP_ROM_INT(OPUS_APPLICATION_VOIP) },
    { MP_ROM_QSTR(MP_QSTR_APPLICATION_AUDIO), MP_ROM_INT(OPUS_APPLICATION_AUDIO) },
    { MP_ROM_QSTR(MP_QSTR_APPLICATION_RESTRICTED_LOWDELAY), MP_ROM_INT(OPUS_APPLICATION_RESTRICTED_LOWDELAY) },
};
static MP_DEFINE_CONST_DICT(opus_module_globals, opus_module_globals_table);

const mp_obj_module_t wren_opus_module = {
    .base = { &mp_type_module },
    .globals = (mp_obj_dict_t *)&opus_module_globals,
};

MP_REGISTER_MODULE(MP_QSTR_opus, wren_opus_module);
