/*
 * The floor for scripts/bench's delivery scenario: what this machine takes to get one
 * event to N event-stream clients when nothing but the writes stands in the way. Accepts N
 * connections, answers each with an event-stream head, then, on a line on stdin, prints
 * the time (CLOCK_MONOTONIC, seconds) and writes one done-sized event to every socket from
 * THREADS threads. scripts/sseclient.c measures the arrivals, as it does for thumbd.
 *
 *   ssefloor N THREADS      prints the port, then the start time after "go"
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "benchlisten.h"

static const char *event =
    "id: 1\nevent: done\ndata: {\"index\":0,\"id\":null,\"url\":\"http://127.0.0.1:40000/gate/deliver-1000\","
    "\"src\":\"/thumb?url=http%3A%2F%2F127.0.0.1%3A40000%2Fgate%2Fdeliver-1000\",\"status\":200,"
    "\"bytes\":12288,\"contentType\":\"image/jpeg\",\"cache\":\"miss\",\"ms\":300}\n\n";
static int *fds, count, threads;

static void *writer(void *arg) {
    long lane = (long)arg;
    size_t length = strlen(event);
    for (int i = (int)lane; i < count; i += threads) send(fds[i], event, length, MSG_NOSIGNAL);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: ssefloor N THREADS\n"); return 2; }
    count = atoi(argv[1]);
    threads = atoi(argv[2]);
    struct rlimit limit;
    getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    int listener = listen_on_loopback(0), one = 1;
    if (listener < 0) return 1;
    fds = calloc(count, sizeof *fds);
    char buffer[4096];
    const char *head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\nretry: 3000\n\n";
    for (int i = 0; i < count; i++) {
        fds[i] = accept(listener, NULL, NULL);
        if (fds[i] < 0) { perror("accept"); return 1; }
        setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (read(fds[i], buffer, sizeof buffer) <= 0 || write(fds[i], head, strlen(head)) < 0) { perror("head"); return 1; }
    }
    if (!fgets(buffer, sizeof buffer, stdin)) return 1;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    pthread_t workers[64];
    if (threads < 1 || threads > 64) threads = 1;
    for (long lane = 0; lane < threads; lane++) pthread_create(&workers[lane], NULL, writer, (void *)lane);
    for (int lane = 0; lane < threads; lane++) pthread_join(workers[lane], NULL);
    printf("%.9f\n", now.tv_sec + now.tv_nsec / 1e9);
    fflush(stdout);
    if (!fgets(buffer, sizeof buffer, stdin)) return 0;  /* the parent closing stdin ends us */
    return 0;
}
