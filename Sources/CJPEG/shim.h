// libjpeg (libjpeg-turbo) from Swift, for two jobs in the calling thread: a still thumbnail's
// JPEG encoded, and a still JPEG source decoded at any eighth of its size (libvips's loader
// offers 1/1, 1/2, 1/4 and 1/8, with its own work around libjpeg's). libjpeg reports a fatal error by calling a function that must not return,
// which Swift cannot write (it takes setjmp/longjmp); each job is wrapped here whole, so that
// no Swift frame lies between the two. Nothing else.
#ifndef THUMBD_JPEG_SHIM_H
#define THUMBD_JPEG_SHIM_H

#include <stddef.h>
#include <stdio.h>  // jpeglib.h needs FILE and size_t first
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <jpeglib.h>
#include <jerror.h>  // WARNMS, JWRN_JPEG_EOF

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

/// Reads at most `length` of the source's next bytes into `buffer`, waiting for some: how
/// many, 0 at their end, -1 when they failed.
typedef long long (*thumbd_jpeg_read_fn)(void *context, unsigned char *buffer, long long length);
/// Where the decoded pixels go: `width`×`height`×`bands` bytes, rows in order; NULL refuses
/// them (the decode stops, the caller knows why).
typedef unsigned char *(*thumbd_jpeg_pixels_fn)(void *context, int width, int height, int bands);
/// Asked before each strip of 16 rows: nonzero stops the decode (a cancel, a deadline).
typedef int (*thumbd_jpeg_stop_fn)(void *context);

enum { THUMBD_JPEG_READ_SIZE = 64 << 10, THUMBD_JPEG_MAX_WARNINGS = 100 };

typedef struct {
    struct jpeg_source_mgr manager;
    thumbd_jpeg_read_fn read;
    void *context;
    int failed;
    unsigned char buffer[THUMBD_JPEG_READ_SIZE];
} thumbd_jpeg_source;

static void thumbd_jpeg_source_init(j_decompress_ptr info) { (void)info; }
static void thumbd_jpeg_source_term(j_decompress_ptr info) { (void)info; }

/// The next bytes from the reader. At their end, or when they fail, the data ends as
/// libjpeg's memory source ends it: the warning JWRN_JPEG_EOF (a failure here, see
/// thumbd_jpeg_warning) and an EOI marker.
static boolean thumbd_jpeg_source_fill(j_decompress_ptr info) {
    thumbd_jpeg_source *source = (thumbd_jpeg_source *)info->src;
    long long count = source->failed ? -1 : source->read(source->context, source->buffer, THUMBD_JPEG_READ_SIZE);
    if (count <= 0) {
        static const JOCTET end[2] = {0xFF, JPEG_EOI};
        if (count < 0) source->failed = 1;
        WARNMS(info, JWRN_JPEG_EOF);
        source->manager.next_input_byte = end;
        source->manager.bytes_in_buffer = 2;
        return TRUE;
    }
    source->manager.next_input_byte = source->buffer;
    source->manager.bytes_in_buffer = (size_t)count;
    return TRUE;
}

static void thumbd_jpeg_source_skip(j_decompress_ptr info, long count) {
    struct jpeg_source_mgr *manager = info->src;
    while (count > (long)manager->bytes_in_buffer) {
        count -= (long)manager->bytes_in_buffer;
        manager->bytes_in_buffer = 0;
        (void)manager->fill_input_buffer(info);
    }
    if (count > 0) {
        manager->next_input_byte += count;
        manager->bytes_in_buffer -= (size_t)count;
    }
}

/// libjpeg's warnings. A source cut short fails the decode, as libvips's loader fails it
/// (`fail_on` truncated); other damage is decoded as libjpeg can, up to 100 warnings.
static void thumbd_jpeg_warning(j_common_ptr info, int level) {
    if (level >= 0) return;  // trace messages
    if (info->err->msg_code == JWRN_JPEG_EOF || ++info->err->num_warnings >= THUMBD_JPEG_MAX_WARNINGS)
        info->err->error_exit(info);
}

/// Decodes a JPEG at `eighths`/8 of its size (1–8: libjpeg's DCT scaling, each side rounded
/// up) into the memory `pixels` gives, RGB (3 bands) or grey (1). Its bytes are `data`
/// (`length` of them) or, when `data` is NULL, what `read` gives. 0 on success; 1: not a
/// JPEG this decodes (CMYK, YCCK), nothing asked of `pixels`; -1: `pixels` or `stop`
/// stopped it; -2: libjpeg failed, its reason in `message`.
static inline int thumbd_jpeg_decode(const unsigned char *data, size_t length, int eighths, thumbd_jpeg_read_fn read,
                                     thumbd_jpeg_pixels_fn pixels, thumbd_jpeg_stop_fn stop, void *context,
                                     char *message, size_t message_size) {
    struct jpeg_decompress_struct info;
    thumbd_jpeg_error error;
    // Allocated before setjmp: what the path after a longjmp reads was written through it.
    thumbd_jpeg_source *source = data ? NULL : calloc(1, sizeof *source);
    if (!data && source == NULL) return -2;
    info.err = jpeg_std_error(&error.manager);
    error.manager.error_exit = thumbd_jpeg_error_exit;
    error.manager.output_message = thumbd_jpeg_quiet;
    error.manager.emit_message = thumbd_jpeg_warning;
    error.message[0] = 0;
    if (setjmp(error.jump)) {
        int failed = source && source->failed;
        jpeg_destroy_decompress(&info);
        free(source);
        if (message_size > 0) {
            strncpy(message, failed ? "the image's bytes failed" : error.message, message_size - 1);
            message[message_size - 1] = 0;
        }
        return -2;
    }
    jpeg_create_decompress(&info);
    if (data) {
        jpeg_mem_src(&info, data, (unsigned long)length);
    } else {
        source->read = read;
        source->context = context;
        source->manager.init_source = thumbd_jpeg_source_init;
        source->manager.fill_input_buffer = thumbd_jpeg_source_fill;
        source->manager.skip_input_data = thumbd_jpeg_source_skip;
        source->manager.resync_to_restart = jpeg_resync_to_restart;
        source->manager.term_source = thumbd_jpeg_source_term;
        info.src = &source->manager;
    }
    jpeg_read_header(&info, TRUE);
    switch (info.jpeg_color_space) {
    case JCS_GRAYSCALE: info.out_color_space = JCS_GRAYSCALE; break;
    case JCS_YCbCr: case JCS_RGB: info.out_color_space = JCS_RGB; break;
    default:
        jpeg_destroy_decompress(&info);
        free(source);
        return 1;
    }
    info.scale_num = (unsigned int)(eighths < 1 ? 1 : eighths > 8 ? 8 : eighths);
    info.scale_denom = 8;
    jpeg_start_decompress(&info);
    int width = (int)info.output_width, height = (int)info.output_height, bands = info.output_components;
    unsigned char *out = pixels(context, width, height, bands);
    if (out == NULL) {
        jpeg_destroy_decompress(&info);
        free(source);
        return -1;
    }
    size_t line = (size_t)width * (size_t)bands;
    while (info.output_scanline < info.output_height) {
        if (info.output_scanline % 16 == 0 && stop(context)) {
            jpeg_destroy_decompress(&info);
            free(source);
            return -1;
        }
        JSAMPROW row = out + line * info.output_scanline;
        jpeg_read_scanlines(&info, &row, 1);
    }
    jpeg_finish_decompress(&info);
    jpeg_destroy_decompress(&info);
    free(source);
    return 0;
}

#endif
