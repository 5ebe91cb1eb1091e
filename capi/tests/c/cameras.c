/*
 * Two cameras on one live handle (segtool_live_add_source), as a ROS node with two
 * image topics would run them; driven by tests/c_live.rs.
 *
 *   cameras <model.onnx> <engine: tract|ort|auto>
 *
 * Each camera submits its frames to its own source; one consumer takes every answer
 * with segtool_live_next_source and checks its class map against segtool_segment on the
 * same frame (the single-camera path), and the per-source counts exactly. Exits 0 when
 * every check passed; every failure prints a line starting with "FAIL".
 */
#include <segtool.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { W = 32, H = 24, STRIDE = W * 3, FRAMES = 4, CAMERAS = 2 };

/* Camera `cam`'s frame `i`: blocks of red, green and blue in a pattern of its own. */
static void fill(uint8_t *img, unsigned cam, unsigned i) {
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            uint8_t *p = img + y * STRIDE + x * 3;
            p[0] = p[1] = p[2] = 20;
            p[(x / 4 + y / 4 + cam + i) % 3] = 230;
        }
}

static int engine_from_name(const char *name) {
    if (strcmp(name, "tract") == 0) return SEGTOOL_ENGINE_TRACT;
    if (strcmp(name, "ort") == 0) return SEGTOOL_ENGINE_ORT;
    return SEGTOOL_ENGINE_AUTO;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s <model.onnx> <engine>\n", argv[0]);
        return 2;
    }
    segtool_options opts = segtool_options_default();
    opts.engine = engine_from_name(argv[2]);
    segtool_segmenter *seg = NULL;
    CHECK(segtool_open(argv[1], &opts, &seg) == SEGTOOL_OK, "segtool_open");
    segtool_live *live = NULL;
    CHECK(segtool_live_open(argv[1], &opts, NULL, &live) == SEGTOOL_OK, "segtool_live_open");
    if (seg == NULL || live == NULL) return 1;

    const char *names[CAMERAS] = {"front", "rear"};
    uint32_t ids[CAMERAS] = {0, 0};
    for (int c = 0; c < CAMERAS; c++)
        CHECK(segtool_live_add_source(live, names[c], FRAMES, 0, &ids[c]) == SEGTOOL_OK &&
                  ids[c] == (uint32_t)c + 1,
              "add %s: id %u", names[c], ids[c]);

    uint8_t img[STRIDE * H];
    for (unsigned i = 0; i < FRAMES; i++)
        for (unsigned c = 0; c < CAMERAS; c++) {
            uint64_t index = 99;
            fill(img, ids[c], i);
            CHECK(segtool_live_submit_source(live, ids[c], img, W, H, STRIDE, &index) ==
                          SEGTOOL_OK &&
                      index == i,
                  "submit %s frame %u", names[c], i);
        }
    /* A source never added is an error naming it. */
    CHECK(segtool_live_submit_source(live, 9, img, W, H, STRIDE, NULL) ==
                  SEGTOOL_ERR_INVALID_ARGUMENT &&
              strstr(segtool_last_error(), "no source 9") != NULL,
          "unknown source");
    segtool_live_finish(live);

    uint64_t seen[CAMERAS + 1] = {0, 0, 0};
    for (;;) {
        segtool_result *res = NULL;
        uint32_t source = 99;
        uint64_t index = 99;
        segtool_status st = segtool_live_next_source(live, 20000, &source, &index, &res);
        if (st == SEGTOOL_END) break;
        CHECK(st == SEGTOOL_OK && res != NULL, "next_source: %d", (int)st);
        if (st != SEGTOOL_OK) break;
        CHECK(source >= 1 && source <= CAMERAS, "source %u", source);
        if (source < 1 || source > CAMERAS) break;
        CHECK(index == seen[source], "source %u: frame %llu, expected %llu", source,
              (unsigned long long)index, (unsigned long long)seen[source]);
        seen[source]++;
        /* The same frame through the single-camera path. */
        segtool_result *alone = NULL;
        fill(img, source, (unsigned)index);
        CHECK(segtool_segment(seg, img, W, H, STRIDE, &alone) == SEGTOOL_OK, "segment");
        CHECK(memcmp(segtool_result_class_map(res), segtool_result_class_map(alone), W * H) == 0,
              "source %u frame %llu: class map differs from segtool_segment", source,
              (unsigned long long)index);
        segtool_result_free(alone);
        segtool_result_free(res);
    }
    for (int c = 0; c < CAMERAS; c++) {
        segtool_live_counts counts;
        segtool_live_latency latency;
        CHECK(segtool_live_source_stats(live, ids[c], &counts, &latency) == SEGTOOL_OK, "stats");
        printf("%s: %llu submitted, %llu answered, p50 %.2f ms, p99 %.2f ms\n", names[c],
               (unsigned long long)counts.submitted, (unsigned long long)counts.answered,
               latency.p50_ms, latency.p99_ms);
        CHECK(counts.submitted == FRAMES && counts.answered == FRAMES && counts.pending == 0 &&
                  counts.failed + counts.replaced + counts.expired + counts.rejected == 0,
              "%s counts", names[c]);
        CHECK(seen[ids[c]] == FRAMES, "%s: %llu frames seen", names[c],
              (unsigned long long)seen[ids[c]]);
        CHECK(latency.samples == FRAMES && latency.p50_ms <= latency.p99_ms, "%s latency",
              names[c]);
    }
    segtool_live_counts counts;
    CHECK(segtool_live_source_stats(live, 5, &counts, NULL) == SEGTOOL_ERR_INVALID_ARGUMENT,
          "stats of a source never added");
    segtool_live_close(live);
    segtool_close(seg);
    if (failures) {
        fprintf(stderr, "%d camera C API check(s) failed\n", failures);
        return 1;
    }
    printf("all camera C API checks passed\n");
    return 0;
}
