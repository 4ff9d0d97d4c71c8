// Typed wrappers for libcurl's variadic setopt/getinfo, which Swift cannot call.
#ifndef THUMBD_CCURL_SHIM_H
#define THUMBD_CCURL_SHIM_H
#include <curl/curl.h>

typedef size_t (*thumbd_curl_data_fn)(char *data, size_t size, size_t count, void *user);
typedef int (*thumbd_curl_xferinfo_fn)(void *user, curl_off_t dltotal, curl_off_t dlnow,
                                       curl_off_t ultotal, curl_off_t ulnow);
typedef int (*thumbd_curl_prereq_fn)(void *user, char *primary_ip, char *local_ip,
                                     int primary_port, int local_port);

static inline CURLcode thumbd_curl_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode thumbd_curl_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode thumbd_curl_setopt_str(CURL *h, CURLoption o, const char *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode thumbd_curl_setopt_ptr(CURL *h, CURLoption o, void *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode thumbd_curl_setopt_datafn(CURL *h, CURLoption o, thumbd_curl_data_fn f) { return curl_easy_setopt(h, o, f); }
static inline CURLcode thumbd_curl_setopt_xferinfofn(CURL *h, thumbd_curl_xferinfo_fn f) { return curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, f); }
static inline CURLcode thumbd_curl_setopt_prereqfn(CURL *h, thumbd_curl_prereq_fn f) { return curl_easy_setopt(h, CURLOPT_PREREQFUNCTION, f); }

static inline CURLcode thumbd_curl_getinfo_long(CURL *h, CURLINFO i, long *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode thumbd_curl_getinfo_off(CURL *h, CURLINFO i, curl_off_t *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode thumbd_curl_getinfo_str(CURL *h, CURLINFO i, char **v) { return curl_easy_getinfo(h, i, v); }

static inline CURLMcode thumbd_curl_multi_setopt_long(CURLM *m, CURLMoption o, long v) { return curl_multi_setopt(m, o, v); }

static const long thumbd_curl_global_all = CURL_GLOBAL_ALL;
static const long thumbd_curl_prereq_ok = CURL_PREREQFUNC_OK;
static const long thumbd_curl_prereq_abort = CURL_PREREQFUNC_ABORT;
static const long thumbd_curl_http_version_2tls = CURL_HTTP_VERSION_2TLS;
static const long thumbd_curl_pipe_multiplex = CURLPIPE_MULTIPLEX;
#endif
