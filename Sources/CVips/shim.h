// libvips from Swift. Its operations are variadic and NULL-terminated, which Swift cannot
// call; each is wrapped here with the fixed arguments thumbd uses. Nothing else.
#ifndef THUMBD_VIPS_SHIM_H
#define THUMBD_VIPS_SHIM_H

#include <vips/vips.h>
#include <string.h>

/// vips_init once per process, libvips's operation cache off (every variant is made
/// once and stored; the cache would only hold memory) and `threads` worker threads per
/// pipeline. Returns 0 on success.
static inline int thumbd_vips_start(int threads) {
    if (vips_init("thumbd") != 0) return -1;
    vips_cache_set_max(0);
    vips_cache_set_max_mem(0);
    vips_cache_set_max_files(0);
    vips_concurrency_set(threads);
    return 0;
}

typedef struct {
    int width;
    int height;
    int bands;
    int has_alpha;
    int pages;
    int orientation;
    char loader[48];
} thumbd_vips_header;

/// A loader: its name, and its GType for making it without a search.
typedef struct {
    const char *name;
    GType type;
} thumbd_vips_loader;

/// The loader for `buffer`: libvips's sniffing asks every loader in turn (a fifth of the
/// header check on a small image), and `vips_operation_new` then finds the loader's class
/// by walking every operation class by name (as much again), so both answers for the four
/// common signatures are remembered after libvips first gave them. The loaders' own checks
/// are these signatures.
static inline thumbd_vips_loader thumbd_vips_find_loader(const void *buffer, size_t length) {
    static thumbd_vips_loader known[4];
    static GMutex lock;
    const unsigned char *p = (const unsigned char *)buffer;
    thumbd_vips_loader found = {NULL, 0};
    int kind = -1;
    if (length >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF) kind = 0;
    else if (length >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0) kind = 1;
    else if (length >= 6 && (memcmp(p, "GIF87a", 6) == 0 || memcmp(p, "GIF89a", 6) == 0)) kind = 2;
    else if (length >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0) kind = 3;
    if (kind >= 0) {
        g_mutex_lock(&lock);
        found = known[kind];
        g_mutex_unlock(&lock);
        if (found.name != NULL) return found;
    }
    found.name = vips_foreign_find_load_buffer(buffer, length);
    if (found.name == NULL) return found;
    found.type = vips_type_find("VipsOperation", found.name);
    if (found.type == 0) found.name = NULL;
    if (kind >= 0 && found.name != NULL) {
        g_mutex_lock(&lock);
        known[kind] = found;
        g_mutex_unlock(&lock);
    }
    return found;
}

/// Reads only the header (no pixel is decoded). Returns 0 when libvips knows the format and
/// the header parses.
static inline int thumbd_vips_read_header(const void *buffer, size_t length, thumbd_vips_header *out) {
    thumbd_vips_loader loader = thumbd_vips_find_loader(buffer, length);
    if (loader.name == NULL) return -1;
    /* The loader found is made and built directly: vips_image_new_from_buffer would sniff
       every loader a second time, and vips_call would search for its class by name and
       hash its arguments for the operation cache, which is off. */
    VipsOperation *operation = VIPS_OPERATION(g_object_new(loader.type, NULL));
    VipsBlob *blob = vips_blob_new(NULL, buffer, length);
    g_object_set(operation, "buffer", blob, "access", VIPS_ACCESS_SEQUENTIAL, NULL);
    vips_area_unref(VIPS_AREA(blob));
    VipsImage *image = NULL;
    if (vips_object_build(VIPS_OBJECT(operation)) == 0) g_object_get(operation, "out", &image, NULL);
    vips_object_unref_outputs(VIPS_OBJECT(operation));
    g_object_unref(operation);
    if (image == NULL) return -1;
    out->width = vips_image_get_width(image);
    out->height = vips_image_get_height(image);
    out->bands = vips_image_get_bands(image);
    out->has_alpha = vips_image_hasalpha(image);
    out->pages = vips_image_get_n_pages(image);
    out->orientation = vips_image_get_orientation(image);
    memset(out->loader, 0, sizeof(out->loader));
    strncpy(out->loader, loader.name, sizeof(out->loader) - 1);
    g_object_unref(image);
    return 0;
}

/// Takes `thumb` (one reference) and gives it back in sRGB (converted when needed).
static inline int thumbd_vips_take_srgb(VipsImage *thumb, VipsImage **out) {
    if (vips_image_get_interpretation(thumb) == VIPS_INTERPRETATION_sRGB) {
        *out = thumb;
        return 0;
    }
    VipsImage *srgb = NULL;
    int rc = vips_colourspace(thumb, &srgb, VIPS_INTERPRETATION_sRGB, NULL);
    g_object_unref(thumb);
    if (rc != 0) return -1;
    *out = srgb;
    return 0;
}

/// The thumbnail path: shrink-on-load, EXIF orientation applied, first page only, sRGB.
/// `size` is a VipsSize, `crop` a VipsInteresting (VIPS_INTERESTING_NONE: no crop).
/// A truncated or corrupt body fails (fail_on=truncated) instead of giving grey pixels.
static inline int thumbd_vips_thumbnail(const void *buffer, size_t length, int width, int height,
                                        int size, int crop, VipsImage **out) {
    VipsImage *thumb = NULL;
    if (vips_thumbnail_buffer((void *)buffer, length, &thumb, width, "height", height,
                              "size", (VipsSize)size, "crop", (VipsInteresting)crop,
                              "option_string", "fail_on=truncated", NULL) != 0) return -1;
    return thumbd_vips_take_srgb(thumb, out);
}

/// The same from a JPEG decoded at 1/`jpeg_shrink` (2, 4 or 8) by libjpeg itself: block
/// shrink down to just above the target, where libvips's own choice leaves a factor of two
/// for the final resize (a JPEG decoded at 1/8 instead of 1/4 costs about a third).
static inline int thumbd_vips_thumbnail_shrunk(const void *buffer, size_t length, int jpeg_shrink, int width,
                                               int height, int size, int crop, VipsImage **out) {
    VipsImage *loaded = vips_image_new_from_buffer(buffer, length, "", "shrink", jpeg_shrink,
                                                   "fail_on", VIPS_FAIL_ON_TRUNCATED, NULL);
    if (loaded == NULL) return -1;
    VipsImage *thumb = NULL;
    int rc = vips_thumbnail_image(loaded, &thumb, width, "height", height, "size", (VipsSize)size,
                                  "crop", (VipsInteresting)crop, NULL);
    g_object_unref(loaded);
    if (rc != 0) return -1;
    return thumbd_vips_take_srgb(thumb, out);
}

/// Centres `in` on a `width`×`height` canvas: transparent (an alpha band is added when
/// missing) or white.
static inline int thumbd_vips_pad(VipsImage *in, int width, int height, int transparent, VipsImage **out) {
    VipsImage *base = in;
    VipsImage *with_alpha = NULL;
    if (transparent && !vips_image_hasalpha(in)) {
        if (vips_addalpha(in, &with_alpha, NULL) != 0) return -1;
        base = with_alpha;
    }
    double values[4] = {255, 255, 255, 255};
    if (transparent) values[0] = values[1] = values[2] = values[3] = 0;
    int bands = vips_image_get_bands(base);
    VipsArrayDouble *background = vips_array_double_new(values, bands > 4 ? 4 : bands);
    int rc = vips_gravity(base, out, VIPS_COMPASS_DIRECTION_CENTRE, width, height,
                          "extend", VIPS_EXTEND_BACKGROUND, "background", background, NULL);
    vips_area_unref(VIPS_AREA(background));
    if (with_alpha) g_object_unref(with_alpha);
    return rc;
}

/// Stretches `in` to exactly `width`×`height` (fit=fill after a thumbnail that kept the ratio).
static inline int thumbd_vips_stretch(VipsImage *in, int width, int height, VipsImage **out) {
    double h = (double)width / vips_image_get_width(in);
    double v = (double)height / vips_image_get_height(in);
    return vips_resize(in, out, h, "vscale", v, NULL);
}

/// Kills the evaluation of `image` once it has run `microseconds`: libvips checks the
/// flag between tiles, and the save then fails.
typedef struct { gint64 deadline; } thumbd_vips_deadline;

static void thumbd_vips_on_eval(VipsImage *image, VipsProgress *progress, void *user) {
    (void)progress;
    thumbd_vips_deadline *deadline = (thumbd_vips_deadline *)user;
    if (g_get_monotonic_time() > deadline->deadline) vips_image_set_kill(image, TRUE);
}

static void thumbd_vips_free_deadline(void *data, GClosure *closure) {
    (void)closure;
    g_free(data);
}

static inline void thumbd_vips_set_deadline(VipsImage *image, gint64 microseconds) {
    thumbd_vips_deadline *deadline = g_new(thumbd_vips_deadline, 1);
    deadline->deadline = g_get_monotonic_time() + microseconds;
    vips_image_set_progress(image, TRUE);
    g_signal_connect_data(image, "eval", G_CALLBACK(thumbd_vips_on_eval), deadline,
                          thumbd_vips_free_deadline, (GConnectFlags)0);
}

enum { THUMBD_JPEG = 0, THUMBD_PNG = 1, THUMBD_WEBP = 2, THUMBD_AVIF = 3 };

/// Encodes `in`, metadata stripped. JPEG has no alpha: it is flattened on white first.
/// On success `*buffer` is g_malloc'ed (free with thumbd_vips_free).
static inline int thumbd_vips_save(VipsImage *in, int format, int quality, void **buffer, size_t *length) {
    switch (format) {
    case THUMBD_JPEG: {
        if (!vips_image_hasalpha(in))
            return vips_jpegsave_buffer(in, buffer, length, "Q", quality, "strip", TRUE, NULL);
        double white[3] = {255, 255, 255};
        VipsArrayDouble *background = vips_array_double_new(white, 3);
        VipsImage *flat = NULL;
        int rc = vips_flatten(in, &flat, "background", background, NULL);
        vips_area_unref(VIPS_AREA(background));
        if (rc != 0) return -1;
        rc = vips_jpegsave_buffer(flat, buffer, length, "Q", quality, "strip", TRUE, NULL);
        g_object_unref(flat);
        return rc;
    }
    case THUMBD_PNG:
        return vips_pngsave_buffer(in, buffer, length, "strip", TRUE, "compression", 6, NULL);
    case THUMBD_WEBP:
        return vips_webpsave_buffer(in, buffer, length, "Q", quality, "strip", TRUE, NULL);
    case THUMBD_AVIF:
        return vips_heifsave_buffer(in, buffer, length, "Q", quality, "strip", TRUE,
                                    "compression", VIPS_FOREIGN_HEIF_COMPRESSION_AV1, "effort", 2, NULL);
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

/// Makes a test image (a gradient with noise, `bands` 3 or 4) and encodes it: what the
/// tests and the bench feed the thumbnailer. `format` as for thumbd_vips_save.
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
    } else {
        rgb = sum;
        g_object_ref(rgb);
    }
    if (vips_cast_uchar(rgb, &bytes, NULL) != 0) goto done;
    if (vips_copy(bytes, &out, "interpretation", VIPS_INTERPRETATION_sRGB, NULL) != 0) goto done;
    if (orientation > 1) {
        vips_image_set_int(out, VIPS_META_ORIENTATION, orientation);
        if (format == THUMBD_JPEG) {
            rc = vips_jpegsave_buffer(out, buffer, length, "Q", 90, NULL);  // keep the EXIF orientation
            goto done;
        }
    }
    rc = thumbd_vips_save(out, format, 90, buffer, length);
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
