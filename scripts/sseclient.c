/*
 * A minimal event-stream client for scripts/bench: N connections to one thumbd event
 * stream, one epoll loop, CLOCK_MONOTONIC (the clock the origin's timestamps use too).
 * Prints "ready" once every stream has its head, then one line per stream: the time its
 * "event: done" arrived (seconds). Written in C so that the client is not what the
 * delivery figure measures; the Python client was (a plain socket server fanning one
 * message out to 1000 sockets measured p99 20 ms with it).
 *
 *   sseclient PORT PATH N
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct stream { int fd; char buf[8192]; size_t len; int ready; double done; };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: sseclient PORT PATH N\n"); return 2; }
    int port = atoi(argv[1]), n = atoi(argv[3]);
    struct rlimit limit;
    getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    struct stream *s = calloc(n, sizeof *s);
    int ep = epoll_create1(0);
    char request[2048];
    int length = snprintf(request, sizeof request,
        "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n", argv[2]);
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(port) };
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    for (int i = 0; i < n; i++) {
        s[i].fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(s[i].fd, (struct sockaddr *)&addr, sizeof addr) != 0) { perror("connect"); return 1; }
        if (write(s[i].fd, request, length) != length) { perror("write"); return 1; }
        struct epoll_event ev = { .events = EPOLLIN, .data.u32 = i };
        epoll_ctl(ep, EPOLL_CTL_ADD, s[i].fd, &ev);
    }
    int ready = 0, done = 0, announced = 0;
    double deadline = now() + 60;
    struct epoll_event events[256];
    while (done < n && now() < deadline) {
        int k = epoll_wait(ep, events, 256, 1000);
        double t = now();
        for (int e = 0; e < k; e++) {
            struct stream *x = &s[events[e].data.u32];
            ssize_t got = read(x->fd, x->buf + x->len, sizeof x->buf - x->len - 1);
            if (got <= 0) { epoll_ctl(ep, EPOLL_CTL_DEL, x->fd, NULL); continue; }
            x->len += got;
            x->buf[x->len] = 0;
            if (!x->ready && strstr(x->buf, "retry:")) { x->ready = 1; ready++; }
            if (x->done == 0 && strstr(x->buf, "event: done")) { x->done = t; done++; }
            if (x->len > sizeof x->buf - 1024) {  /* keep the tail only */
                memmove(x->buf, x->buf + x->len - 512, 512);
                x->len = 512;
            }
        }
        if (!announced && ready == n) { printf("ready\n"); fflush(stdout); announced = 1; }
    }
    for (int i = 0; i < n; i++) printf("%.9f\n", s[i].done);
    return done == n ? 0 : 1;
}
