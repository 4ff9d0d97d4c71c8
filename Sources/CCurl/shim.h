// Typed wrappers for libcurl's variadic setopt/getinfo, which Swift cannot call.
#ifndef THUMBD_CCURL_SHIM_H
#define THUMBD_CCURL_SHIM_H
#include <curl/curl.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <errno.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

typedef size_t (*thumbd_curl_data_fn)(char *data, size_t size, size_t count, void *user);
typedef int (*thumbd_curl_xferinfo_fn)(void *user, curl_off_t dltotal, curl_off_t dlnow,
                                       curl_off_t ultotal, curl_off_t ulnow);
typedef int (*thumbd_curl_prereq_fn)(void *user, char *primary_ip, char *local_ip,
                                     int primary_port, int local_port);

typedef curl_socket_t (*thumbd_curl_opensocket_fn)(void *user, curlsocktype purpose,
                                                    struct curl_sockaddr *address);

static inline CURLcode thumbd_curl_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode thumbd_curl_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode thumbd_curl_setopt_str(CURL *h, CURLoption o, const char *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode thumbd_curl_setopt_ptr(CURL *h, CURLoption o, void *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode thumbd_curl_setopt_datafn(CURL *h, CURLoption o, thumbd_curl_data_fn f) { return curl_easy_setopt(h, o, f); }
static inline CURLcode thumbd_curl_setopt_xferinfofn(CURL *h, thumbd_curl_xferinfo_fn f) { return curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, f); }
static inline CURLcode thumbd_curl_setopt_prereqfn(CURL *h, thumbd_curl_prereq_fn f) { return curl_easy_setopt(h, CURLOPT_PREREQFUNCTION, f); }

static inline CURLcode thumbd_curl_setopt_opensocketfn(CURL *h, thumbd_curl_opensocket_fn f) { return curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, f); }

/// The IP address curl is about to connect to, before any socket exists: copies its 4 or 16
/// bytes into `out` and returns 4 or 16; 0 for any other family.
static inline int thumbd_curl_sockaddr_ip(const struct curl_sockaddr *a, unsigned char out[16]) {
    if (a->family == AF_INET && a->addrlen >= sizeof(struct sockaddr_in)) {
        memcpy(out, &((const struct sockaddr_in *)&a->addr)->sin_addr, 4);
        return 4;
    }
    if (a->family == AF_INET6 && a->addrlen >= sizeof(struct sockaddr_in6)) {
        memcpy(out, &((const struct sockaddr_in6 *)&a->addr)->sin6_addr, 16);
        return 16;
    }
    return 0;
}
/// The socket curl would have made itself (close-on-exec added).
static inline curl_socket_t thumbd_curl_open_socket(const struct curl_sockaddr *a) {
    return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}
static const curl_socket_t thumbd_curl_socket_bad = CURL_SOCKET_BAD;

static inline CURLcode thumbd_curl_getinfo_long(CURL *h, CURLINFO i, long *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode thumbd_curl_getinfo_off(CURL *h, CURLINFO i, curl_off_t *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode thumbd_curl_getinfo_str(CURL *h, CURLINFO i, char **v) { return curl_easy_getinfo(h, i, v); }

static inline CURLMcode thumbd_curl_multi_setopt_long(CURLM *m, CURLMoption o, long v) { return curl_multi_setopt(m, o, v); }

typedef int (*thumbd_curl_socket_fn)(CURL *easy, curl_socket_t socket, int what, void *user, void *socket_user);
typedef int (*thumbd_curl_timer_fn)(CURLM *multi, long timeout_ms, void *user);
static inline CURLMcode thumbd_curl_multi_setopt_ptr(CURLM *m, CURLMoption o, void *v) { return curl_multi_setopt(m, o, v); }
static inline CURLMcode thumbd_curl_multi_setopt_socketfn(CURLM *m, thumbd_curl_socket_fn f) { return curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, f); }
static inline CURLMcode thumbd_curl_multi_setopt_timerfn(CURLM *m, thumbd_curl_timer_fn f) { return curl_multi_setopt(m, CURLMOPT_TIMERFUNCTION, f); }
static const curl_socket_t thumbd_curl_socket_timeout = CURL_SOCKET_TIMEOUT;

// The multi handle's sockets in one epoll set (curl's multi_socket interface), with an
// eventfd to wake the loop. `struct epoll_event` is packed on x86-64, hence C.
static inline int thumbd_curl_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }
static inline int thumbd_curl_eventfd(void) { return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }
static inline void thumbd_curl_eventfd_signal(int fd) { uint64_t one = 1; (void)!write(fd, &one, sizeof one); }
static inline void thumbd_curl_eventfd_drain(int fd) { uint64_t n; (void)!read(fd, &n, sizeof n); }
/// Watches `fd` as curl asks (CURL_POLL_IN, _OUT, _INOUT; level-triggered), or stops
/// watching it (CURL_POLL_REMOVE). `known`: the fd is in the set already (curl passes the
/// pointer `curl_multi_assign` gave it until its CURL_POLL_REMOVE), so one epoll_ctl
/// suffices; the other operation is only a fallback. Returns 0, or -1 with errno.
static inline int thumbd_curl_epoll_watch(int epfd, int fd, int what, int known) {
    struct epoll_event event = {0};
    if (what == CURL_POLL_REMOVE) {
        int rc = epoll_ctl(epfd, EPOLL_CTL_DEL, fd, &event);
        return (rc != 0 && (errno == ENOENT || errno == EBADF)) ? 0 : rc;  /* already gone */
    }
    event.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0);
    event.data.fd = fd;
    if (known) {
        int rc = epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &event);
        return (rc != 0 && errno == ENOENT) ? epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event) : rc;
    }
    int rc = epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &event);
    return (rc != 0 && errno == EEXIST) ? epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &event) : rc;
}
/// Waits; writes up to `max` ready descriptors and, for each, curl's CURL_CSELECT_* bits.
/// Returns their count, or -1 (errno set).
static inline int thumbd_curl_epoll_wait(int epfd, int *fds, int *bits, int max, int timeout_ms) {
    struct epoll_event events[128];
    if (max > 128) max = 128;
    int n = epoll_wait(epfd, events, max, timeout_ms);
    for (int i = 0; i < n; i++) {
        fds[i] = events[i].data.fd;
        bits[i] = ((events[i].events & EPOLLIN) ? CURL_CSELECT_IN : 0)
                | ((events[i].events & EPOLLOUT) ? CURL_CSELECT_OUT : 0)
                | ((events[i].events & (EPOLLERR | EPOLLHUP)) ? CURL_CSELECT_ERR : 0);
    }
    return n;
}

static const long thumbd_curl_global_all = CURL_GLOBAL_ALL;
static const long thumbd_curl_prereq_ok = CURL_PREREQFUNC_OK;
// A write callback's answer that pauses the transfer (curl keeps the bytes it offered), and
// the call that lets it go on: both are macros Swift cannot see.
static const size_t thumbd_curl_writefunc_pause = CURL_WRITEFUNC_PAUSE;
static inline CURLcode thumbd_curl_resume(CURL *easy) { return curl_easy_pause(easy, CURLPAUSE_CONT); }
static const long thumbd_curl_prereq_abort = CURL_PREREQFUNC_ABORT;
static const long thumbd_curl_http_version_2tls = CURL_HTTP_VERSION_2TLS;
static const long thumbd_curl_pipe_multiplex = CURLPIPE_MULTIPLEX;
#endif
