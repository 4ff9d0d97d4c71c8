// libvips from Swift. Its operations are variadic and NULL-terminated, which Swift cannot
// call; each is wrapped here with the fixed arguments thumbd uses. Nothing else.
#ifndef THUMBD_VIPS_SHIM_H
#define THUMBD_VIPS_SHIM_H


#include <vips/vips.h>
#include <vips/vector.h>  // vips_vector_isenabled: whether libvips runs liborc code (OrcTurns)
#include <libheif/heif.h>
#include <string.h>

#include <stdlib.h>

/// The decoders thumbd calls by name (the Swift side's SourceFormat); no other loader runs.
enum { THUMBD_LOAD_JPEG = 0, THUMBD_LOAD_PNG = 1, THUMBD_LOAD_GIF = 2, THUMBD_LOAD_WEBP = 3, THUMBD_LOAD_HEIF = 4,
       THUMBD_LOAD_TIFF = 5 };

static const char *const thumbd_vips_loader_names[] = {
    "jpegload_buffer", "pngload_buffer", "gifload_buffer", "webpload_buffer", "heifload_buffer", "tiffload_buffer",
    "jpegload_source",  /* a JPEG decoded while it downloads (thumbd_vips_load_jpeg_source) */
};

/// vips_init once per process with only the modules in `home` (NULL: libvips's own
/// directory, every module), libvips's operation cache
/// off (every variant is made once and stored; the cache would only hold memory), `threads`
/// worker threads per pipeline, every loader blocked but the ones thumbd calls by name, and
/// the loaders libvips marks untrusted blocked too. Returns 0 on success.
static inline int thumbd_vips_start(int threads, const char *home) {
    /* libvips loads every module in <VIPSHOME>/<libdir's name>/vips-modules-X.Y at vips_init;
       `home` (prepared by the caller) holds the HEIF module alone. */
    const char *previous = getenv("VIPSHOME");
    char *saved = previous ? g_strdup(previous) : NULL;
    if (home) setenv("VIPSHOME", home, 1);
    int rc = vips_init("thumbd");
    if (saved) { setenv("VIPSHOME", saved, 1); g_free(saved); } else if (home) unsetenv("VIPSHOME");
    if (rc != 0) return -1;
    vips_cache_set_max(0);
    vips_cache_set_max_mem(0);
    vips_cache_set_max_files(0);
    vips_concurrency_set(threads);
    vips_block_untrusted_set(TRUE);
    vips_operation_block_set("VipsForeignLoad", TRUE);
    for (size_t i = 0; i < sizeof thumbd_vips_loader_names / sizeof thumbd_vips_loader_names[0]; i++) {
        GType type = vips_type_find("VipsOperation", thumbd_vips_loader_names[i]);
        if (type != 0) vips_operation_block_set(g_type_name(type), FALSE);
    }
    return 0;
}

/// What reads a streamed source's bytes: copies at most `length` into `buffer`, blocking
/// until some have arrived; returns how many, 0 at their end, -1 when they failed.
typedef gint64 (*thumbd_read_fn)(void *context, void *buffer, gint64 length);

typedef struct {
    thumbd_read_fn read;
    void *context;
} thumbd_vips_reader;

static gint64 thumbd_vips_on_read(VipsSourceCustom *source, void *buffer, gint64 length, void *user) {
    (void)source;
    thumbd_vips_reader *reader = user;
    return reader->read(reader->context, buffer, length);
}

/// A source whose bytes `read` gives as they arrive (no seek: a pipe to libvips). The
/// caller owns the one reference (thumbd_vips_source_free) and keeps `context` alive while
/// any image made from the source may still read.
static inline VipsSource *thumbd_vips_source_new(thumbd_read_fn read, void *context) {
    VipsSourceCustom *source = vips_source_custom_new();
    if (source == NULL) return NULL;
    thumbd_vips_reader *reader = g_new(thumbd_vips_reader, 1);
    reader->read = read;
    reader->context = context;
    g_signal_connect_data(source, "read", G_CALLBACK(thumbd_vips_on_read), reader, (GClosureNotify)g_free, 0);
    return VIPS_SOURCE(source);
}

static inline void thumbd_vips_source_free(VipsSource *source) { g_object_unref(source); }

/// A JPEG read from `source` as thumbd_vips_load reads one from memory: sequential, libjpeg's
/// `shrink`, and a truncated or corrupt body fails.
static inline int thumbd_vips_load_jpeg_source(VipsSource *source, int shrink, VipsImage **out) {
    return vips_jpegload_source(source, out, "shrink", shrink > 1 ? shrink : 1, "access", VIPS_ACCESS_SEQUENTIAL,
                                "fail_on", VIPS_FAIL_ON_TRUNCATED, NULL);
}

/// Whether libvips can write AVIF: its HEIF saver is there and libheif has an AV1 encoder
/// (what heifsave asks libheif for). Asked, not tried: encoding a test image started the
/// AV1 encoder and kept about 6 MB of it resident for the daemon's life.
static inline int thumbd_vips_can_save_avif(void) {
    return vips_type_find("VipsOperation", "heifsave_buffer") != 0 && heif_have_encoder_for_format(heif_compression_AV1);
}

/// Whether the loader of `format` exists in this libvips (HEIF is a module).
static inline int thumbd_vips_has_loader(int format) {
    if (format < 0 || format > THUMBD_LOAD_TIFF) return 0;
    return vips_type_find("VipsOperation", thumbd_vips_loader_names[format]) != 0;
}

/// The loader of `format`, called by name: libvips's own sniffing never runs. Sequential
/// access (rows are read once, top to bottom), and a truncated or corrupt body fails instead
/// of giving grey pixels. `shrink` (2, 4, 8) is libjpeg's own decode shrink, for JPEG only.
/// `frames` > 1 (GIF and WebP only) loads that many frames, stacked top to bottom as one tall
/// image (libvips's `page-height`), with random access; otherwise the first frame alone.
/// Nothing is decoded until the image is evaluated.
static inline int thumbd_vips_load(int format, const void *buffer, size_t length, int shrink, int frames,
                                   VipsImage **out) {
    void *data = (void *)buffer;
    int n = frames > 1 ? frames : 1;
    VipsAccess access = frames > 1 ? VIPS_ACCESS_RANDOM : VIPS_ACCESS_SEQUENTIAL;
    switch (format) {
    case THUMBD_LOAD_JPEG:
        return vips_jpegload_buffer(data, length, out, "shrink", shrink > 1 ? shrink : 1, "access",
                                    VIPS_ACCESS_SEQUENTIAL, "fail_on", VIPS_FAIL_ON_TRUNCATED, NULL);
    case THUMBD_LOAD_PNG:
        return vips_pngload_buffer(data, length, out, "access", VIPS_ACCESS_SEQUENTIAL, "fail_on",
                                   VIPS_FAIL_ON_TRUNCATED, NULL);
    case THUMBD_LOAD_GIF:
        return vips_gifload_buffer(data, length, out, "access", access, "n", n, "fail_on", VIPS_FAIL_ON_TRUNCATED,
                                   NULL);
    case THUMBD_LOAD_WEBP:
        return vips_webpload_buffer(data, length, out, "access", access, "n", n, "fail_on", VIPS_FAIL_ON_TRUNCATED,
                                    NULL);
    case THUMBD_LOAD_HEIF:
        if (!thumbd_vips_has_loader(format)) { vips_error("thumbd", "no HEIF loader"); return -1; }
        return vips_heifload_buffer(data, length, out, "access", VIPS_ACCESS_SEQUENTIAL, "fail_on",
                                    VIPS_FAIL_ON_TRUNCATED, NULL);
    case THUMBD_LOAD_TIFF:
        return vips_tiffload_buffer(data, length, out, "access", VIPS_ACCESS_SEQUENTIAL, "fail_on",
                                    VIPS_FAIL_ON_TRUNCATED, NULL);
    default:
        vips_error("thumbd", "no loader");
        return -1;
    }
}

typedef struct {
    int width;
    int height;
    int bands;
    int has_alpha;
    int pages;
    int orientation;
} thumbd_vips_header;

/// Reads only the header of `buffer` with the loader of `format` (no pixel is decoded).
static inline int thumbd_vips_read_header(int format, const void *buffer, size_t length, thumbd_vips_header *out) {
    VipsImage *image = NULL;
    if (thumbd_vips_load(format, buffer, length, 1, 1, &image) != 0 || image == NULL) return -1;
    out->width = vips_image_get_width(image);
    out->height = vips_image_get_height(image);
    out->bands = vips_image_get_bands(image);
    out->has_alpha = vips_image_hasalpha(image);
    out->pages = vips_image_get_n_pages(image);
    out->orientation = vips_image_get_orientation(image);
    g_object_unref(image);
    return 0;
}

/// Cuts `width`×`height` at (`left`, `top`) out of `in` (before any resize: a crop is cheap).
static inline int thumbd_vips_crop(VipsImage *in, int left, int top, int width, int height, VipsImage **out) {
    return vips_extract_area(in, out, left, top, width, height, NULL);
}

/// An image of `width`×`height`×`bands` samples of `format` over `pixels` (malloc'ed or
/// g_malloc'ed, `size` bytes; g_free frees either since GLib 2.46), which it takes: they are
/// freed when the image closes, or now if it cannot be made. sRGB from 3 bands, else grey.
static inline int thumbd_vips_wrap_pixels(void *pixels, size_t size, int width, int height, int bands,
                                          VipsBandFormat format, VipsImage **out) {
    VipsImage *bare = vips_image_new_from_memory(pixels, size, width, height, bands, format);
    if (bare == NULL) { g_free(pixels); return -1; }
    g_signal_connect_swapped(bare, "postclose", G_CALLBACK(g_free), pixels);  // the pixels live as long as the image
    int rc = vips_copy(bare, out, "interpretation", bands >= 3 ? VIPS_INTERPRETATION_sRGB : VIPS_INTERPRETATION_B_W,
                       NULL);
    g_object_unref(bare);
    return rc;
}

/// An image over `pixels` (`size` bytes, laid out as `in`), which it takes.
static inline int thumbd_vips_adopt_pixels(VipsImage *in, void *pixels, size_t size, VipsImage **out) {
    return thumbd_vips_wrap_pixels(pixels, size, vips_image_get_width(in), vips_image_get_height(in),
                                   vips_image_get_bands(in), vips_image_get_format(in), out);
}

/// An image over decoded `pixels` (`width`×`height`×`bands` bytes, 8 bits a sample, sRGB or
/// grey), which it takes. `orientation` (EXIF, 1–8) is kept for the resize to apply, as a
/// loader keeps it.
static inline int thumbd_vips_image_from_pixels(void *pixels, int width, int height, int bands, int orientation,
                                                VipsImage **out) {
    int rc = thumbd_vips_wrap_pixels(pixels, (size_t)width * height * bands, width, height, bands, VIPS_FORMAT_UCHAR,
                                     out);
    if (rc == 0 && orientation > 1) vips_image_set_int(*out, VIPS_META_ORIENTATION, orientation);
    return rc;
}

/// Evaluates `in` into one block of memory (g_malloc'ed, freed with the image returned),
/// and gives it back as a new image with no metadata at all: what an encoder sees carries
/// no EXIF, XMP, ICC or comment, however large the source's were.
static inline int thumbd_vips_materialize(VipsImage *in, VipsImage **out) {
    size_t size = 0;
    void *pixels = vips_image_write_to_memory(in, &size);
    if (pixels == NULL) return -1;
    return thumbd_vips_adopt_pixels(in, pixels, size, out);
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

/// The resize of an image already loaded (and cropped): EXIF orientation applied, sRGB.
/// `size` is a VipsSize, `crop` a VipsInteresting (VIPS_INTERESTING_NONE: no crop).
static inline int thumbd_vips_resize(VipsImage *in, int width, int height, int size, int crop, VipsImage **out) {
    VipsImage *thumb = NULL;
    if (vips_thumbnail_image(in, &thumb, width, "height", height, "size", (VipsSize)size,
                             "crop", (VipsInteresting)crop, NULL) != 0) return -1;
    return thumbd_vips_take_srgb(thumb, out);
}

/// Centres `in` on a `width`×`height` canvas of `background` (RGBA, 0–255 each): an alpha
/// band is added when the colour is not opaque and `in` has none.
static inline int thumbd_vips_pad(VipsImage *in, int width, int height, const double background[4], VipsImage **out) {
    VipsImage *base = in;
    VipsImage *with_alpha = NULL;
    if (background[3] < 255 && !vips_image_hasalpha(in)) {
        if (vips_addalpha(in, &with_alpha, NULL) != 0) return -1;
        base = with_alpha;
    }
    int bands = vips_image_get_bands(base);
    double values[4] = {background[0], background[1], background[2], background[3]};
    if (bands <= 2) { values[0] = (background[0] + background[1] + background[2]) / 3; values[1] = background[3]; }
    VipsArrayDouble *colour = vips_array_double_new(values, bands > 4 ? 4 : bands);
    int rc = vips_gravity(base, out, VIPS_COMPASS_DIRECTION_CENTRE, width, height,
                          "extend", VIPS_EXTEND_BACKGROUND, "background", colour, NULL);
    vips_area_unref(VIPS_AREA(colour));
    if (with_alpha) g_object_unref(with_alpha);
    return rc;
}

/// Stretches `in` to exactly `width`×`height` (fit=fill after a thumbnail that kept the ratio).
static inline int thumbd_vips_stretch(VipsImage *in, int width, int height, VipsImage **out) {
    double h = (double)width / vips_image_get_width(in);
    double v = (double)height / vips_image_get_height(in);
    return vips_resize(in, out, h, "vscale", v, NULL);
}

#include "control.h"
#include "effects.h"
#include "encode.h"
#include "testimages.h"

#endif
