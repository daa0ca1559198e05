/*
 * slow.c - slow HTTP clients for the tests (see slow.h). One thread drives
 * every connection with non-blocking sockets and poll(), so a few hundred
 * of them cost the test process one thread.
 */
#include "slow.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "support.h"

typedef struct slow_conn {
	int fd;
	int sent;        /* header lines sent */
	int ever;        /* it has sent its request line once */
	int tried;       /* it has been connected once (or tried to) */
	int64_t next_at; /* when the next line (or a reconnect) is due */
} slow_conn;

struct tslow {
	int port, n, sources;
	int64_t interval_ms;
	slow_conn *c;
	pthread_t thread;
	pthread_mutex_t mu;
	int stop, open, closed, started, tried;
};

static void slow_close(tslow *t, slow_conn *c, int64_t now)
{
	if (c->fd >= 0) {
		close(c->fd);
		pthread_mutex_lock(&t->mu);
		t->closed++;
		if (c->sent)
			t->open--;
		pthread_mutex_unlock(&t->mu);
	}
	c->fd = -1;
	c->sent = 0;
	c->next_at = now + 100; /* a refused one is tried again, not in a spin */
}

static void slow_connect(tslow *t, slow_conn *c, int i, int64_t now)
{
	if (!c->tried) {
		c->tried = 1;
		pthread_mutex_lock(&t->mu);
		t->tried++;
		pthread_mutex_unlock(&t->mu);
	}
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	struct sockaddr_in src = {.sin_family = AF_INET}, dst = {.sin_family = AF_INET};
	src.sin_addr.s_addr =
	    htonl(INADDR_LOOPBACK + 9 + (uint32_t)(i % t->sources)); /* 127.0.0.10 on */
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	dst.sin_port = htons((uint16_t)t->port);
	if (c->fd < 0 || bind(c->fd, (struct sockaddr *)&src, sizeof src) < 0 ||
	    (connect(c->fd, (struct sockaddr *)&dst, sizeof dst) < 0 && errno != EINPROGRESS)) {
		if (c->fd >= 0)
			close(c->fd);
		c->fd = -1;
		c->next_at = now + 100;
		return;
	}
	c->sent = 0;
	c->next_at = now; /* the request line as soon as it is connected */
}

/* Sends c's next line; a connection still being made is tried again soon. */
static void slow_send(tslow *t, slow_conn *c, int64_t now)
{
	char line[64];
	int len = c->sent ? snprintf(line, sizeof line, "X-Slow-%d: x\r\n", c->sent)
	                  : snprintf(line, sizeof line, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n");
	ssize_t w = send(c->fd, line, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (w < 0 && (errno == EAGAIN || errno == ENOTCONN)) {
		c->next_at = now + 20;
		return;
	}
	if (w < 0)
		return slow_close(t, c, now);
	if (!c->sent++) {
		pthread_mutex_lock(&t->mu);
		t->open++;
		t->started += !c->ever;
		c->ever = 1;
		pthread_mutex_unlock(&t->mu);
	}
	c->next_at = now + t->interval_ms;
}

static void *slow_main(void *arg)
{
	tslow *t = arg;
	struct pollfd *p = calloc((size_t)t->n, sizeof *p);
	for (;;) {
		pthread_mutex_lock(&t->mu);
		int stop = t->stop;
		pthread_mutex_unlock(&t->mu);
		if (stop)
			break;
		int64_t now = tnow_ms();
		for (int i = 0; i < t->n; i++) {
			slow_conn *c = &t->c[i];
			if (c->fd < 0 && now >= c->next_at)
				slow_connect(t, c, i, now);
			else if (c->fd >= 0 && now >= c->next_at)
				slow_send(t, c, now);
			p[i] = (struct pollfd){.fd = c->fd, .events = POLLIN};
		}
		if (poll(p, (nfds_t)t->n, 20) <= 0)
			continue;
		now = tnow_ms();
		for (int i = 0; i < t->n; i++) {
			char b[512];
			/* Anything from the server (an error page, the end of the
			 * stream, a reset) ends the connection. */
			if (p[i].fd >= 0 && (p[i].revents & (POLLIN | POLLHUP | POLLERR)) &&
			    recv(p[i].fd, b, sizeof b, MSG_DONTWAIT) != -1)
				slow_close(t, &t->c[i], now);
			else if (p[i].fd >= 0 && (p[i].revents & (POLLHUP | POLLERR)))
				slow_close(t, &t->c[i], now);
		}
	}
	free(p);
	return NULL;
}

tslow *tslow_start(int port, int n, int sources, int64_t interval_ms)
{
	tslow *t = calloc(1, sizeof *t);
	cr_assert(t && (t->c = calloc((size_t)n, sizeof *t->c)));
	t->port = port;
	t->n = n;
	t->sources = sources;
	t->interval_ms = interval_ms;
	pthread_mutex_init(&t->mu, NULL);
	/* The first lines spread over the interval, as they would come in. */
	int64_t now = tnow_ms();
	for (int i = 0; i < n; i++) {
		t->c[i].fd = -1;
		t->c[i].next_at = now + interval_ms * i / n;
	}
	cr_assert(pthread_create(&t->thread, NULL, slow_main, t) == 0);
	return t;
}

int tslow_open(tslow *t)
{
	pthread_mutex_lock(&t->mu);
	int n = t->open;
	pthread_mutex_unlock(&t->mu);
	return n;
}

int tslow_tried(tslow *t)
{
	pthread_mutex_lock(&t->mu);
	int n = t->tried;
	pthread_mutex_unlock(&t->mu);
	return n;
}

int tslow_started(tslow *t)
{
	pthread_mutex_lock(&t->mu);
	int n = t->started;
	pthread_mutex_unlock(&t->mu);
	return n;
}

int tslow_closed(tslow *t)
{
	pthread_mutex_lock(&t->mu);
	int n = t->closed;
	pthread_mutex_unlock(&t->mu);
	return n;
}

void tslow_stop(tslow *t)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->mu);
	t->stop = 1;
	pthread_mutex_unlock(&t->mu);
	pthread_join(t->thread, NULL);
	for (int i = 0; i < t->n; i++)
		if (t->c[i].fd >= 0)
			close(t->c[i].fd);
	pthread_mutex_destroy(&t->mu);
	free(t->c);
	free(t);
}

static size_t discard(char *data, size_t size, size_t n, void *arg)
{
	(void)data;
	(void)arg;
	return size * n;
}

long thttp_timed(int port, const char *path, const char *const *headers, int64_t giveup_ms,
                 int64_t *took_ms)
{
	CURL *c = curl_easy_init();
	struct curl_slist *hl = NULL;
	for (int i = 0; headers && headers[i]; i++)
		hl = curl_slist_append(hl, headers[i]);
	char url[512];
	snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)giveup_ms);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
	long status = 0;
	int64_t t0 = tnow_ms();
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	*took_ms = tnow_ms() - t0;
	curl_easy_cleanup(c);
	curl_slist_free_all(hl);
	return status;
}
