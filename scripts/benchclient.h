/*
 * What the C clients of scripts/bench share: a monotonic clock in seconds, and whether a
 * buffer holds a whole HTTP/1.1 response framed by Content-Length.
 */
#ifndef THUMBD_BENCHCLIENT_H
#define THUMBD_BENCHCLIENT_H
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* 1 once the head and Content-Length bytes of body are in `buf` (`len` bytes). */
static int response_complete(const char *buf, size_t len) {
    char *end = memmem(buf, len, "\r\n\r\n", 4);
    if (!end) return 0;
    size_t head = end - buf + 4;
    char *field = memmem(buf, head, "Content-Length:", 15);
    if (!field) field = memmem(buf, head, "content-length:", 15);
    if (!field) return 0;
    return len >= head + (size_t)strtoul(field + 15, NULL, 10);
}
#endif
