/*
 * Exercises the newest-frame C API (segtool_live_*) the way a ROS node would: a camera
 * thread submitting frames faster than the model runs, an inference thread taking the
 * newest answers; driven by tests/c_live.rs.
 *
 *   live <model.onnx> <engine: tract|ort|auto>
 *
 * Checks the class maps of the answered frames, that frame indices only grow, that the
 * counters add up exactly (answered + dropped == submitted) and that the newest frame is
 * always answered, then the timeout, end, deadline and error paths. Exits 0 when every
 * check passed; every failure prints a line starting with "FAIL".
 */
#include <segtool.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { W = 64, H = 48, PAD = 4, STRIDE = W * 3 + PAD, FRAMES = 24 };

/* Rows in bands of red, green, blue: with the identity 1x1-conv model, the class of
 * row y is (y / 16). */
static void fill_image(uint8_t *img) {
    memset(img, 0xAB, (size_t)STRIDE * H);
    for (int y = 0; y < H; y++) {
        for (int x = 0; x < W; x++) {
            uint8_t *p = img + y * STRIDE + x * 3;
            p[0] = p[1] = p[2] = 10;
            p[y / 16] = 240;
        }
    }
}

static int engine_from_name(const char *name) {
    if (strcmp(name, "tract") == 0) return SEGTOOL_ENGINE_TRACT;
    if (strcmp(name, "ort") == 0) return SEGTOOL_ENGINE_ORT;
    return SEGTOOL_ENGINE_AUTO;
}

struct camera {
    segtool_live *live;
    const uint8_t *img;
    int errors;
    uint64_t last_index;
};

/* The "camera callback": submits every frame at once, as fast as it can. */
static void *camera_thread(void *arg) {
    struct camera *cam = arg;
    for (int i = 0; i < FRAMES; i++) {
        uint64_t index = 0;
        if (segtool_live_submit(cam->live, cam->img, W, H, STRIDE, &index) != SEGTOOL_OK ||
            index != (uint64_t)i)
            cam->errors++;
        cam->last_index = index;
    }
    segtool_live_finish(cam->live);
    return NULL;
}

static uint64_t dropped(const segtool_live_counts *c) {
    return c->replaced + c->expired + c->rejected;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s <model.onnx> <engine>\n", argv[0]);
        return 2;
    }
    const char *model = argv[1];
    segtool_options opts = segtool_options_default();
    opts.engine = engine_from_name(argv[2]);
    uint8_t *img = malloc((size_t)STRIDE * H);
    fill_image(img);

    segtool_live_options lo = segtool_live_options_default();
    CHECK(lo.slot == 1 && lo.deadline_ms == 0 && lo.sessions == 1 && lo.smooth == 0.0f,
          "defaults");
    lo.smooth = 0.5f;

    segtool_live *live = NULL;
    segtool_status st = segtool_live_open(model, &opts, &lo, &live);
    CHECK(st == SEGTOOL_OK && live != NULL, "segtool_live_open: %d", (int)st);
    if (live == NULL) return 1;

    /* The camera runs on its own thread; this one is the inference consumer. */
    struct camera cam = {live, img, 0, 0};
    pthread_t camera;
    pthread_create(&camera, NULL, camera_thread, &cam);
    uint64_t answered = 0, previous = 0, last = 0;
    for (;;) {
        segtool_result *res = NULL;
        uint64_t index = 0;
        st = segtool_live_next(live, 20000, &index, &res);
        if (st == SEGTOOL_END) break;
        CHECK(st == SEGTOOL_OK && res != NULL, "segtool_live_next: %d", (int)st);
        if (st != SEGTOOL_OK) break;
        CHECK(answered == 0 || index > previous, "index %llu after %llu",
              (unsigned long long)index, (unsigned long long)previous);
        previous = last = index;
        answered++;
        CHECK(segtool_result_width(res) == W && segtool_result_height(res) == H, "size");
        const uint8_t *map = segtool_result_class_map(res);
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++)
                if (map[y * W + x] != y / 16) {
                    CHECK(0, "frame %llu pixel (%d, %d): class %u", (unsigned long long)index,
                          x, y, map[y * W + x]);
                    y = H;
                    break;
                }
        segtool_result_free(res);
    }
    pthread_join(camera, NULL);
    CHECK(cam.errors == 0, "%d submits failed", cam.errors);

    segtool_live_counts c;
    CHECK(segtool_live_stats(live, &c) == SEGTOOL_OK, "stats");
    printf("live: %llu submitted, %llu answered, %llu replaced, %llu expired\n",
           (unsigned long long)c.submitted, (unsigned long long)c.answered,
           (unsigned long long)c.replaced, (unsigned long long)c.expired);
    CHECK(c.submitted == FRAMES, "submitted %llu", (unsigned long long)c.submitted);
    CHECK(c.answered == answered, "answered %llu, seen %llu", (unsigned long long)c.answered,
          (unsigned long long)answered);
    CHECK(c.answered + c.failed + dropped(&c) == c.submitted && c.pending == 0,
          "counts do not add up");
    CHECK(last == FRAMES - 1, "the newest frame (%d) is always answered, last was %llu",
          FRAMES - 1, (unsigned long long)last);
    /* After the end, next keeps saying so. */
    segtool_result *res = (segtool_result *)0x1;
    CHECK(segtool_live_next(live, 0, NULL, &res) == SEGTOOL_END && res == NULL, "end");
    segtool_live_close(live);

    /* Deadlines: a burst into a big slot with a 1 ms deadline; whatever expires is
     * counted, the rest is answered. */
    lo = segtool_live_options_default();
    lo.slot = 8;
    lo.deadline_ms = 1;
    CHECK(segtool_live_open(model, &opts, &lo, &live) == SEGTOOL_OK, "open with deadline");
    for (int i = 0; i < 8; i++)
        CHECK(segtool_live_submit(live, img, W, H, STRIDE, NULL) == SEGTOOL_OK, "submit");
    segtool_live_finish(live);
    uint64_t seen = 0;
    while ((st = segtool_live_next(live, 20000, NULL, &res)) == SEGTOOL_OK) {
        seen++;
        segtool_result_free(res);
    }
    CHECK(st == SEGTOOL_END, "drained: %d", (int)st);
    CHECK(segtool_live_stats(live, &c) == SEGTOOL_OK, "stats");
    printf("deadline: %llu answered, %llu expired of %llu\n", (unsigned long long)c.answered,
           (unsigned long long)c.expired, (unsigned long long)c.submitted);
    CHECK(c.answered == seen && c.answered + c.expired == 8 && c.replaced == 0,
          "deadline counts");
    segtool_live_close(live);

    /* Timeout: nothing submitted, not finished. */
    CHECK(segtool_live_open(model, &opts, NULL, &live) == SEGTOOL_OK, "open defaults");
    st = segtool_live_next(live, 10, NULL, &res);
    CHECK(st == SEGTOOL_TIMEOUT && res == NULL, "timeout: %d", (int)st);
    CHECK(strlen(segtool_last_error()) > 0, "timeout message");

    /* Error paths. */
    CHECK(segtool_live_submit(NULL, img, W, H, STRIDE, NULL) == SEGTOOL_ERR_NULL_ARGUMENT,
          "NULL live");
    CHECK(segtool_live_submit(live, NULL, W, H, STRIDE, NULL) == SEGTOOL_ERR_NULL_ARGUMENT,
          "NULL rgb");
    CHECK(segtool_live_submit(live, img, W, H, 5, NULL) == SEGTOOL_ERR_INVALID_ARGUMENT,
          "short stride");
    CHECK(segtool_live_next(live, 0, NULL, NULL) == SEGTOOL_ERR_NULL_ARGUMENT, "NULL out");
    CHECK(segtool_live_stats(live, NULL) == SEGTOOL_ERR_NULL_ARGUMENT, "NULL stats");
    CHECK(segtool_live_stats(live, &c) == SEGTOOL_OK && c.submitted == 0,
          "refused frames are not counted");
    segtool_live_close(live);
    segtool_live_close(NULL);

    segtool_live *bad = (segtool_live *)0x1;
    lo = segtool_live_options_default();
    lo.smooth = 1.5f;
    CHECK(segtool_live_open(model, &opts, &lo, &bad) == SEGTOOL_ERR_INVALID_ARGUMENT &&
              bad == NULL,
          "smooth out of range");
    CHECK(segtool_live_open("/nonexistent.onnx", &opts, NULL, &bad) ==
                  SEGTOOL_ERR_MODEL_NOT_FOUND &&
              bad == NULL,
          "missing model");

    free(img);
    if (failures) {
        fprintf(stderr, "%d live C API check(s) failed\n", failures);
        return 1;
    }
    printf("all live C API checks passed\n");
    return 0;
}
