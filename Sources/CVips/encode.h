// Encoding a thumbnail, freeing what libvips made, its error text, and the test images.
// Included by shim.h.
#ifndef THUMBD_VIPS_ENCODE_H
#define THUMBD_VIPS_ENCODE_H

#include <vips/vips.h>
#include "control.h"

enum { THUMBD_JPEG = 0, THUMBD_PNG = 1, THUMBD_WEBP = 2, THUMBD_AVIF = 3, THUMBD_GIF = 4 };

/// Encodes `in`, metadata stripped (an animation keeps its page height, delays and loop).
/// JPEG has no alpha: it is flattened on `background` (RGB) first. `progressive`: a
/// progressive JPEG, an interlaced PNG. On success `*buffer` is g_malloc'ed (free with
/// thumbd_vips_free).
static inline int thumbd_vips_save(VipsImage *in, int format, int quality, int progressive, const double background[3],
                                   void **buffer, size_t *length) {
    switch (format) {
    case THUMBD_JPEG: {
        if (!vips_image_hasalpha(in))
            return vips_jpegsave_buffer(in, buffer, length, "Q", quality, "strip", TRUE, "interlace", progressive != 0,
                                        NULL);
        VipsArrayDouble *colour = vips_array_double_new(background, 3);
        VipsImage *flat = NULL;
        int rc = vips_flatten(in, &flat, "background", colour, NULL);
        vips_area_unref(VIPS_AREA(colour));
        if (rc != 0) return -1;
        rc = vips_jpegsave_buffer(flat, buffer, length, "Q", quality, "strip", TRUE, "interlace", progressive != 0, NULL);
        g_object_unref(flat);
        return rc;
    }
    case THUMBD_PNG:
        return vips_pngsave_buffer(in, buffer, length, "strip", TRUE, "compression", 6, "interlace", progressive != 0,
                                   NULL);
    case THUMBD_WEBP:
        return vips_webpsave_buffer(in, buffer, length, "Q", quality, "strip", TRUE, NULL);
    case THUMBD_AVIF:
        return vips_heifsave_buffer(in, buffer, length, "Q", quality, "strip", TRUE,
                                    "compression", VIPS_FOREIGN_HEIF_COMPRESSION_AV1, "effort", 2, NULL);
    case THUMBD_GIF:
        /* The quantizer at effort 1: its default (7) took 7x as long (3.1 s against 0.42 s for
           20 frames of 160x120) for 8% fewer bytes. */
        return vips_gifsave_buffer(in, buffer, length, "strip", TRUE, "effort", 1, NULL);
    default:
        return -1;
    }
}

static inline void thumbd_vips_free(void *buffer) { g_free(buffer); }
static inline void thumbd_vips_unref(VipsImage *image) { g_object_unref(image); }

/// libvips's error text for this thread's last failure, cleared; free with thumbd_vips_free.
static inline char *thumbd_vips_take_error(void) {
    char *text = vips_error_buffer_copy();
    return text;
}

/// Makes a test image (a gradient with noise, `bands` 1 (grey), 3 or 4) and encodes it: what
/// the tests and the bench feed the thumbnailer. `format` as for thumbd_vips_save.
static inline int thumbd_vips_make_test_image(int width, int height, int bands, int format, int orientation,
                                              void **buffer, size_t *length) {
    VipsImage *x = NULL, *y = NULL, *noise = NULL, *sum = NULL, *rgb = NULL, *bytes = NULL, *out = NULL;
    int rc = -1;
    if (vips_xyz(&x, width, height, NULL) != 0) goto done;
    if (vips_extract_band(x, &y, 0, "n", 2, NULL) != 0) goto done;
    if (vips_gaussnoise(&noise, width, height, "sigma", 20.0, "mean", 0.0, NULL) != 0) goto done;
    {
        VipsImage *xs = NULL, *ys = NULL, *zs = NULL;
        VipsImage *scaled[3];
        if (vips_linear1(y, &xs, 255.0 / (width + height), 0.0, NULL) != 0) goto done;
        if (vips_extract_band(xs, &ys, 0, NULL) != 0) { g_object_unref(xs); goto done; }
        if (vips_extract_band(xs, &zs, 1, NULL) != 0) { g_object_unref(xs); g_object_unref(ys); goto done; }
        scaled[0] = ys;
        scaled[1] = zs;
        scaled[2] = noise;
        rc = vips_bandjoin(scaled, &sum, 3, NULL);
        g_object_unref(xs);
        g_object_unref(ys);
        g_object_unref(zs);
        if (rc != 0) { rc = -1; goto done; }
        rc = -1;
    }
    if (bands == 4) {
        VipsImage *alpha = NULL;
        if (vips_bandjoin_const1(sum, &rgb, 200.0, NULL) != 0) goto done;
        (void)alpha;
    } else if (bands == 1) {
        if (vips_extract_band(sum, &rgb, 0, NULL) != 0) goto done;
    } else {
        rgb = sum;
        g_object_ref(rgb);
    }
    if (vips_cast_uchar(rgb, &bytes, NULL) != 0) goto done;
    if (vips_copy(bytes, &out, "interpretation", bands == 1 ? VIPS_INTERPRETATION_B_W : VIPS_INTERPRETATION_sRGB, NULL) != 0)
        goto done;
    if (bands == 1 && format == THUMBD_JPEG) {
        rc = vips_jpegsave_buffer(out, buffer, length, "Q", 90, NULL);  // one band, as drawn
        goto done;
    }
    if (orientation > 1) {
        vips_image_set_int(out, VIPS_META_ORIENTATION, orientation);
        if (format == THUMBD_JPEG) {
            rc = vips_jpegsave_buffer(out, buffer, length, "Q", 90, NULL);  // keep the EXIF orientation
            goto done;
        }
    }
    {
        const double white[3] = {255, 255, 255};
        rc = thumbd_vips_save(out, format, 90, 0, white, buffer, length);
    }
done:
    if (x) g_object_unref(x);
    if (y) g_object_unref(y);
    if (noise) g_object_unref(noise);
    if (sum) g_object_unref(sum);
    if (rgb) g_object_unref(rgb);
    if (bytes) g_object_unref(bytes);
    if (out) g_object_unref(out);
    return rc;
}

#endif
