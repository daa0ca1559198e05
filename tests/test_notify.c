/*
 * test_notify.c - the worker speaks systemd's notify protocol (engine/notify.c):
 * a unix datagram socket of the test's own stands in for systemd as
 * $NOTIFY_SOCKET, with libsystemd's real sd_notify on the worker's side.
 * READY=1 comes only once /readyz answers 200, WATCHDOG=1 keeps coming at
 * half of $WATCHDOG_USEC, STOPPING=1 comes when SIGTERM starts the drain.
 */
#include <criterion/criterion.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "support.h"

typedef struct listener {
	int fd;
	char dir[64];
	char path[96];
	char env[128]; /* NOTIFY_SOCKET=path */
} listener;

static void listen_notify(listener *l)
{
	snprintf(l->dir, sizeof l->dir, "/tmp/cairn-notify-XXXXXX");
	cr_assert(mkdtemp(l->dir));
	snprintf(l->path, sizeof l->path, "%s/notify", l->dir);
	snprintf(l->env, sizeof l->env, "NOTIFY_SOCKET=%s", l->path);
	l->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	cr_assert(l->fd >= 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof a.sun_path, "%s", l->path);
	cr_assert(bind(l->fd, (struct sockaddr *)&a, sizeof a) == 0);
}

static void listener_close(listener *l)
{
	close(l->fd);
	unlink(l->path);
	rmdir(l->dir);
}

/* The next datagram within timeout_ms into msg (NUL-terminated); 0 if none came. */
static int next_message(listener *l, char *msg, size_t cap, int64_t timeout_ms)
{
	int64_t deadline = tnow_ms() + timeout_ms;
	for (int64_t left; (left = deadline - tnow_ms()) > 0;) {
		struct pollfd p = {l->fd, POLLIN, 0};
		if (poll(&p, 1, (int)left) <= 0)
			continue;
		ssize_t n = recv(l->fd, msg, cap - 1, 0);
		if (n < 0)
			continue;
		msg[n] = '\0';
		return 1;
	}
	return 0;
}

/* Waits for a datagram that is exactly want; counts the WATCHDOG=1 seen on the way. */
static int wait_for(listener *l, const char *want, int *watchdogs, int64_t timeout_ms)
{
	char msg[512];
	int64_t deadline = tnow_ms() + timeout_ms;
	while (next_message(l, msg, sizeof msg, deadline - tnow_ms())) {
		if (strcmp(msg, want) == 0)
			return 1;
		if (watchdogs && strcmp(msg, "WATCHDOG=1") == 0)
			(*watchdogs)++;
	}
	return 0;
}

static int built_with_systemd(void)
{
	const char *argv[] = {tbin("cairn-worker"), "--version", NULL};
	char *out;
	cr_assert_eq(trun(argv, NULL, &out, NULL), 0);
	int yes = strstr(out, "notification: systemd") != NULL;
	free(out);
	return yes;
}

Test(notify, worker_sends_ready_after_readyz_then_watchdog_then_stopping_on_sigterm)
{
	if (!built_with_systemd())
		cr_skip_test("cairn-worker was built without libsystemd (libsystemd-dev)");
	const char *db = tdb_new_migrated_shards(8);
	listener l;
	listen_notify(&l);
	int port;
	pid_t pid = tworker_start(db, &port, NULL, l.env, "WATCHDOG_USEC=400000", NULL);
	int dogs = 0;
	cr_assert(wait_for(&l, "READY=1", &dogs, 30000), "no READY=1 within 30 s");
	/* Sent only once ready: /readyz answers 200 at once. */
	cr_assert_eq(thttp(port, "GET", "/readyz", NULL, NULL), 200);
	/* Every 200 ms while the loops are alive: 5 within 5 s is plenty of slack. */
	dogs = 0;
	int64_t deadline = tnow_ms() + 5000;
	while (dogs < 5 && tnow_ms() < deadline) {
		char msg[512];
		if (next_message(&l, msg, sizeof msg, deadline - tnow_ms()) &&
		    strcmp(msg, "WATCHDOG=1") == 0)
			dogs++;
	}
	cr_assert_geq(dogs, 5, "only %d WATCHDOG=1 in 5 s with WATCHDOG_USEC=400000", dogs);
	kill(pid, SIGTERM);
	cr_assert(wait_for(&l, "STOPPING=1", NULL, 10000), "no STOPPING=1 after SIGTERM");
	cr_assert_eq(tworker_stop(pid, 0, 30000), 0); /* already signalled: only wait */
	listener_close(&l);
}

Test(notify, worker_without_watchdog_usec_sends_ready_and_no_watchdog)
{
	if (!built_with_systemd())
		cr_skip_test("cairn-worker was built without libsystemd (libsystemd-dev)");
	const char *db = tdb_new_migrated_shards(8);
	listener l;
	listen_notify(&l);
	int port;
	pid_t pid = tworker_start(db, &port, NULL, l.env, NULL);
	int dogs = 0;
	cr_assert(wait_for(&l, "READY=1", &dogs, 30000), "no READY=1 within 30 s");
	kill(pid, SIGTERM);
	cr_assert(wait_for(&l, "STOPPING=1", &dogs, 10000), "no STOPPING=1 after SIGTERM");
	cr_assert_eq(dogs, 0, "%d WATCHDOG=1 although no watchdog was asked for", dogs);
	cr_assert_eq(tworker_stop(pid, 0, 30000), 0); /* already signalled: only wait */
	listener_close(&l);
}

Test(notify, worker_that_cannot_reach_the_database_feeds_the_watchdog_but_never_says_ready)
{
	if (!built_with_systemd())
		cr_skip_test("cairn-worker was built without libsystemd (libsystemd-dev)");
	int fd, closed = tclosed_port(&fd);
	char db[160];
	snprintf(db, sizeof db, "host=127.0.0.1 port=%d dbname=cairn user=cairn connect_timeout=1",
	         closed);
	listener l;
	listen_notify(&l);
	pid_t pid = tworker_start(db, NULL, NULL, l.env, "WATCHDOG_USEC=400000", NULL);
	/* Its loops are alive (the supervisor retries the connection), so the
	 * watchdog is fed; it is not ready, so READY=1 never comes. */
	int dogs = 0, ready = 0;
	int64_t deadline = tnow_ms() + 3000;
	char msg[512];
	while (tnow_ms() < deadline)
		if (next_message(&l, msg, sizeof msg, deadline - tnow_ms())) {
			dogs += strcmp(msg, "WATCHDOG=1") == 0;
			ready |= strcmp(msg, "READY=1") == 0;
		}
	cr_assert_not(ready, "READY=1 without a database");
	cr_assert_geq(dogs, 3, "only %d WATCHDOG=1 in 3 s", dogs);
	kill(pid, SIGTERM);
	cr_assert(wait_for(&l, "STOPPING=1", NULL, 10000), "no STOPPING=1 after SIGTERM");
	cr_assert_eq(tworker_stop(pid, 0, 30000), 0); /* already signalled: only wait */
	close(fd);
	listener_close(&l);
}
