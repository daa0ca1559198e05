/*
 * http.c - the HTTP server behind the worker's endpoint and the console (see
 * http.h). libmicrohttpd reads and writes every connection on one polling
 * thread with epoll, so a connection that is idle or sends its request
 * slowly costs a socket and a little memory, never a thread. A request that
 * has arrived in full is suspended and handed to a pool of handler threads
 * (so a long poll of the /v1 API holds up only itself); its reply, built
 * into a buffer, is copied out when the handler resumes it, never cached.
 *
 * Slow clients (slowloris): libmicrohttpd's idle timeout restarts with every
 * byte, so a request sent a header line every few seconds would never time
 * out. This module tracks when each connection began to wait for its current
 * request, and a reaper thread shuts down the socket of one whose headers are
 * not in within HTTP_HEADERS_MS, or whose body is not within HTTP_REQUEST_MS;
 * when HTTP_READING_MAX connections are still reading a request, a new one
 * pushes the oldest out, so room is always kept for a probe that sends its
 * request at once.
 *
 * Owns: the daemon and its polling thread, the reaper thread, and up to
 * HTTP_HANDLERS_MAX handler threads, all joined by http_stop.
 */
#include "http.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cairn.h"
#include "clock.h"
#include "parse.h"

/* A connection as the server tracks it, from libmicrohttpd's notification of
 * its start to that of its close. While it waits for a request to arrive in
 * full it is on the reading list, oldest first. */
typedef struct http_conn {
	struct http_conn *prev, *next;
	int fd;
	int reading;   /* on the reading list */
	int headers;   /* the current request's headers are in */
	int cut;       /* its socket was shut down: libmicrohttpd closes it next */
	int64_t since; /* monotonic ms: when it began to wait for the request */
} http_conn;

/* One request from its headers to its reply; freed when it completes. */
typedef struct exchange {
	struct exchange *next; /* on the queue of requests waiting for a handler */
	struct MHD_Connection *conn;
	const char *method, *url;
	buf body;
	size_t max;
	int too_big;
	int queued;  /* suspended, with a handler thread */
	int handled; /* r is the reply */
	http_reply r;
} exchange;

struct http_server {
	struct MHD_Daemon *d;
	http_handler handler;
	void *arg;
	char *hosts;        /* the names a Host header may give besides IPs and localhost */
	pthread_mutex_t mu; /* guards everything below */
	pthread_cond_t work, tick;
	/* the reading list, and how many are on it */
	http_conn *oldest, *newest;
	int reading;
	/* the handler threads and their queue */
	exchange *head, *tail;
	int waiting; /* on the queue */
	pthread_t threads[HTTP_HANDLERS_MAX];
	int nthreads, idle;
	pthread_t reaper;
	int stopping;
};

size_t http_body_max(const char *path)
{
	return strncmp(path, "/v1/", 4) == 0 ? HTTP_API_BODY_MAX : HTTP_BODY_MAX;
}

/* ------------------------------------------------------ the reading list */

static void reading_unlink(http_server *s, http_conn *c)
{
	if (!c->reading)
		return;
	*(c->prev ? &c->prev->next : &s->oldest) = c->next;
	*(c->next ? &c->next->prev : &s->newest) = c->prev;
	c->prev = c->next = NULL;
	c->reading = 0;
	s->reading--;
}

/* c begins to wait for a request: the newest on the list. */
static void reading_arm(http_server *s, http_conn *c)
{
	reading_unlink(s, c);
	c->headers = 0;
	c->since = clock_mono_ms();
	c->prev = s->newest;
	*(s->newest ? &s->newest->next : &s->oldest) = c;
	s->newest = c;
	c->reading = 1;
	s->reading++;
}

/* Shuts c's socket down: libmicrohttpd sees the end of the stream and closes
 * the connection (and tells conn_notify, which frees c; until then the
 * descriptor is c's, since it is closed only after that notification). */
static void reading_cut(http_server *s, http_conn *c)
{
	if (!c->cut)
		shutdown(c->fd, SHUT_RDWR);
	c->cut = 1;
	reading_unlink(s, c);
}

static http_conn *conn_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *i =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return i ? i->socket_context : NULL;
}

/* libmicrohttpd's notification of a connection's start and close (on the
 * polling thread). A connection past the reading cap pushes the oldest
 * reader out. */
static void conn_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                        enum MHD_ConnectionNotificationCode code)
{
	http_server *s = cls;
	http_conn *c = *socket_context;
	if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
		pthread_mutex_lock(&s->mu);
		if (c)
			reading_unlink(s, c);
		pthread_mutex_unlock(&s->mu);
		free(c);
		*socket_context = NULL;
		return;
	}
	const union MHD_ConnectionInfo *i =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!i || !(c = calloc(1, sizeof *c)))
		return; /* untracked: only the idle timeout applies */
	c->fd = i->connect_fd;
	pthread_mutex_lock(&s->mu);
	while (s->reading >= HTTP_READING_MAX)
		reading_cut(s, s->oldest);
	reading_arm(s, c);
	pthread_mutex_unlock(&s->mu);
	*socket_context = c;
}

/* The reaper: cuts the readers past their deadline, every HTTP_REAP_MS. */
static void *reaper_main(void *arg)
{
	http_server *s = arg;
	pthread_mutex_lock(&s->mu);
	while (!s->stopping) {
		int64_t now = clock_mono_ms();
		for (http_conn *c = s->oldest, *next; c; c = next) {
			next = c->next;
			if (now - c->since > (c->headers ? HTTP_REQUEST_MS : HTTP_HEADERS_MS))
				reading_cut(s, c);
		}
		clock_cond_wait_ms(&s->tick, &s->mu, HTTP_REAP_MS);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* ------------------------------------------------------ handler threads */

static void *handler_main(void *arg)
{
	http_server *s = arg;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->head && !s->stopping) {
			s->idle++;
			pthread_cond_wait(&s->work, &s->mu);
			s->idle--;
		}
		exchange *x = s->head;
		if (!x)
			break; /* stopping, and nothing left to answer */
		if (!(s->head = x->next))
			s->tail = NULL;
		s->waiting--;
		pthread_mutex_unlock(&s->mu);
		http_request q = {
		    x->method,
		    x->url,
		    MHD_lookup_connection_value(x->conn, MHD_HEADER_KIND, "Authorization"),
		    buf_str(&x->body),
		    x->body.len,
		    x->too_big || x->body.oom,
		    x->conn};
		s->handler(s->arg, &q, &x->r);
		pthread_mutex_lock(&s->mu);
		x->handled = 1;
		pthread_mutex_unlock(&s->mu);
		MHD_resume_connection(x->conn); /* its handler is called again: reply */
		pthread_mutex_lock(&s->mu);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* Queues x for a handler thread, starting one when more requests wait than
 * threads are idle (up to HTTP_HANDLERS_MAX); 0, or -1 when the server is
 * stopping or has no thread (then nothing was queued). Called on the
 * polling thread, which suspends x's connection first. */
static int dispatch(http_server *s, exchange *x)
{
	pthread_mutex_lock(&s->mu);
	if (!s->stopping && s->waiting >= s->idle && s->nthreads < HTTP_HANDLERS_MAX &&
	    pthread_create(&s->threads[s->nthreads], NULL, handler_main, s) == 0)
		s->nthreads++;
	if (s->stopping || s->nthreads == 0) {
		pthread_mutex_unlock(&s->mu);
		return -1;
	}
	x->queued = 1;
	*(s->tail ? &s->tail->next : &s->head) = x;
	s->tail = x;
	s->waiting++;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

/* --------------------------------------------------------- the requests */

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                      enum MHD_RequestTerminationCode why)
{
	http_server *s = cls;
	exchange *x = *con_cls;
	if (x) {
		buf_free(&x->body);
		buf_free(&x->r.body);
		buf_free(&x->r.headers);
		free(x);
		*con_cls = NULL;
	}
	/* A connection kept alive waits for its next request from now. */
	http_conn *c = conn_of(conn);
	pthread_mutex_lock(&s->mu);
	if (c && !c->cut && why == MHD_REQUEST_TERMINATED_COMPLETED_OK)
		reading_arm(s, c);
	pthread_mutex_unlock(&s->mu);
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

/* Sends the reply r (consumed). */
static enum MHD_Result respond(struct MHD_Connection *conn, http_reply *r)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(
	    r->body.len, r->body.data ? r->body.data : (void *)"", MHD_RESPMEM_MUST_COPY);
	buf_free(&r->body);
	if (!resp) {
		buf_free(&r->headers);
		return MHD_NO;
	}
	add_headers(resp, &r->headers);
	MHD_add_response_header(resp, "Content-Type", r->type);
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	if (r->allow)
		MHD_add_response_header(resp, "Allow", r->allow);
	if (r->bearer)
		MHD_add_response_header(resp, "WWW-Authenticate", "Bearer realm=\"cairn-worker\"");
	enum MHD_Result ret = MHD_queue_response(conn, r->status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* libmicrohttpd's access handler, on the polling thread: first with the
 * headers, then with each part of the body, then once with none (the
 * request is in: it goes to a handler thread), and once more after the
 * handler resumed the connection (the reply goes out). */
static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_size, void **con_cls)
{
	http_server *s = cls;
	exchange *x = *con_cls;
	http_conn *c = conn_of(conn);
	if (!x) { /* the headers: the body (if any) follows in more calls */
		if (!(x = calloc(1, sizeof *x)))
			return MHD_NO;
		x->max = http_body_max(url);
		x->r = (http_reply){404, "text/plain; charset=utf-8", NULL, 0, BUF_INIT, BUF_INIT};
		*con_cls = x;
		pthread_mutex_lock(&s->mu);
		if (c)
			c->headers = 1;
		pthread_mutex_unlock(&s->mu);
		/* A page of another site whose name now resolves to us (DNS
		 * rebinding) names that site: never answered. No Host at all is
		 * HTTP/1.0, which no browser sends. */
		const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host");
		if (host && !parse_host_allowed(host, s->hosts)) {
			x->r.status = 421;
			buf_printf(
			    &x->r.body,
			    "misdirected request: this server does not answer to the host "
			    "\"%.100s\" (an IP address, localhost or a name it is given; see "
			    "docs/security.md)\n",
			    host);
			buf_puts(&x->r.headers, "X-Content-Type-Options: nosniff\n");
			x->handled = 1;
			return respond(conn, &x->r);
		}
		return MHD_YES;
	}
	if (x->handled)
		return respond(conn, &x->r);
	if (*upload_size) {
		if (x->body.len + *upload_size > x->max)
			x->too_big = 1;
		else
			buf_append(&x->body, upload_data, *upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	if (x->queued)
		return MHD_YES;
	pthread_mutex_lock(&s->mu);
	if (c)
		reading_unlink(s, c); /* the request is in: no deadline while it is answered */
	pthread_mutex_unlock(&s->mu);
	x->conn = conn;
	x->method = method;
	x->url = url;
	/* Suspended before it is queued, so that a handler cannot resume it
	 * first; the handler thread reads the request while it stays so. */
	MHD_suspend_connection(conn);
	if (dispatch(s, x) == 0)
		return MHD_YES;
	MHD_resume_connection(conn);
	x->r.status = 503;
	buf_puts(&x->r.body, "the server is stopping\n");
	x->handled = 1;
	return MHD_YES;
}

/* Frees what http_start made, once no thread of it is left. */
static void server_free(http_server *s)
{
	pthread_cond_destroy(&s->work);
	pthread_cond_destroy(&s->tick);
	pthread_mutex_destroy(&s->mu);
	free(s->hosts);
	free(s);
}

int http_start(const struct sockaddr_storage *sa, const char *hosts, http_handler handler,
               void *arg, http_server **out, int *port)
{
	*out = NULL;
	http_server *s = calloc(1, sizeof *s);
	if (!s || !(s->hosts = strdup(hosts ? hosts : ""))) {
		free(s);
		return -CAIRN_ENOMEM;
	}
	s->handler = handler;
	s->arg = arg;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->work, NULL);
	if (clock_cond_init(&s->tick) < 0 ||
	    pthread_create(&s->reaper, NULL, reaper_main, s) != 0) {
		server_free(s);
		return -CAIRN_ENOMEM;
	}
	s->d = MHD_start_daemon(
	    MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME |
	        (sa->ss_family == AF_INET6 ? MHD_USE_IPv6 : 0),
	    0, NULL, NULL, handle, s, MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)sa,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_CONN_MAX,
	    MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)HTTP_PER_IP_MAX,
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_S,
	    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 * 1024, MHD_OPTION_NOTIFY_COMPLETED,
	    completed, s, MHD_OPTION_NOTIFY_CONNECTION, conn_notify, s, MHD_OPTION_END);
	if (!s->d) {
		pthread_mutex_lock(&s->mu);
		s->stopping = 1;
		pthread_cond_broadcast(&s->tick);
		pthread_mutex_unlock(&s->mu);
		pthread_join(s->reaper, NULL);
		server_free(s);
		return -CAIRN_EINVAL;
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
	*port = info ? info->port : 0;
	*out = s;
	return 0;
}

/* The handler threads answer what is queued and end; then every suspended
 * connection has been resumed, which libmicrohttpd requires before it
 * stops. */
void http_stop(http_server *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->stopping = 1;
	pthread_cond_broadcast(&s->work);
	pthread_cond_broadcast(&s->tick);
	pthread_mutex_unlock(&s->mu);
	for (int i = 0; i < s->nthreads; i++)
		pthread_join(s->threads[i], NULL);
	pthread_join(s->reaper, NULL);
	MHD_stop_daemon(s->d);
	server_free(s);
}
