/*
 * The C tests' one check: a failed condition counts, prints a line starting with "FAIL"
 * (file, line, the condition, a message, the library's last error) and the test goes on;
 * main returns non-zero when `failures` is.
 */
#ifndef SEGTOOL_TEST_CHECK_H
#define SEGTOOL_TEST_CHECK_H

#include <segtool.h>
#include <stdio.h>

static int failures = 0;

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            failures++;                                                                    \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, " (last error: %s)\n", segtool_last_error());                 \
        }                                                                                  \
    } while (0)

#endif
