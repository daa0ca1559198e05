/*
 * proxy.c - the freezable TCP proxy of the tests (see proxy.h). One thread
 * accepts; each connection gets two threads, one per direction, that read
 * and write with blocking calls. A frozen direction waits on a condition
 * variable before it reads and before it writes what it read, so nothing
 * is lost and nothing is closed; tproxy_stop shuts every socket down, which
 * wakes every blocked call.
 *
 * Owns: the listening socket, every accepted connection and its upstream
 * socket, and their threads (all joined by tproxy_stop).
 */
#include "proxy.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <libpq-fe.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define STARTUP_KEEP 1024

typedef struct tconn tconn;

typedef struct pump {
	tproxy *p;
	tconn *c;
	int from, to;
	int upstream; /* client -> server: the one that sees the startup packet */
	pthread_t thread;
} pump;

struct tconn {
	int cfd, sfd;
	char startup[STARTUP_KEEP];
	size_t nstartup; /* guarded by the proxy's mu */
	pump up, down;
	tconn *next;
};

struct tproxy {
	int lfd, port;
	char unix_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char host[256], service[32];
	char conninfo[4096];
	pthread_t acceptor;
	pthread_mutex_t mu;
	pthread_cond_t cv; /* thawed, or stopping */
	int frozen_all, stop;
	char match[128];
	tconn *conns;
};

/* Whether c's startup packet contains match (NULL: every connection). Holds p->mu. */
static int matches_locked(const tconn *c, const char *match)
{
	return !match ||
	       (c->nstartup && memmem(c->startup, c->nstartup, match, strlen(match)) != NULL);
}

/* Whether c is frozen. Holds p->mu. */
static int frozen_locked(tproxy *p, tconn *c)
{
	return p->frozen_all || (p->match[0] && matches_locked(c, p->match));
}

/* Waits while c is frozen; 0 when the proxy is stopping. */
static int wait_thawed(tproxy *p, tconn *c)
{
	pthread_mutex_lock(&p->mu);
	while (!p->stop && frozen_locked(p, c))
		pthread_cond_wait(&p->cv, &p->mu);
	int go = !p->stop;
	pthread_mutex_unlock(&p->mu);
	return go;
}

static void *pump_main(void *arg)
{
	pump *d = arg;
	char buf[65536];
	while (wait_thawed(d->p, d->c)) {
		ssize_t n = read(d->from, buf, sizeof buf);
		if (d->upstream && n > 0) {
			pthread_mutex_lock(&d->p->mu);
			if (!d->c->nstartup) { /* the first packet names the connection */
				size_t k = (size_t)n < STARTUP_KEEP ? (size_t)n : STARTUP_KEEP;
				memcpy(d->c->startup, buf, k);
				d->c->nstartup = k;
			}
			pthread_mutex_unlock(&d->p->mu);
		}
		/* Data and an end alike wait while the connection is frozen. */
		if (!wait_thawed(d->p, d->c))
			break;
		if (n <= 0) {
			shutdown(d->to, SHUT_WR); /* pass the end on */
			break;
		}
		for (ssize_t off = 0; off < n;) {
			ssize_t w = send(d->to, buf + off, (size_t)(n - off), MSG_NOSIGNAL);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				shutdown(d->from,
				         SHUT_RDWR); /* the receiver is gone: tell the sender */
				return NULL;
			}
			off += w;
		}
	}
	return NULL;
}

static int connect_upstream(tproxy *p)
{
	if (p->unix_path[0]) {
		int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_un a = {.sun_family = AF_UNIX};
		snprintf(a.sun_path, sizeof a.sun_path, "%s", p->unix_path);
		if (s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0)
			return s;
		if (s >= 0)
			close(s);
		return -1;
	}
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res;
	if (getaddrinfo(p->host, p->service, &hints, &res) != 0)
		return -1;
	int s = -1;
	for (struct addrinfo *ai = res; ai && s < 0; ai = ai->ai_next) {
		s = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (s >= 0 && connect(s, ai->ai_addr, ai->ai_addrlen) != 0) {
			close(s);
			s = -1;
		}
	}
	freeaddrinfo(res);
	return s;
}

static void *accept_main(void *arg)
{
	tproxy *p = arg;
	for (;;) {
		int cfd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC);
		pthread_mutex_lock(&p->mu);
		int stop = p->stop;
		pthread_mutex_unlock(&p->mu);
		if (stop) {
			if (cfd >= 0)
				close(cfd);
			break;
		}
		if (cfd < 0)
			continue;
		int sfd = connect_upstream(p);
		tconn *c = sfd >= 0 ? calloc(1, sizeof *c) : NULL;
		if (!c) {
			close(cfd);
			if (sfd >= 0)
				close(sfd);
			continue;
		}
		c->cfd = cfd;
		c->sfd = sfd;
		c->up = (pump){.p = p, .c = c, .from = cfd, .to = sfd, .upstream = 1};
		c->down = (pump){.p = p, .c = c, .from = sfd, .to = cfd};
		pthread_mutex_lock(&p->mu);
		c->next = p->conns;
		p->conns = c;
		pthread_mutex_unlock(&p->mu);
		if (pthread_create(&c->up.thread, NULL, pump_main, &c->up) != 0 ||
		    pthread_create(&c->down.thread, NULL, pump_main, &c->down) != 0)
			abort(); /* a test helper: no partial state to recover */
	}
	return NULL;
}

/* Appends key='value' (quotes and backslashes escaped) to out. */
static void add_kv(char *out, size_t size, const char *key, const char *val)
{
	size_t n = strlen(out);
	n += (size_t)snprintf(out + n, size - n, "%s%s='", n ? " " : "", key);
	for (const char *v = val; *v && n + 3 < size; v++) {
		if (*v == '\'' || *v == '\\')
			out[n++] = '\\';
		out[n++] = *v;
	}
	snprintf(out + n, size - n, "'");
}

tproxy *tproxy_start(const char *conninfo)
{
	tproxy *p = calloc(1, sizeof *p);
	cr_assert(p);
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	char *perr = NULL;
	PQconninfoOption *opts = PQconninfoParse(conninfo, &perr);
	cr_assert(opts, "proxy: cannot parse %s: %s", conninfo, perr ? perr : "");
	const char *host = NULL, *port = NULL;
	for (PQconninfoOption *o = opts; o->keyword; o++) {
		if (strcmp(o->keyword, "host") == 0)
			host = o->val;
		else if (strcmp(o->keyword, "port") == 0)
			port = o->val;
	}
	if (!port || !*port)
		port = "5432";
	if (!host || !*host)
		host = "/var/run/postgresql";
	if (host[0] == '/')
		snprintf(p->unix_path, sizeof p->unix_path, "%s/.s.PGSQL.%s", host, port);
	else {
		snprintf(p->host, sizeof p->host, "%s", host);
		snprintf(p->service, sizeof p->service, "%s", port);
	}

	p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert(p->lfd >= 0, "proxy: socket: %s", strerror(errno));
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	cr_assert(bind(p->lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(p->lfd, 64) == 0 &&
	              getsockname(p->lfd, (struct sockaddr *)&a, &len) == 0,
	          "proxy: cannot listen: %s", strerror(errno));
	p->port = ntohs(a.sin_port);

	/* The same connection parameters, through the proxy. */
	char portnum[16];
	snprintf(portnum, sizeof portnum, "%d", p->port);
	for (PQconninfoOption *o = opts; o->keyword; o++) {
		if (!o->val || !*o->val || strcmp(o->keyword, "host") == 0 ||
		    strcmp(o->keyword, "hostaddr") == 0 || strcmp(o->keyword, "port") == 0 ||
		    strcmp(o->keyword, "sslmode") == 0 || strcmp(o->keyword, "gssencmode") == 0)
			continue;
		add_kv(p->conninfo, sizeof p->conninfo, o->keyword, o->val);
	}
	PQconninfoFree(opts);
	add_kv(p->conninfo, sizeof p->conninfo, "host", "127.0.0.1");
	add_kv(p->conninfo, sizeof p->conninfo, "port", portnum);
	add_kv(p->conninfo, sizeof p->conninfo, "sslmode", "disable");
	add_kv(p->conninfo, sizeof p->conninfo, "gssencmode", "disable");

	cr_assert(pthread_create(&p->acceptor, NULL, accept_main, p) == 0);
	return p;
}

const char *tproxy_conninfo(tproxy *p)
{
	return p->conninfo;
}

void tproxy_freeze(tproxy *p, const char *match)
{
	pthread_mutex_lock(&p->mu);
	if (match)
		snprintf(p->match, sizeof p->match, "%s", match);
	else
		p->frozen_all = 1;
	pthread_mutex_unlock(&p->mu);
}

void tproxy_thaw(tproxy *p)
{
	pthread_mutex_lock(&p->mu);
	p->frozen_all = 0;
	p->match[0] = '\0';
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

int tproxy_count(tproxy *p, const char *match)
{
	int n = 0;
	pthread_mutex_lock(&p->mu);
	for (tconn *c = p->conns; c; c = c->next)
		n += matches_locked(c, match);
	pthread_mutex_unlock(&p->mu);
	return n;
}

void tproxy_cut(tproxy *p, const char *match)
{
	pthread_mutex_lock(&p->mu);
	for (tconn *c = p->conns; c; c = c->next)
		if (matches_locked(c, match))
			shutdown(c->cfd, SHUT_RDWR);
	pthread_mutex_unlock(&p->mu);
}

void tproxy_stop(tproxy *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = 1;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	shutdown(p->lfd, SHUT_RDWR); /* wakes accept() */
	pthread_join(p->acceptor, NULL);
	for (tconn *c = p->conns, *next; c; c = next) {
		next = c->next;
		shutdown(c->cfd, SHUT_RDWR);
		shutdown(c->sfd, SHUT_RDWR);
		pthread_join(c->up.thread, NULL);
		pthread_join(c->down.thread, NULL);
		close(c->cfd);
		close(c->sfd);
		free(c);
	}
	close(p->lfd);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
	free(p);
}
