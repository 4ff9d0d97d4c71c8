/*
 * The libmicrohttpd floor for scripts/bench's pinned hot-hit scenario: libmicrohttpd as
 * thumbd runs it (epoll, internal threads, suspend/resume allowed, the same connection
 * memory limit), answering every request with one prebuilt response of the body read from
 * FILE at start, on the second call of the access handler (answering on the first costs
 * keep-alive). What any server built on libmicrohttpd 0.9.75 pays before doing any work.
 * With `fresh`, each answer is a response of its own with a hot hit's headers (ETag,
 * Cache-Control, X-Thumbd-Cache, Last-Modified, Content-Type, X-Content-Type-Options, a
 * new X-Request-Id, Server): what a server pays whose answers differ per request, as
 * thumbd's do (its request id, its remaining max-age), before any work of its own.
 *
 *   mhdfloor FILE THREADS [fresh]   prints the port, then serves until killed
 */
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static struct MHD_Response *response;
static int started;
static int fresh;
static char *body;
static size_t body_size;
static unsigned long long answered;

static enum MHD_Result answer(void *cls, struct MHD_Connection *connection, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **slot) {
    (void)cls; (void)url; (void)method; (void)version; (void)upload; (void)upload_size;
    if (*slot == NULL) { *slot = &started; return MHD_YES; }
    if (!fresh) return MHD_queue_response(connection, MHD_HTTP_OK, response);
    struct MHD_Response *own = MHD_create_response_from_buffer(body_size, body, MHD_RESPMEM_PERSISTENT);
    char id[32], age[64];
    snprintf(id, sizeof id, "%015llx", __atomic_add_fetch(&answered, 1, __ATOMIC_RELAXED));
    snprintf(age, sizeof age, "public, max-age=%d", 86400);
    MHD_add_response_header(own, "ETag", "\"5d41402abc4b2a76b9719d911017c592\"");
    MHD_add_response_header(own, "Cache-Control", age);
    MHD_add_response_header(own, "X-Thumbd-Cache", "hit");
    MHD_add_response_header(own, "Last-Modified", "Fri, 27 Nov 2026 10:00:00 GMT");
    MHD_add_response_header(own, "Content-Type", "image/jpeg");
    MHD_add_response_header(own, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(own, "X-Request-Id", id);
    MHD_add_response_header(own, "Server", "thumbd");
    enum MHD_Result result = MHD_queue_response(connection, MHD_HTTP_OK, own);
    MHD_destroy_response(own);
    return result;
}

int main(int argc, char **argv) {
    if (argc != 3 && !(argc == 4 && strcmp(argv[3], "fresh") == 0)) {
        fprintf(stderr, "usage: mhdfloor FILE THREADS [fresh]\n");
        return 2;
    }
    fresh = argc == 4;
    FILE *file = fopen(argv[1], "rb");
    struct stat info;
    if (!file || stat(argv[1], &info) != 0) { perror(argv[1]); return 1; }
    body_size = (size_t)info.st_size;
    body = malloc(body_size);
    if (fread(body, 1, body_size, file) != body_size) { perror("read"); return 1; }
    fclose(file);
    response = MHD_create_response_from_buffer((size_t)info.st_size, body, MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(response, "Content-Type", "image/jpeg");
    MHD_add_response_header(response, "Cache-Control", "public, max-age=86400");
    struct MHD_Daemon *daemon = MHD_start_daemon(
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME, 0, NULL, NULL, answer, NULL,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)atoi(argv[2]),
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)10000,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)8192,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned int)4096, MHD_OPTION_END);
    if (!daemon) { fprintf(stderr, "cannot start\n"); return 1; }
    printf("%u\n", (unsigned)MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT)->port);
    fflush(stdout);
    for (;;) pause();
}
