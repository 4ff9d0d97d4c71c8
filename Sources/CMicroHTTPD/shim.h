// Typed wrappers for the variadic parts of libmicrohttpd that Swift cannot call.
#ifndef THUMBD_CMICROHTTPD_SHIM_H
#define THUMBD_CMICROHTTPD_SHIM_H
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <microhttpd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>

/// Receives MHD's formatted error messages.
typedef void (*thumbd_mhd_log_fn)(void *ctx, const char *message);
struct thumbd_mhd_logger { thumbd_mhd_log_fn fn; void *ctx; };

static void thumbd_mhd_log_trampoline(void *cls, const char *fmt, va_list ap) {
    struct thumbd_mhd_logger *logger = (struct thumbd_mhd_logger *)cls;
    char buffer[512];
    vsnprintf(buffer, sizeof buffer, fmt, ap);
    if (logger && logger->fn) logger->fn(logger->ctx, buffer);
}

/// MHD_start_daemon with its options spelled out, for a daemon that one thread of ours runs
/// (no internal thread: `MHD_run` on the event loop) and that has no listening socket
/// (`MHD_USE_NO_LISTEN_SOCKET` among `flags`): its loop accepts, and hands it each connection
/// (`thumbd_mhd_add`). The external logger comes first, as MHD requires.
static inline struct MHD_Daemon *thumbd_mhd_start(
    unsigned int flags,
    MHD_AccessHandlerCallback handler, void *handler_cls,
    MHD_RequestCompletedCallback completed, void *completed_cls,
    MHD_NotifyConnectionCallback notify_connection, void *(*uri_log)(void *, const char *, struct MHD_Connection *),
    void *guard_cls,
    struct thumbd_mhd_logger *logger,
    unsigned int connection_limit, unsigned int connection_timeout_s,
    size_t connection_memory_limit) {
    struct MHD_OptionItem options[] = {
        { MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)&thumbd_mhd_log_trampoline, logger },
        { MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)completed, completed_cls },
        { MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)notify_connection, guard_cls },
        { MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)uri_log, guard_cls },
        { MHD_OPTION_CONNECTION_LIMIT, (intptr_t)connection_limit, NULL },
        { MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)connection_timeout_s, NULL },
        { MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)connection_memory_limit, NULL },
        { MHD_OPTION_END, 0, NULL },
    };
    return MHD_start_daemon(flags, 0, NULL, NULL, handler, handler_cls,
                            MHD_OPTION_ARRAY, options, MHD_OPTION_END);
}

/// A non-blocking listening socket (SO_REUSEADDR, IPv6 only for an IPv6 address), as
/// libmicrohttpd would make it; every event loop accepts from it. -1 with errno set when it
/// cannot be bound.
static inline int thumbd_listen(const struct sockaddr *address, socklen_t length, int backlog) {
    int fd = socket(address->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -1;
    int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (address->sa_family == AF_INET6) (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, address, length) != 0 || listen(fd, backlog) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

/// The port a socket is bound to (0 if it cannot be read).
static inline uint16_t thumbd_socket_port(int fd) {
    struct sockaddr_storage address;
    socklen_t length = sizeof address;
    if (getsockname(fd, (struct sockaddr *)&address, &length) != 0) return 0;
    if (address.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&address)->sin_port);
    if (address.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&address)->sin6_port);
    return 0;
}

/// glibc declares it only under _GNU_SOURCE, which the Glibc module is built without.
extern int accept4(int fd, struct sockaddr *address, socklen_t *length, int flags);

/// Accepts one waiting connection, non-blocking and close-on-exec as libmicrohttpd's own
/// accept makes it, with the client's address. -1 with errno set (EAGAIN: none waiting).
static inline int thumbd_accept(int listen_fd, struct sockaddr_storage *address, socklen_t *length) {
    *length = sizeof *address;
    return accept4(listen_fd, (struct sockaddr *)address, length, SOCK_NONBLOCK | SOCK_CLOEXEC);
}

/// Hands an accepted connection to a daemon, which from now on owns the socket: it closes
/// it when it cannot take it (over its connection limit, no memory). 0 when taken.
static inline int thumbd_mhd_add(struct MHD_Daemon *daemon, int fd, const struct sockaddr_storage *address,
                                 socklen_t length) {
    return MHD_add_connection(daemon, fd, (const struct sockaddr *)address, length) == MHD_YES ? 0 : -1;
}

/// The daemon's own epoll set, which the event loop waits on among its other sockets.
static inline int thumbd_mhd_epoll_fd(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_EPOLL_FD);
    return info ? info->epoll_fd : -1;
}

/// How long the loop may wait before `MHD_run` is due (ms), or -1 when MHD has no deadline.
static inline int64_t thumbd_mhd_timeout_ms(struct MHD_Daemon *daemon) {
    MHD_UNSIGNED_LONG_LONG timeout = 0;
    if (MHD_get_timeout(daemon, &timeout) != MHD_YES) return -1;
    return timeout > INT32_MAX ? INT32_MAX : (int64_t)timeout;
}

static inline int thumbd_mhd_connection_fd(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info ? info->connect_fd : -1;
}

static const uint64_t thumbd_mhd_size_unknown = MHD_SIZE_UNKNOWN;

/// Answers a connection that libmicrohttpd cannot answer itself (over the connection limit,
/// a query its pool cannot hold, past its deadline): writes `response` if the socket takes
/// it without blocking, then shuts the socket down, so that MHD sees the end of the stream
/// and closes the connection through its own path. The fd stays MHD's to close.
static inline void thumbd_refuse_connection(int fd, const char *response, size_t length) {
    if (length > 0) (void)send(fd, response, length, MSG_DONTWAIT | MSG_NOSIGNAL);
    shutdown(fd, SHUT_RDWR);
}

// The event loop's epoll set: its wake-up eventfd, its daemon's epoll set, the listening
// socket, and the sockets of suspended connections (MHD does not poll them): for the client
// hanging up, and, when asked, for room to write. epoll_event is a packed struct that Swift imports poorly, hence
// these wrappers.
static inline int thumbd_watch_create(void) { return epoll_create1(EPOLL_CLOEXEC); }
static inline int thumbd_watch_eventfd(void) { return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }
static inline int thumbd_watch_ctl(int epfd, int op, int fd, uint64_t token, int writable) {
    struct epoll_event event;
    event.events = EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLONESHOT | (writable ? EPOLLOUT : 0);
    event.data.u64 = token;
    return epoll_ctl(epfd, op, fd, &event);
}
/// Watches `fd` for a hang-up (one shot).
static inline int thumbd_watch_add(int epfd, int fd, uint64_t token) {
    return thumbd_watch_ctl(epfd, EPOLL_CTL_ADD, fd, token, 0);
}
/// Re-arms a watched `fd` (a one-shot watch is disarmed once it has fired).
static inline int thumbd_watch_rearm(int epfd, int fd, uint64_t token, int writable) {
    return thumbd_watch_ctl(epfd, EPOLL_CTL_MOD, fd, token, writable);
}
static inline int thumbd_watch_remove(int epfd, int fd) {
    struct epoll_event event = {0};
    return epoll_ctl(epfd, EPOLL_CTL_DEL, fd, &event);
}
/// A descriptor watched for input, level-triggered, not one shot (the wake-up eventfd, the
/// daemon's epoll set), under a small token of its own.
static inline int thumbd_watch_add_input(int epfd, int fd, uint64_t token) {
    struct epoll_event event;
    event.events = EPOLLIN;
    event.data.u64 = token;
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event);
}
/// The listening socket, which every loop's set holds: EPOLLEXCLUSIVE, so that a new
/// connection wakes one waiting loop and not every one (level-triggered, not one shot).
static inline int thumbd_watch_listener(int epfd, int fd, uint64_t token) {
    struct epoll_event event;
    event.events = EPOLLIN | EPOLLEXCLUSIVE;
    event.data.u64 = token;
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event);
}
/// Waits for events; writes up to `max` tokens, and for each whether it was a hang-up (1)
/// or room to write (0). Returns their count, or -1 (errno set).
static inline int thumbd_watch_wait(int epfd, uint64_t *tokens, int32_t *hangups, int max, int timeout_ms) {
    struct epoll_event events[64];
    if (max > 64) max = 64;
    int n = epoll_wait(epfd, events, max, timeout_ms);
    for (int i = 0; i < n; i++) {
        tokens[i] = events[i].data.u64;
        hangups[i] = (events[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0;
    }
    return n;
}
#endif
