/*
 * The libmicrohttpd floor for scripts/bench's pinned hot-hit scenario: libmicrohttpd as
 * thumbd runs it (epoll, internal threads, suspend/resume allowed, the same connection
 * memory limit), answering every request with one prebuilt response of the body read from
 * FILE at start, on the second call of the access handler (answering on the first costs
 * keep-alive). What any server built on libmicrohttpd 0.9.75 pays before doing any work.
 *
 *   mhdfloor FILE THREADS   prints the port, then serves until killed
 */
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static struct MHD_Response *response;
static int started;

static enum MHD_Result answer(void *cls, struct MHD_Connection *connection, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **slot) {
    (void)cls; (void)url; (void)method; (void)version; (void)upload; (void)upload_size;
    if (*slot == NULL) { *slot = &started; return MHD_YES; }
    return MHD_queue_response(connection, MHD_HTTP_OK, response);
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: mhdfloor FILE THREADS\n"); return 2; }
    FILE *file = fopen(argv[1], "rb");
    struct stat info;
    if (!file || stat(argv[1], &info) != 0) { perror(argv[1]); return 1; }
    char *body = malloc((size_t)info.st_size);
    if (fread(body, 1, (size_t)info.st_size, file) != (size_t)info.st_size) { perror("read"); return 1; }
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
