/*
 * The fan-out client of scripts/bench: the request targets on standard input (one a line),
 * at most CONCURRENCY in flight, each on a new connection (Connection: close); a new one
 * starts as soon as one is answered whole (Content-Length), in one epoll loop. Prints one
 * line: the milliseconds from the first connect to the last answer, and how many requests
 * did not end in a 200 (errors, or left unanswered after 60 s without any progress).
 * With `times`, then one line per target, in input order: when its connect began and when
 * its answer was whole, in seconds of CLOCK_MONOTONIC (Python's time.monotonic()).
 * In C for the reason burst.c is: the Python loop was itself the slowest part of the chain,
 * taking a core's worth of the two that the proxy and the origin share with it, so every
 * proxy measured level with the origin alone.
 *
 *   fanout PORT CONCURRENCY [times] < targets
 */
#include "benchclient.h"
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

struct conn { int fd; char *buf; size_t len, cap; size_t target; };

static struct sockaddr_in address;
static int ep;

static double *began_at, *ended_at;

/* Connects slot `i` and writes the request for target number `n` on it; 0 on failure. */
static int start(struct conn *c, int i, const char *target, size_t n) {
    char request[16384];
    int length = snprintf(request, sizeof request, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", target);
    began_at[n] = now();
    c[i].target = n;
    c[i].fd = socket(AF_INET, SOCK_STREAM, 0);
    c[i].len = 0;
    if (c[i].fd < 0 || connect(c[i].fd, (struct sockaddr *)&address, sizeof address) != 0) { perror("connect"); return 0; }
    if (length >= (int)sizeof request || write(c[i].fd, request, length) != length) { perror("write"); return 0; }
    struct epoll_event event = { .events = EPOLLIN, .data.u32 = i };
    epoll_ctl(ep, EPOLL_CTL_ADD, c[i].fd, &event);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[3], "times") != 0)) {
        fprintf(stderr, "usage: fanout PORT CONCURRENCY [times] < targets\n");
        return 2;
    }
    int port = atoi(argv[1]), concurrency = atoi(argv[2]);
    size_t count = 0, room = 1024;
    char **targets = malloc(room * sizeof *targets), line[16384];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        if (!*line) continue;
        if (count == room) targets = realloc(targets, (room *= 2) * sizeof *targets);
        targets[count++] = strdup(line);
    }
    if (concurrency < 1 || count == 0) { fprintf(stderr, "fanout: nothing to do\n"); return 2; }
    address = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(port) };
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    ep = epoll_create1(0);
    struct conn *c = calloc(concurrency, sizeof *c);
    for (int i = 0; i < concurrency; i++) { c[i].cap = 65536; c[i].buf = malloc(c[i].cap); }
    size_t next = 0, answered = 0, ok = 0;
    began_at = calloc(count, sizeof *began_at);
    ended_at = calloc(count, sizeof *ended_at);
    double begun = now();
    for (int i = 0; i < concurrency && next < count; i++, next++) {
        if (!start(c, i, targets[next], next)) return 1;
    }
    struct epoll_event events[256];
    while (answered < next) {
        int ready = epoll_wait(ep, events, 256, 60000);
        if (ready <= 0) break;
        for (int e = 0; e < ready; e++) {
            int i = events[e].data.u32;
            struct conn *k = &c[i];
            if (k->cap - k->len < 16384) { k->cap *= 2; k->buf = realloc(k->buf, k->cap); }
            ssize_t got = read(k->fd, k->buf + k->len, k->cap - k->len);
            if (got > 0) k->len += got;
            if (got > 0 && !response_complete(k->buf, k->len)) continue;
            ended_at[k->target] = now();
            if (got > 0 && k->len >= 12 && memcmp(k->buf, "HTTP/1.1 200", 12) == 0) ok++;
            epoll_ctl(ep, EPOLL_CTL_DEL, k->fd, NULL);
            close(k->fd);
            answered++;
            if (next < count) {
                if (!start(c, i, targets[next], next)) return 1;
                next++;
            }
        }
    }
    printf("%.3f %zu\n", (now() - begun) * 1000, count - ok);
    if (argc == 4) {
        for (size_t n = 0; n < count; n++) printf("%.6f %.6f\n", began_at[n], ended_at[n]);
    }
    return 0;
}
