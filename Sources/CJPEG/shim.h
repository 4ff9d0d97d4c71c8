// libjpeg (libjpeg-turbo) from Swift, for one job: a still thumbnail's JPEG encoded in the
// calling thread. libjpeg reports a fatal error by calling a function that must not return,
// which Swift cannot write (it takes setjmp/longjmp); the encode is wrapped here whole, so
// that no Swift frame lies between the two. Nothing else.
#ifndef THUMBD_JPEG_SHIM_H
#define THUMBD_JPEG_SHIM_H

#include <stddef.h>
#include <stdio.h>  // jpeglib.h needs FILE and size_t first
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <jpeglib.h>

/// Gives the encoder rows `top` to `top + count - 1` (at most 16): a pointer to each row's
/// first byte in `rows`, valid until the next call. 0 on success; anything else stops the
/// encode (the caller knows why).
typedef int (*thumbd_jpeg_rows_fn)(void *context, int top, int count, unsigned char **rows);

typedef struct {
    struct jpeg_error_mgr manager;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
} thumbd_jpeg_error;

static void thumbd_jpeg_error_exit(j_common_ptr info) {
    thumbd_jpeg_error *error = (thumbd_jpeg_error *)info->err;
    info->err->format_message(info, error->message);
    longjmp(error->jump, 1);
}

static void thumbd_jpeg_quiet(j_common_ptr info) { (void)info; }  // warnings: none are kept

/// The settings libvips's jpegsave uses (libjpeg's defaults, `jpeg_set_quality` with the
/// baseline tables, no chroma subsampling from quality 90 up, `jpeg_simple_progression`
/// when progressive), no metadata. `bands`: 1 (grey) or 3 (RGB), 8 bits each. On success
/// (0) `*buffer` is malloc'ed (free with thumbd_jpeg_free). -1: `rows` stopped it; -2:
/// libjpeg failed, its reason in `message`.
static inline int thumbd_jpeg_encode(int width, int height, int bands, int quality, int progressive,
                                     thumbd_jpeg_rows_fn rows, void *context, void **buffer, size_t *length,
                                     char *message, size_t message_size) {
    struct jpeg_compress_struct info;
    thumbd_jpeg_error error;
    // Written by libjpeg through these pointers; allocated before setjmp, so that the path
    // after a longjmp reads what libjpeg wrote, not a register's stale copy.
    struct { unsigned char *bytes; unsigned long size; } *out = calloc(1, sizeof *out);
    if (out == NULL) return -2;
    info.err = jpeg_std_error(&error.manager);
    error.manager.error_exit = thumbd_jpeg_error_exit;
    error.manager.output_message = thumbd_jpeg_quiet;
    error.message[0] = 0;
    if (setjmp(error.jump)) {
        jpeg_destroy_compress(&info);
        free(out->bytes);
        free(out);
        if (message_size > 0) {
            strncpy(message, error.message, message_size - 1);
            message[message_size - 1] = 0;
        }
        return -2;
    }
    jpeg_create_compress(&info);
    jpeg_mem_dest(&info, &out->bytes, &out->size);
    info.image_width = (JDIMENSION)width;
    info.image_height = (JDIMENSION)height;
    info.input_components = bands;
    info.in_color_space = bands == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&info);
    jpeg_set_quality(&info, quality, TRUE);
    if (bands == 3 && quality >= 90) {
        for (int i = 0; i < info.num_components; i++) {
            info.comp_info[i].h_samp_factor = 1;
            info.comp_info[i].v_samp_factor = 1;
        }
    }
    if (progressive) jpeg_simple_progression(&info);
    jpeg_start_compress(&info, TRUE);
    unsigned char *lines[16];
    while (info.next_scanline < info.image_height) {
        int top = (int)info.next_scanline;
        int count = height - top < 16 ? height - top : 16;
        if (rows(context, top, count, lines) != 0) {
            jpeg_destroy_compress(&info);
            free(out->bytes);
            free(out);
            return -1;
        }
        jpeg_write_scanlines(&info, lines, (JDIMENSION)count);
    }
    jpeg_finish_compress(&info);
    jpeg_destroy_compress(&info);
    *buffer = out->bytes;
    *length = (size_t)out->size;
    free(out);
    return 0;
}

static inline void thumbd_jpeg_free(void *buffer) { free(buffer); }

#endif
