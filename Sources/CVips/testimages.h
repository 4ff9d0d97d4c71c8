// Images the tests and the bench draw, and the one pixel a test reads back. Not used by the
// daemon's own work. Included by shim.h.
#ifndef THUMBD_VIPS_TESTIMAGES_H
#define THUMBD_VIPS_TESTIMAGES_H

#include <vips/vips.h>
#include "encode.h"

/// A flat `width`×`height` sRGB image of `r`,`g`,`b`.
static inline int thumbd_vips_flat(int width, int height, double r, double g, double b, VipsImage **out) {
    VipsImage *black = NULL, *coloured = NULL;
    if (vips_black(&black, width, height, "bands", 3, NULL) != 0) return -1;
    double a[3] = {1, 1, 1}, c[3] = {r, g, b};
    int rc = vips_linear(black, &coloured, a, c, 3, "uchar", TRUE, NULL);
    g_object_unref(black);
    if (rc != 0) return -1;
    rc = vips_copy(coloured, out, "interpretation", VIPS_INTERPRETATION_sRGB, NULL);
    g_object_unref(coloured);
    return rc;
}

/// Four flat quarters, as stored (before any EXIF orientation): red top left, green top
/// right, blue bottom left, yellow bottom right. `orientation` > 1 is written into a JPEG's
/// EXIF. Encoded as `format` (thumbd_vips_save's codes).
static inline int thumbd_vips_make_quadrants(int width, int height, int format, int orientation, void **buffer,
                                             size_t *length) {
    const double colours[4][3] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {255, 255, 0}};
    VipsImage *tiles[4] = {NULL, NULL, NULL, NULL};
    VipsImage *joined = NULL;
    int rc = -1;
    int w = width / 2, h = height / 2;
    for (int i = 0; i < 4; i++)
        if (thumbd_vips_flat(i % 2 ? width - w : w, i < 2 ? h : height - h, colours[i][0], colours[i][1],
                             colours[i][2], &tiles[i]) != 0) goto done;
    if (vips_arrayjoin(tiles, &joined, 4, "across", 2, NULL) != 0) goto done;
    if (orientation > 1 && format == THUMBD_JPEG) {
        VipsImage *tagged = NULL;
        if (vips_copy(joined, &tagged, NULL) != 0) goto done;
        vips_image_set_int(tagged, VIPS_META_ORIENTATION, orientation);
        rc = vips_jpegsave_buffer(tagged, buffer, length, "Q", 95, NULL);
        g_object_unref(tagged);
    } else {
        const double white[3] = {255, 255, 255};
        rc = thumbd_vips_save(joined, format, 95, 0, white, buffer, length);
    }
done:
    for (int i = 0; i < 4; i++) if (tiles[i]) g_object_unref(tiles[i]);
    if (joined) g_object_unref(joined);
    return rc;
}

/// An animation of `frames` flat frames (frame i is grey 255·i/frames), 100 ms each, looping,
/// encoded as `format` (GIF or WebP).
static inline int thumbd_vips_make_animation(int width, int height, int frames, int format, void **buffer,
                                             size_t *length) {
    VipsImage **tiles = g_new0(VipsImage *, frames);
    VipsImage *joined = NULL, *tagged = NULL;
    int rc = -1;
    for (int i = 0; i < frames; i++) {
        double grey = 255.0 * i / frames;
        if (thumbd_vips_flat(width, height, grey, grey, grey, &tiles[i]) != 0) goto done;
    }
    if (vips_arrayjoin(tiles, &joined, frames, "across", 1, NULL) != 0) goto done;
    if (vips_copy(joined, &tagged, NULL) != 0) goto done;
    vips_image_set_int(tagged, VIPS_META_PAGE_HEIGHT, height);
    int *delays = g_new(int, frames);
    for (int i = 0; i < frames; i++) delays[i] = 100;
    vips_image_set_array_int(tagged, "delay", delays, frames);
    g_free(delays);
    vips_image_set_int(tagged, "loop", 0);
    rc = format == THUMBD_GIF ? vips_gifsave_buffer(tagged, buffer, length, NULL)
                              : vips_webpsave_buffer(tagged, buffer, length, "lossless", TRUE, NULL);
done:
    for (int i = 0; i < frames; i++) if (tiles[i]) g_object_unref(tiles[i]);
    g_free(tiles);
    if (joined) g_object_unref(joined);
    if (tagged) g_object_unref(tagged);
    return rc;
}

/// The pixel at (`x`, `y`) of an image, EXIF orientation not applied: up to 4 bands into
/// `values`, their count into `bands`.
static inline int thumbd_vips_pixel(VipsImage *in, int x, int y, double values[4], int *bands) {
    double *point = NULL;
    int n = 0;
    if (vips_getpoint(in, &point, &n, x, y, NULL) != 0) return -1;
    for (int i = 0; i < n && i < 4; i++) values[i] = point[i];
    *bands = n;
    g_free(point);
    return 0;
}

#endif
