/*
 * The libmicrohttpd floor for scripts/bench's event-stream memory: libmicrohttpd as thumbd
 * runs it (epoll, a pool of THREADS, suspend/resume, the same per-connection memory limit,
 * a streamed chunked response with a 256-byte block), answering every request with an
 * event-stream head and a `retry:` line, then holding the stream open, suspended, with
 * nothing else: what each open stream costs before a server built on libmicrohttpd 0.9.75
 * keeps anything of its own. With `thumbd`, the answer is libmicrohttpd's part of thumbd's:
 * the five headers thumbd sends on an event stream (each one three allocations that
 * libmicrohttpd holds for the stream's life) and the 1-byte block it streams HTTP/1.1 with.
 *
 *   mhdstreams POOL_BYTES THREADS [thumbd]   prints the port, then serves until killed
 */
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char hello[] = "retry: 3000\n\n";
static int started;
static int as_thumbd;

struct stream { struct MHD_Connection *connection; int sent; };

static ssize_t read_stream(void *cls, uint64_t pos, char *buf, size_t max) {
    struct stream *stream = cls;
    (void)pos;
    if (!stream->sent && max >= sizeof hello - 1) {
        memcpy(buf, hello, sizeof hello - 1);
        stream->sent = 1;
        return (ssize_t)(sizeof hello - 1);
    }
    MHD_suspend_connection(stream->connection);  /* nothing more to say: hold it */
    return 0;
}

static void free_stream(void *cls) { free(cls); }

static enum MHD_Result answer(void *cls, struct MHD_Connection *connection, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **slot) {
    (void)cls; (void)url; (void)method; (void)version; (void)upload; (void)upload_size;
    if (*slot == NULL) { *slot = &started; return MHD_YES; }
    struct stream *stream = calloc(1, sizeof *stream);
    stream->connection = connection;
    struct MHD_Response *response =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, as_thumbd ? 1 : 256, read_stream, stream, free_stream);
    if (as_thumbd) {
        static unsigned long next;
        char id[17];
        snprintf(id, sizeof id, "%07lx%08lx", 0xdb078f3UL, ++next);  /* as long as thumbd's ids */
        MHD_add_response_header(response, "Content-Type", "text/event-stream");
        MHD_add_response_header(response, "Cache-Control", "no-cache");
        MHD_add_response_header(response, "X-Accel-Buffering", "no");
        MHD_add_response_header(response, "X-Request-Id", id);
        MHD_add_response_header(response, "Server", "thumbd");
    } else {
        MHD_add_response_header(response, "Content-Type", "text/event-stream");
        MHD_add_response_header(response, "Cache-Control", "no-store");
    }
    enum MHD_Result result = MHD_queue_response(connection, MHD_HTTP_OK, response);
    MHD_destroy_response(response);
    return result;
}

int main(int argc, char **argv) {
    if (argc != 3 && !(argc == 4 && strcmp(argv[3], "thumbd") == 0)) {
        fprintf(stderr, "usage: mhdstreams POOL_BYTES THREADS [thumbd]\n");
        return 2;
    }
    as_thumbd = argc == 4;
    struct MHD_Daemon *daemon = MHD_start_daemon(
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME, 0, NULL, NULL, answer, NULL,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)atoi(argv[2]),
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)20000,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)atol(argv[1]),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)0,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned int)4096, MHD_OPTION_END);
    if (!daemon) { fprintf(stderr, "MHD_start_daemon failed\n"); return 1; }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    printf("%u\n", (unsigned)info->port);
    fflush(stdout);
    for (;;) pause();
}
