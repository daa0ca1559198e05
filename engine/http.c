/*
 * http.c - the HTTP server behind the worker's endpoints (see http.h):
 * libmicrohttpd with a thread per connection (so a long-polling request of
 * the /v1 API blocks only its own), every reply built by the handler into
 * a buffer and copied out, never cached.
 */
#include "http.h"

#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"

struct http_server {
	struct MHD_Daemon *d;
	http_handler handler;
	void *arg;
};

/* A request's body as it comes in; freed when the request completes. */
typedef struct upload {
	buf body;
	size_t max;
	int too_big;
} upload;

size_t http_body_max(const char *path)
{
	return strncmp(path, "/v1/", 4) == 0 ? HTTP_API_BODY_MAX : HTTP_BODY_MAX;
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                      enum MHD_RequestTerminationCode why)
{
	upload *u = *con_cls;
	if (u) {
		buf_free(&u->body);
		free(u);
		*con_cls = NULL;
	}
}

const char *http_header(const http_request *q, const char *name)
{
	return MHD_lookup_connection_value(q->conn, MHD_HEADER_KIND, name);
}

const char *http_query(const http_request *q, const char *name)
{
	return MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, name);
}

typedef struct query_walk {
	int (*fn)(void *arg, const char *name, const char *value);
	void *arg;
	int rc;
} query_walk;

static enum MHD_Result query_one(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
	query_walk *w = cls;
	w->rc = w->fn(w->arg, key, value);
	return w->rc ? MHD_NO : MHD_YES;
}

int http_query_each(const http_request *q,
                    int (*fn)(void *arg, const char *name, const char *value), void *arg)
{
	query_walk w = {fn, arg, 0};
	MHD_get_connection_values(q->conn, MHD_GET_ARGUMENT_KIND, query_one, &w);
	return w.rc;
}

/* The handler's extra headers, "Name: value\n" each; consumes h. */
static void add_headers(struct MHD_Response *resp, buf *h)
{
	char *s = h->data;
	while (s && *s) {
		char *nl = strchr(s, '\n'), *colon = strchr(s, ':');
		if (!nl || !colon || colon > nl)
			break;
		*nl = *colon = '\0';
		MHD_add_response_header(resp, s, colon + 2);
		s = nl + 1;
	}
	buf_free(h);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_size, void **con_cls)
{
	http_server *s = cls;
	upload *u = *con_cls;
	if (!u) { /* the headers: the body (if any) follows in more calls */
		if (!(u = calloc(1, sizeof *u)))
			return MHD_NO;
		u->max = http_body_max(url);
		*con_cls = u;
		return MHD_YES;
	}
	if (*upload_size) {
		if (u->body.len + *upload_size > u->max)
			u->too_big = 1;
		else
			buf_append(&u->body, upload_data, *upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	http_reply r = {404, "text/plain; charset=utf-8", NULL, 0, BUF_INIT, BUF_INIT};
	http_request q = {method,
	                  url,
	                  MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization"),
	                  buf_str(&u->body),
	                  u->body.len,
	                  u->too_big || u->body.oom,
	                  conn};
	s->handler(s->arg, &q, &r);
	struct MHD_Response *resp = MHD_create_response_from_buffer(
	    r.body.len, r.body.data ? r.body.data : (void *)"", MHD_RESPMEM_MUST_COPY);
	buf_free(&r.body);
	if (!resp) {
		buf_free(&r.headers);
		return MHD_NO;
	}
	add_headers(resp, &r.headers);
	MHD_add_response_header(resp, "Content-Type", r.type);
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	if (r.allow)
		MHD_add_response_header(resp, "Allow", r.allow);
	if (r.bearer)
		MHD_add_response_header(resp, "WWW-Authenticate", "Bearer realm=\"cairn-worker\"");
	enum MHD_Result ret = MHD_queue_response(conn, r.status, resp);
	MHD_destroy_response(resp);
	return ret;
}

int http_start(const struct sockaddr_storage *sa, http_handler handler, void *arg,
               http_server **out, int *port)
{
	*out = NULL;
	http_server *s = calloc(1, sizeof *s);
	if (!s)
		return -CAIRN_ENOMEM;
	s->handler = handler;
	s->arg = arg;
	s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
	                            MHD_USE_AUTO | (sa->ss_family == AF_INET6 ? MHD_USE_IPv6 : 0),
	                        0, NULL, NULL, handle, s, MHD_OPTION_SOCK_ADDR,
	                        (const struct sockaddr *)sa, MHD_OPTION_CONNECTION_LIMIT,
	                        (unsigned)64, MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)16,
	                        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
	                        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 * 1024,
	                        MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
	if (!s->d) {
		free(s);
		return -CAIRN_EINVAL;
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
	*port = info ? info->port : 0;
	*out = s;
	return 0;
}

void http_stop(http_server *s)
{
	if (!s)
		return;
	MHD_stop_daemon(s->d);
	free(s);
}
