// What comes after the resize: blur, sharpen, a quarter turn, and the frames of an animation
// put back together. Included by shim.h.
#ifndef THUMBD_VIPS_EFFECTS_H
#define THUMBD_VIPS_EFFECTS_H

#include <vips/vips.h>

/// A gaussian blur of `sigma` pixels.
static inline int thumbd_vips_blur(VipsImage *in, double sigma, VipsImage **out) {
    return vips_gaussblur(in, out, sigma, NULL);
}

/// Unsharp masking with a gaussian of `sigma` pixels, on the lightness only (libvips's sharpen),
/// given back in sRGB with `in`'s alpha.
static inline int thumbd_vips_sharpen(VipsImage *in, double sigma, VipsImage **out) {
    VipsImage *sharp = NULL;
    if (vips_sharpen(in, &sharp, "sigma", sigma, NULL) != 0) return -1;
    if (vips_image_get_interpretation(sharp) == VIPS_INTERPRETATION_sRGB && vips_image_get_format(sharp) == VIPS_FORMAT_UCHAR) {
        *out = sharp;
        return 0;
    }
    VipsImage *srgb = NULL;
    int rc = vips_colourspace(sharp, &srgb, VIPS_INTERPRETATION_sRGB, NULL);
    g_object_unref(sharp);
    if (rc != 0) return -1;
    if (vips_image_get_format(srgb) == VIPS_FORMAT_UCHAR) { *out = srgb; return 0; }
    rc = vips_cast_uchar(srgb, out, NULL);
    g_object_unref(srgb);
    return rc;
}

/// Turns `in` clockwise by `degrees` (90, 180 or 270).
static inline int thumbd_vips_rotate(VipsImage *in, int degrees, VipsImage **out) {
    VipsAngle angle = degrees == 90 ? VIPS_ANGLE_D90 : degrees == 180 ? VIPS_ANGLE_D180 : VIPS_ANGLE_D270;
    return vips_rot(in, out, angle, NULL);
}

/// Frame `index` of a tall image of frames `page_height` high.
static inline int thumbd_vips_frame(VipsImage *in, int index, int page_height, VipsImage **out) {
    return vips_extract_area(in, out, 0, index * page_height, vips_image_get_width(in), page_height, NULL);
}

/// The `count` frames (all of one size) stacked into one animation, with the timing and loop
/// of `source` (its first `count` delays).
static inline int thumbd_vips_animation(VipsImage **frames, int count, VipsImage *source, VipsImage **out) {
    VipsImage *joined = NULL;
    if (vips_arrayjoin(frames, &joined, count, "across", 1, NULL) != 0) return -1;
    int rc = vips_copy(joined, out, NULL);
    g_object_unref(joined);
    if (rc != 0) return -1;
    vips_image_set_int(*out, VIPS_META_PAGE_HEIGHT, vips_image_get_height(frames[0]));
    vips_image_set_int(*out, VIPS_META_N_PAGES, count);
    int *delays = NULL;
    int known = 0;
    if (vips_image_get_typeof(source, "delay") && vips_image_get_array_int(source, "delay", &delays, &known) == 0 &&
        known > 0) {
        int *kept = g_new(int, count);
        for (int i = 0; i < count; i++) kept[i] = delays[i < known ? i : known - 1];
        vips_image_set_array_int(*out, "delay", kept, count);
        g_free(kept);
    }
    int loop = 0;
    if (vips_image_get_typeof(source, "loop") && vips_image_get_int(source, "loop", &loop) == 0)
        vips_image_set_int(*out, "loop", loop);
    return 0;
}

#endif
