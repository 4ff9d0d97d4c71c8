/*
 * The burst client of scripts/bench: N connections to one server, all connected first,
 * then the same GET written on each as fast as the kernel takes it, and one epoll loop
 * that reads every answer whole (Content-Length). Prints one line per connection: its
 * status and the milliseconds from the first request written to its answer complete.
 * In C so that the client is not what the figure measures: Python's loop reading 100
 * answers of 12 KB one after the other added several milliseconds to the median.
 *
 *   burst PORT PATH N
 */
#include "benchclient.h"
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

struct conn { int fd; char *buf; size_t len, cap; int status; double done; };

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: burst PORT PATH N\n"); return 2; }
    int port = atoi(argv[1]), n = atoi(argv[3]);
    char request[4096];
    int length = snprintf(request, sizeof request, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", argv[2]);
    struct conn *c = calloc(n, sizeof *c);
    int ep = epoll_create1(0);
    struct sockaddr_in address = { .sin_family = AF_INET, .sin_port = htons(port) };
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    for (int i = 0; i < n; i++) {
        c[i].fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(c[i].fd, (struct sockaddr *)&address, sizeof address) != 0) { perror("connect"); return 1; }
        c[i].cap = 65536;
        c[i].buf = malloc(c[i].cap);
        struct epoll_event event = { .events = EPOLLIN, .data.u32 = i };
        epoll_ctl(ep, EPOLL_CTL_ADD, c[i].fd, &event);
    }
    double start = now();
    for (int i = 0; i < n; i++) {
        if (write(c[i].fd, request, length) != length) { perror("write"); return 1; }
    }
    int left = n;
    struct epoll_event events[256];
    while (left > 0) {
        int ready = epoll_wait(ep, events, 256, 60000);
        if (ready <= 0) break;
        for (int e = 0; e < ready; e++) {
            struct conn *k = &c[events[e].data.u32];
            if (k->cap - k->len < 16384) { k->cap *= 2; k->buf = realloc(k->buf, k->cap); }
            ssize_t got = read(k->fd, k->buf + k->len, k->cap - k->len);
            if (got > 0) k->len += got;
            if (got <= 0 || response_complete(k->buf, k->len)) {
                k->done = now();
                k->status = k->len > 12 ? atoi(k->buf + 9) : 0;
                epoll_ctl(ep, EPOLL_CTL_DEL, k->fd, NULL);
                close(k->fd);
                left--;
            }
        }
    }
    for (int i = 0; i < n; i++) printf("%d %.3f\n", c[i].status, c[i].done > 0 ? (c[i].done - start) * 1000 : -1.0);
    return 0;
}
