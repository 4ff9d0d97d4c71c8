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

/// Receives MHD's formatted error messages.
typedef void (*thumbd_mhd_log_fn)(void *ctx, const char *message);
struct thumbd_mhd_logger { thumbd_mhd_log_fn fn; void *ctx; };

static void thumbd_mhd_log_trampoline(void *cls, const char *fmt, va_list ap) {
    struct thumbd_mhd_logger *logger = (struct thumbd_mhd_logger *)cls;
    char buffer[512];
    vsnprintf(buffer, sizeof buffer, fmt, ap);
    if (logger && logger->fn) logger->fn(logger->ctx, buffer);
}

/// MHD_start_daemon with its options spelled out. The external logger comes first, as MHD requires.
static inline struct MHD_Daemon *thumbd_mhd_start(
    unsigned int flags, const struct sockaddr *address,
    MHD_AccessHandlerCallback handler, void *handler_cls,
    MHD_RequestCompletedCallback completed, void *completed_cls,
    MHD_NotifyConnectionCallback notify_connection, void *(*uri_log)(void *, const char *, struct MHD_Connection *),
    void *guard_cls,
    struct thumbd_mhd_logger *logger,
    unsigned int thread_pool_size, unsigned int connection_limit,
    unsigned int listen_backlog, unsigned int connection_timeout_s,
    size_t connection_memory_limit) {
    struct MHD_OptionItem options[] = {
        { MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)&thumbd_mhd_log_trampoline, logger },
        { MHD_OPTION_SOCK_ADDR, 0, (void *)address },
        { MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)completed, completed_cls },
        { MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)notify_connection, guard_cls },
        { MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)uri_log, guard_cls },
        { MHD_OPTION_THREAD_POOL_SIZE, (intptr_t)thread_pool_size, NULL },
        { MHD_OPTION_CONNECTION_LIMIT, (intptr_t)connection_limit, NULL },
        { MHD_OPTION_LISTEN_BACKLOG_SIZE, (intptr_t)listen_backlog, NULL },
        { MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)connection_timeout_s, NULL },
        { MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)connection_memory_limit, NULL },
        { MHD_OPTION_END, 0, NULL },
    };
    return MHD_start_daemon(flags, 0, NULL, NULL, handler, handler_cls,
                            MHD_OPTION_ARRAY, options, MHD_OPTION_END);
}

static inline int thumbd_mhd_connection_fd(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info ? info->connect_fd : -1;
}

static inline uint16_t thumbd_mhd_bind_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : 0;
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

// Watching suspended connections' sockets (MHD does not poll them): for the client hanging
// up, and, when asked, for room to write. epoll_event is a packed struct that Swift
// imports poorly, hence these wrappers.
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
/// The wake-up eventfd, watched for input (not one shot).
static inline int thumbd_watch_add_wakeup(int epfd, int fd) {
    struct epoll_event event;
    event.events = EPOLLIN;
    event.data.u64 = 0;
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
