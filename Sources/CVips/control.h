// What stops a resize, from any thread: its deadline and a cancel flag, watched by libvips's
// evaluation. Included by shim.h.
#ifndef THUMBD_VIPS_CONTROL_H
#define THUMBD_VIPS_CONTROL_H

#include <vips/vips.h>

/// What stops a resize: its deadline (monotonic microseconds) and a cancel flag that another
/// thread may set at any time. Reference-counted: the Swift owner holds one reference and
/// every image watched holds one, so whoever lets go last frees it.
typedef struct {
    gint64 deadline;
    gint cancelled;
} thumbd_vips_control;

static inline thumbd_vips_control *thumbd_vips_control_new(gint64 microseconds) {
    thumbd_vips_control *control = g_atomic_rc_box_new0(thumbd_vips_control);
    control->deadline = g_get_monotonic_time() + microseconds;
    return control;
}

static inline void thumbd_vips_control_release(thumbd_vips_control *control) { g_atomic_rc_box_release(control); }
static inline void thumbd_vips_control_cancel(thumbd_vips_control *control) { g_atomic_int_set(&control->cancelled, 1); }
static inline int thumbd_vips_control_cancelled(thumbd_vips_control *control) {
    return g_atomic_int_get(&control->cancelled);
}
static inline int thumbd_vips_control_expired(thumbd_vips_control *control) {
    return g_get_monotonic_time() > control->deadline;
}

static void thumbd_vips_on_eval(VipsImage *image, VipsProgress *progress, void *user) {
    (void)progress;
    thumbd_vips_control *control = (thumbd_vips_control *)user;
    if (g_atomic_int_get(&control->cancelled) || g_get_monotonic_time() > control->deadline)
        vips_image_set_kill(image, TRUE);
}

static void thumbd_vips_release_control(void *data, GClosure *closure) {
    (void)closure;
    g_atomic_rc_box_release(data);
}

/// Kills the evaluation of `image` once `control` is past its deadline or cancelled:
/// libvips checks the flag between tiles, and the evaluation then fails.
static inline void thumbd_vips_watch(VipsImage *image, thumbd_vips_control *control) {
    vips_image_set_progress(image, TRUE);
    g_signal_connect_data(image, "eval", G_CALLBACK(thumbd_vips_on_eval), g_atomic_rc_box_acquire(control),
                          thumbd_vips_release_control, (GConnectFlags)0);
}

/// Like thumbd_vips_materialize, but computed in the calling thread, strip by strip, with no
/// libvips worker: the work runs at the caller's priority (libvips's shared workers are
/// lowered for the untrusted lane, and a thread cannot raise its priority back). `control`
/// is checked between strips: cancelled or past its deadline, it fails.
static inline int thumbd_vips_materialize_here(VipsImage *in, thumbd_vips_control *control, VipsImage **out) {
    int width = vips_image_get_width(in), height = vips_image_get_height(in);
    size_t line = VIPS_IMAGE_SIZEOF_LINE(in);
    VipsRegion *region = vips_region_new(in);
    if (region == NULL) return -1;
    guchar *pixels = g_try_malloc(line * (size_t)height);
    if (pixels == NULL) {
        g_object_unref(region);
        vips_error("thumbd", "out of memory");
        return -1;
    }
    const int strip = 16;
    for (int top = 0; top < height; top += strip) {
        if (thumbd_vips_control_cancelled(control) || thumbd_vips_control_expired(control)) {
            g_object_unref(region);
            g_free(pixels);
            vips_error("thumbd", "stopped");
            return -1;
        }
        VipsRect rows = {0, top, width, height - top < strip ? height - top : strip};
        if (vips_region_prepare(region, &rows) != 0) {
            g_object_unref(region);
            g_free(pixels);
            return -1;
        }
        for (int y = rows.top; y < rows.top + rows.height; y++)
            memcpy(pixels + line * (size_t)y, VIPS_REGION_ADDR(region, 0, y), line);
    }
    g_object_unref(region);
    return thumbd_vips_adopt_pixels(in, pixels, line * (size_t)height, out);
}

/// An image's rows computed in the calling thread, strip by strip, for an encoder that asks
/// for them in order (thumbd_vips_rows_fill, a CJPEG thumbd_jpeg_rows_fn): the region they are
/// read from and the control checked before each strip. Holds a reference to the control.
typedef struct {
    VipsRegion *region;
    thumbd_vips_control *control;
} thumbd_vips_rows;

/// The encoder's rows of `in` (sRGB, 8 bits a sample: thumbd_vips_rows_ready), or
/// NULL. Free with thumbd_vips_rows_free.
static inline thumbd_vips_rows *thumbd_vips_rows_new(VipsImage *in, thumbd_vips_control *control) {
    VipsRegion *region = vips_region_new(in);
    if (region == NULL) return NULL;
    thumbd_vips_rows *rows = g_new0(thumbd_vips_rows, 1);
    rows->region = region;
    rows->control = g_atomic_rc_box_acquire(control);
    return rows;
}

static inline void thumbd_vips_rows_free(thumbd_vips_rows *rows) {
    g_object_unref(rows->region);
    g_atomic_rc_box_release(rows->control);
    g_free(rows);
}

/// Whether an encoder can take `in`'s rows as they are: sRGB, 8 bits a sample, no alpha (what
/// a still thumbnail is, its source grey or not).
static inline int thumbd_vips_rows_ready(VipsImage *in) {
    return vips_image_get_format(in) == VIPS_FORMAT_UCHAR && vips_image_get_bands(in) == 3 &&
           vips_image_get_interpretation(in) == VIPS_INTERPRETATION_sRGB;
}

/// Computes rows `top` to `top + count - 1` here and points `lines` at them; -1 once the
/// control is cancelled or past its deadline ("stopped"), or when the computation fails.
static inline int thumbd_vips_rows_fill(void *context, int top, int count, unsigned char **lines) {
    thumbd_vips_rows *rows = (thumbd_vips_rows *)context;
    if (thumbd_vips_control_cancelled(rows->control) || thumbd_vips_control_expired(rows->control)) {
        vips_error("thumbd", "stopped");
        return -1;
    }
    VipsRect rect = {0, top, vips_image_get_width(rows->region->im), count};
    if (vips_region_prepare(rows->region, &rect) != 0) return -1;
    for (int i = 0; i < count; i++) lines[i] = (unsigned char *)VIPS_REGION_ADDR(rows->region, 0, top + i);
    return 0;
}

#endif
