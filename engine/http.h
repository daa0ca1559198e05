/*
 * http.h - a small HTTP server on libmicrohttpd for the worker's endpoint and
 * the console: one handler sees every request and fills a reply. Limits on
 * connections (in all, per client address, still reading a request), memory
 * per connection, body size (http_body_max), idle time and the time a
 * request may take to arrive keep slow or hostile clients from stalling it:
 * a probe sent while hundreds of connections trickle their headers in is
 * answered at once.
 *
 * Owns: the libmicrohttpd daemon with its one polling thread (every
 * connection, idle or not, is read there), a reaper thread, and up to
 * HTTP_HANDLERS_MAX handler threads, so a handler that waits (a long poll
 * of the /v1 API) holds up no other request.
 */
#ifndef CAIRN_HTTP_H
#define CAIRN_HTTP_H
#include <sys/socket.h>

#include "buf.h"

/* The largest request body taken; a larger one is cut off (body_too_big).
 * The /v1 API takes a run's input (at most 1 MiB) and its envelope. */
#define HTTP_BODY_MAX     (64 * 1024)
#define HTTP_API_BODY_MAX (1024 * 1024 + 64 * 1024)

/* Connections open at once, and from one client address. */
#define HTTP_CONN_MAX   512
#define HTTP_PER_IP_MAX 64
/* Of those, at most this many still reading a request: one more pushes out
 * the oldest, so the rest is always room for requests being answered and a
 * new one (a probe) gets in. */
#define HTTP_READING_MAX 448
/* A connection waiting for a request is closed when its headers are not in
 * within HTTP_HEADERS_MS of its start (or of the last reply on it), or its
 * body within HTTP_REQUEST_MS; and when it sends nothing for HTTP_IDLE_S. */
#define HTTP_HEADERS_MS 10000
#define HTTP_REQUEST_MS 60000
#define HTTP_IDLE_S     10
#define HTTP_REAP_MS    250 /* how often the deadlines are looked at */
/* Requests answered at once (a thread each); more wait in turn. */
#define HTTP_HANDLERS_MAX 64

typedef struct http_request {
	const char *method, *path;
	const char *authorization; /* the Authorization header, or NULL */
	const char *body;          /* NUL-terminated; "" when there is none */
	size_t body_len;
	int body_too_big; /* the body was larger than http_body_max(path) */
	void *conn;       /* the server's, for http_header and http_query */
} http_request;

/* The largest body taken for a request to path. */
size_t http_body_max(const char *path);
/* A request header or query argument by name (case-insensitive for
 * headers), or NULL; valid during the handler. */
const char *http_header(const http_request *q, const char *name);
const char *http_query(const http_request *q, const char *name);
/* Calls fn for each query argument in order (value NULL for "?a"), until fn
 * returns non-zero; returns that, or 0. */
int http_query_each(const http_request *q,
                    int (*fn)(void *arg, const char *name, const char *value), void *arg);

typedef struct http_reply {
	unsigned status;   /* 404 unless the handler says otherwise */
	const char *type;  /* Content-Type; static text */
	const char *allow; /* an Allow header (with 405), or NULL */
	int bearer;        /* with 401: ask for a bearer token (WWW-Authenticate) */
	buf body;
	buf headers; /* more response headers, each "Name: value\n" */
} http_reply;

/* Called on one of the server's handler threads for every request, with
 * the whole request in. */
typedef void (*http_handler)(void *arg, const http_request *q, http_reply *r);

typedef struct http_server http_server;

/* Listens on sa; 0 with the bound port in *port, or -CAIRN_EINVAL. A
 * request whose Host header names anything but an IP address, localhost or
 * one of hosts (comma-separated names, copied; NULL: none) is answered 421
 * without reaching the handler (DNS rebinding: parse_host_allowed). */
int http_start(const struct sockaddr_storage *sa, const char *hosts, http_handler handler,
               void *arg, http_server **out, int *port);
void http_stop(http_server *s); /* waits for requests in progress */
#endif
