/*
 * The floor for scripts/bench's pinned hot-hit scenario: what one core of this machine
 * takes to answer HTTP/1.1 keep-alive GETs with a prebuilt response when nothing but the
 * kernel's work stands in the way. One thread, one epoll set, level-triggered; every
 * request (up to its blank line) is answered with the same bytes: a status line, three
 * headers and the body read from FILE at start.
 *
 *   hitfloor FILE        prints the port, then serves until killed
 *
 * With HOLD_MS, the floor of the cold-coalescing scenario instead: no request is answered
 * until HOLD_MS after the first one came in, then every request that came in by then is
 * answered at once, as a proxy whose origin has just answered would. It prints the
 * CLOCK_MONOTONIC second at which it began to answer, once per hold.
 *
 *   hitfloor FILE HOLD_MS
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "benchlisten.h"

#define MAX_FDS 65536

static char *response;
static size_t response_length;
static unsigned char line_end[MAX_FDS];  /* how much of "\r\n\r\n" the connection's last read ended in */
static int held[MAX_FDS];                /* requests in and not yet answered (hold mode) */
static int hold_ms;

static void send_answers(int fd, int requests);

static void answer(int fd, const char *data, int length) {
    /* Count the requests that ended in this read (a pipelined read may hold several). */
    int state = line_end[fd], requests = 0;
    for (int i = 0; i < length; i++) {
        char c = data[i];
        if (c == '\r') state = state == 2 ? 3 : 1;
        else if (c == '\n' && state == 1) state = 2;
        else if (c == '\n' && state == 3) { requests++; state = 0; }
        else state = 0;
    }
    line_end[fd] = (unsigned char)state;
    if (hold_ms > 0) { held[fd] += requests; return; }
    send_answers(fd, requests);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void send_answers(int fd, int requests) {
    for (int i = 0; i < requests; i++) {
        size_t sent = 0;
        while (sent < response_length) {
            ssize_t n = send(fd, response + sent, response_length - sent, MSG_NOSIGNAL);
            if (n <= 0) return;  /* a client that stopped reading: wrk never does */
            sent += (size_t)n;
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) { fprintf(stderr, "usage: hitfloor FILE [HOLD_MS]\n"); return 2; }
    hold_ms = argc == 3 ? atoi(argv[2]) : 0;
    int file = open(argv[1], O_RDONLY);
    struct stat info;
    if (file < 0 || fstat(file, &info) != 0) { perror(argv[1]); return 1; }
    char head[256];
    int head_length = snprintf(head, sizeof head,
        "HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: %lld\r\nCache-Control: public, max-age=86400\r\n\r\n",
        (long long)info.st_size);
    response_length = (size_t)head_length + (size_t)info.st_size;
    response = malloc(response_length);
    memcpy(response, head, (size_t)head_length);
    if (read(file, response + head_length, (size_t)info.st_size) != info.st_size) { perror("read"); return 1; }
    close(file);

    int listener = listen_on_loopback(SOCK_NONBLOCK), one = 1;
    if (listener < 0) return 1;

    int epoll = epoll_create1(0);
    struct epoll_event event = { .events = EPOLLIN, .data.fd = listener };
    epoll_ctl(epoll, EPOLL_CTL_ADD, listener, &event);
    struct epoll_event ready[256];
    static char buffer[65536];
    double deadline = 0;  /* hold mode: when the held requests are answered; 0 while none is held */
    for (;;) {
        int timeout = -1;
        if (deadline > 0) {
            double left = deadline - now();
            timeout = left > 0 ? (int)(left * 1000) + 1 : 0;
        }
        int count = epoll_wait(epoll, ready, 256, timeout);
        if (deadline > 0 && now() >= deadline) {
            printf("%.6f\n", now());
            fflush(stdout);
            for (int fd = 0; fd < MAX_FDS; fd++)
                if (held[fd] > 0) { send_answers(fd, held[fd]); held[fd] = 0; }
            deadline = 0;
        }
        for (int i = 0; i < count; i++) {
            int fd = ready[i].data.fd;
            if (fd == listener) {
                int client;
                while ((client = accept4(listener, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    if (client >= MAX_FDS) { close(client); continue; }
                    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    line_end[client] = 0;
                    held[client] = 0;
                    struct epoll_event add = { .events = EPOLLIN, .data.fd = client };
                    epoll_ctl(epoll, EPOLL_CTL_ADD, client, &add);
                }
                continue;
            }
            ssize_t n = recv(fd, buffer, sizeof buffer, 0);
            if (n <= 0) {
                held[fd] = 0;
                epoll_ctl(epoll, EPOLL_CTL_DEL, fd, NULL);
                close(fd);
                continue;
            }
            answer(fd, buffer, (int)n);
            if (hold_ms > 0 && held[fd] > 0 && deadline == 0) deadline = now() + hold_ms / 1000.0;
        }
    }
}
