/*
 * What the C servers of scripts/bench share (the floors): a listening socket on an ephemeral
 * loopback port, whose number is printed on stdout for the bench to read.
 */
#ifndef THUMBD_BENCHLISTEN_H
#define THUMBD_BENCHLISTEN_H
#include <arpa/inet.h>
#include <stdio.h>
#include <sys/socket.h>

/* A socket listening on 127.0.0.1 (`flags`: SOCK_NONBLOCK or 0), its port printed; -1 on error. */
static int listen_on_loopback(int flags) {
    int listener = socket(AF_INET, SOCK_STREAM | flags, 0), one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in address = { .sin_family = AF_INET };
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    socklen_t size = sizeof address;
    if (bind(listener, (struct sockaddr *)&address, size) != 0 || listen(listener, 4096) != 0) { perror("listen"); return -1; }
    getsockname(listener, (struct sockaddr *)&address, &size);
    printf("%d\n", ntohs(address.sin_port));
    fflush(stdout);
    return listener;
}
#endif
