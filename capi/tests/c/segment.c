/*
 * Exercises the segtool C API the way a C/ROS user would; driven by tests/c_api.rs.
 *
 *   segment <model.onnx> <garbage.onnx> <engine: tract|ort|auto> <class-map-out>
 *           [<foreign.onnx> <card.toml> <foreign-class-map-out>]
 *
 * With the optional three: a file segtool did not write is refused without its card
 * (SEGTOOL_ERR_INVALID_MODEL, the message naming the card) and segmented with it
 * (`segtool_options.card`); its class map goes to <foreign-class-map-out>.
 * Segments a synthetic padded 7x5 RGB image, checks the rows whose classes are obvious,
 * writes "width height" plus the raw class map to <class-map-out> for the Rust side to
 * compare with segtool_runtime::Segmenter, then walks through the error paths. Exits 0
 * when every check passed; every failure prints a line starting with "FAIL".
 */
#include <segtool.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { W = 7, H = 5, PAD = 5, STRIDE = W * 3 + PAD };

/* Same formula as `synthetic_image` in tests/c_api.rs. Row 0: red, row 1: green, row 2:
 * blue (class = row with the identity 1x1-conv model), rows 3-4: a colour ramp. */
static void fill_image(uint8_t *img) {
    memset(img, 0xAB, (size_t)STRIDE * H); /* padding must be ignored */
    for (int y = 0; y < H; y++) {
        for (int x = 0; x < W; x++) {
            uint8_t *p = img + y * STRIDE + x * 3;
            if (y < 3) {
                p[0] = p[1] = p[2] = 10;
                p[y] = 240;
            } else {
                p[0] = (uint8_t)(x * 37 + y * 11);
                p[1] = (uint8_t)(x * 53 + y * 71);
                p[2] = (uint8_t)(x * 89 + y * 29 + 40);
            }
        }
    }
}

static int engine_from_name(const char *name) {
    if (strcmp(name, "tract") == 0) return SEGTOOL_ENGINE_TRACT;
    if (strcmp(name, "ort") == 0) return SEGTOOL_ENGINE_ORT;
    return SEGTOOL_ENGINE_AUTO;
}

static void error_paths(const char *model, const char *garbage, const segtool_options *opts,
                        segtool_segmenter *seg) {
    segtool_segmenter *bad = (segtool_segmenter *)0x1; /* must be reset to NULL */
    segtool_status st;

    /* Missing file: its own status and a message naming the file. */
    st = segtool_open("/nonexistent/dir/missing-model.onnx", opts, &bad);
    CHECK(st == SEGTOOL_ERR_MODEL_NOT_FOUND, "missing file gave status %d", st);
    CHECK(bad == NULL, "out not reset on failure");
    CHECK(strstr(segtool_last_error(), "missing-model.onnx") != NULL,
          "message does not name the file");

    /* Garbage file. */
    st = segtool_open(garbage, opts, &bad);
    CHECK(st == SEGTOOL_ERR_INVALID_MODEL, "garbage file gave status %d", st);
    CHECK(strstr(segtool_last_error(), "garbage") != NULL, "message does not name the file");

    /* Null pointers. */
    st = segtool_open(NULL, opts, &bad);
    CHECK(st == SEGTOOL_ERR_NULL_ARGUMENT, "NULL path gave %d", st);
    CHECK(strstr(segtool_last_error(), "model_path") != NULL, "message names the argument");
    st = segtool_open(model, opts, NULL);
    CHECK(st == SEGTOOL_ERR_NULL_ARGUMENT, "NULL out gave %d", st);
    st = segtool_open("", opts, &bad);
    CHECK(st == SEGTOOL_ERR_INVALID_ARGUMENT, "empty path gave %d", st);

    /* Bad options. */
    segtool_options o = *opts;
    o.providers = "tpu";
    st = segtool_open(model, &o, &bad);
    CHECK(st == SEGTOOL_ERR_INVALID_ARGUMENT, "unknown provider gave %d", st);
    CHECK(strstr(segtool_last_error(), "tpu") != NULL, "message names the provider");
    o = *opts;
    o.engine = 42;
    st = segtool_open(model, &o, &bad);
    CHECK(st == SEGTOOL_ERR_INVALID_ARGUMENT, "unknown engine gave %d", st);
    o = *opts;
    o.engine = SEGTOOL_ENGINE_TRACT;
    o.providers = "cuda";
    o.strict = true;
    st = segtool_open(model, &o, &bad);
    CHECK(st == SEGTOOL_ERR_PROVIDER_UNAVAILABLE, "strict tract+cuda gave %d", st);
    CHECK(bad == NULL, "out not reset on failure");

    /* Segment: null handle, null image, null out, zero sizes, short stride. */
    uint8_t px[3 * 4] = {0};
    segtool_result *res = (segtool_result *)0x1;
    st = segtool_segment(NULL, px, 2, 2, 0, &res);
    CHECK(st == SEGTOOL_ERR_NULL_ARGUMENT, "NULL segmenter gave %d", st);
    CHECK(res == NULL, "out not reset on failure");
    st = segtool_segment(seg, NULL, 2, 2, 0, &res);
    CHECK(st == SEGTOOL_ERR_NULL_ARGUMENT, "NULL image gave %d", st);
    st = segtool_segment(seg, px, 2, 2, 0, NULL);
    CHECK(st == SEGTOOL_ERR_NULL_ARGUMENT, "NULL out gave %d", st);
    st = segtool_segment(seg, px, 0, 2, 0, &res);
    CHECK(st == SEGTOOL_ERR_INVALID_ARGUMENT, "zero width gave %d", st);
    st = segtool_segment(seg, px, 2, 0, 0, &res);
    CHECK(st == SEGTOOL_ERR_INVALID_ARGUMENT, "zero height gave %d", st);
    st = segtool_segment(seg, px, 2, 2, 5, &res);
    CHECK(st == SEGTOOL_ERR_INVALID_ARGUMENT, "stride 5 < 6 gave %d", st);
    CHECK(strstr(segtool_last_error(), "stride") != NULL, "message names the stride");
    st = segtool_segment(seg, px, 100000, 100000, 0, &res);
    CHECK(st == SEGTOOL_ERR_INVALID_ARGUMENT, "huge image gave %d", st);

    /* Accessors on NULL / out of range. */
    CHECK(segtool_num_classes(NULL) == 0, "num_classes(NULL)");
    CHECK(segtool_class_name(NULL, 0) == NULL, "class_name(NULL)");
    CHECK(segtool_class_name(seg, 3) == NULL, "class_name out of range");
    CHECK(strstr(segtool_last_error(), "out of range") != NULL, "range message");
    uint8_t rgb[3];
    CHECK(segtool_palette(seg, 3, rgb) == SEGTOOL_ERR_INVALID_ARGUMENT, "palette range");
    CHECK(segtool_palette(seg, 0, NULL) == SEGTOOL_ERR_NULL_ARGUMENT, "palette NULL rgb");
    CHECK(segtool_palette(NULL, 0, rgb) == SEGTOOL_ERR_NULL_ARGUMENT, "palette NULL seg");
    CHECK(segtool_provider(NULL) == NULL, "provider(NULL)");
    CHECK(segtool_engine_name(NULL) == NULL, "engine_name(NULL)");
    CHECK(segtool_result_width(NULL) == 0 && segtool_result_height(NULL) == 0, "result(NULL)");
    CHECK(segtool_result_class_map(NULL) == NULL, "class_map(NULL)");
    CHECK(strcmp(segtool_last_error(), "") != 0, "error message set");
    segtool_result_free(NULL);
    segtool_close(NULL);
    CHECK(strcmp(segtool_last_error(), "") == 0, "a successful call clears the message");
}

/* A segmenter fixed to W x H: same map; ONNX Runtime refuses another size; tract, which
   plans each size as it comes, refuses the option by name; only one of the two sides
   given is an error. */
static void fixed_size(const char *model, const segtool_options *base, const uint8_t *img) {
    segtool_options opts = *base;
    opts.fixed_height = H;
    opts.fixed_width = 0;
    segtool_segmenter *seg = NULL;
    CHECK(segtool_open(model, &opts, &seg) == SEGTOOL_ERR_INVALID_ARGUMENT && seg == NULL,
          "fixed_height without fixed_width");
    CHECK(strstr(segtool_last_error(), "fixed_width") != NULL, "names the missing side");

    opts.fixed_width = W;
    if (opts.engine == SEGTOOL_ENGINE_TRACT) {
        CHECK(segtool_open(model, &opts, &seg) == SEGTOOL_ERR_INVALID_ARGUMENT && seg == NULL,
              "tract with a fixed size");
        CHECK(strstr(segtool_last_error(), "fixed_size") != NULL, "names the option: %s",
              segtool_last_error());
        return;
    }
    CHECK(segtool_open(model, &opts, &seg) == SEGTOOL_OK && seg != NULL, "open fixed: %s",
          segtool_last_error());
    if (!seg)
        return;
    segtool_result *res = NULL;
    CHECK(segtool_segment(seg, img, W, H, STRIDE, &res) == SEGTOOL_OK && res, "fixed run");
    if (res) {
        const uint8_t *map = segtool_result_class_map(res);
        for (int y = 0; y < 3; y++)
            for (int x = 0; x < W; x++)
                CHECK(map[y * W + x] == y, "fixed: pixel (%d,%d) is class %d", x, y,
                      map[y * W + x]);
        segtool_result_free(res);
    }
    res = NULL;
    segtool_status st = segtool_segment(seg, img, W / 2, H, STRIDE, &res);
    char why[512]; /* copied: the next call clears the message */
    snprintf(why, sizeof why, "%s", segtool_last_error());
    if (strcmp(segtool_engine_name(seg), "onnxruntime") == 0) {
        CHECK(st == SEGTOOL_ERR_INVALID_ARGUMENT && res == NULL, "other size refused: %d", st);
        CHECK(strstr(why, "shape") != NULL, "says why: %s", why);
    } else {
        /* auto timed another engine faster at this size: it plans each size itself. */
        CHECK(st == SEGTOOL_OK, "%s takes another size: %d", segtool_engine_name(seg), st);
    }
    segtool_result_free(res);
    segtool_close(seg);
}

static void write_map(const char *path, const segtool_result *res) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "open %s", path);
    if (f) {
        fprintf(f, "%u %u\n", segtool_result_width(res), segtool_result_height(res));
        fwrite(segtool_result_class_map(res), 1,
               (size_t)segtool_result_width(res) * segtool_result_height(res), f);
        fclose(f);
    }
}

/* A model from elsewhere: refused without its card, segmented with it. */
static void foreign_with_card(const char *model, const char *card, const segtool_options *base,
                              const uint8_t *img, const char *out_path) {
    segtool_options opts = *base;
    segtool_segmenter *seg = (segtool_segmenter *)0x1;
    segtool_status st = segtool_open(model, &opts, &seg);
    CHECK(st == SEGTOOL_ERR_INVALID_MODEL && seg == NULL, "no card: status %d", st);
    CHECK(strstr(segtool_last_error(), "card") != NULL, "no card: message names the card");
    opts.card = card;
    st = segtool_open(model, &opts, &seg);
    CHECK(st == SEGTOOL_OK, "open with card: status %d", st);
    if (st != SEGTOOL_OK) return;
    CHECK(segtool_num_classes(seg) == 3, "card classes: %u", segtool_num_classes(seg));
    segtool_result *res = NULL;
    CHECK(segtool_segment(seg, img, W, H, STRIDE, &res) == SEGTOOL_OK, "segment by card");
    if (res) {
        write_map(out_path, res);
        segtool_result_free(res);
    }
    segtool_close(seg);
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 8) {
        fprintf(stderr,
                "usage: %s <model> <garbage> <tract|ort|auto> <out> [<foreign> <card> <out>]\n",
                argv[0]);
        return 2;
    }
    const char *model = argv[1], *garbage = argv[2], *out_path = argv[4];
    printf("segtool %s\n", segtool_version());
    CHECK(strlen(segtool_version()) > 0, "version");

    segtool_options opts = segtool_options_default();
    CHECK(opts.engine == SEGTOOL_ENGINE_AUTO && opts.providers == NULL && !opts.strict,
          "defaults");
    opts.engine = engine_from_name(argv[3]);
    opts.threads = 1;
    opts.providers = "cpu";
    opts.strict = true;

    segtool_segmenter *seg = NULL;
    segtool_status st = segtool_open(model, &opts, &seg);
    if (st != SEGTOOL_OK) {
        fprintf(stderr, "FAIL segtool_open(%s): status %d: %s\n", model, st,
                segtool_last_error());
        return 1;
    }
    printf("engine %s provider %s fallback %s\n", segtool_engine_name(seg),
           segtool_provider(seg),
           segtool_fallback_reason(seg) ? segtool_fallback_reason(seg) : "(none)");
    CHECK(strcmp(segtool_provider(seg), "cpu") == 0, "provider %s", segtool_provider(seg));

    uint32_t n = segtool_num_classes(seg);
    CHECK(n == 3, "num_classes = %u", n);
    for (uint32_t i = 0; i < n; i++) {
        char want[16];
        snprintf(want, sizeof want, "c%u", i);
        const char *name = segtool_class_name(seg, i);
        CHECK(name != NULL && strcmp(name, want) == 0, "class %u name %s", i,
              name ? name : "(null)");
    }
    uint8_t colour[3] = {1, 1, 1};
    CHECK(segtool_palette(seg, 1, colour) == SEGTOOL_OK, "palette(1)");
    CHECK(colour[0] == 128 && colour[1] == 0 && colour[2] == 0, "VOC colour of class 1");

    uint8_t img[STRIDE * H];
    fill_image(img);
    segtool_result *res = NULL;
    st = segtool_segment(seg, img, W, H, STRIDE, &res);
    CHECK(st == SEGTOOL_OK && res != NULL, "segment gave %d", st);
    if (res) {
        CHECK(segtool_result_width(res) == W && segtool_result_height(res) == H, "size %ux%u",
              segtool_result_width(res), segtool_result_height(res));
        const uint8_t *map = segtool_result_class_map(res);
        for (int y = 0; y < 3; y++)
            for (int x = 0; x < W; x++)
                CHECK(map[y * W + x] == y, "pixel (%d,%d) is class %d", x, y, map[y * W + x]);
        write_map(out_path, res);
        /* A result outlives its segmenter's next call. */
        segtool_result *again = NULL;
        CHECK(segtool_segment(seg, img, W, H, STRIDE, &again) == SEGTOOL_OK, "second run");
        if (again) {
            CHECK(memcmp(segtool_result_class_map(again), map, (size_t)W * H) == 0,
                  "same image, same map");
            segtool_result_free(again);
        }
        segtool_result_free(res);
    }

    fixed_size(model, &opts, img);
    if (argc == 8) foreign_with_card(argv[5], argv[6], &opts, img, argv[7]);
    error_paths(model, garbage, &opts, seg);
    segtool_close(seg);

    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("all C API checks passed\n");
    return 0;
}
