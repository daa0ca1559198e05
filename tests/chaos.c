/*
 * chaos.c - the chaos driver behind `make chaos` (and, short, test_chaos.c in
 * `make test`). It starts a private PostgreSQL of its own (tests/pg.sh, with
 * track_commit_timestamp on), or with --citus-sh a Citus cluster of its own
 * (tests/citus.sh: a coordinator and two worker nodes, distributed by
 * `cairn migrate --citus`), migrates it, starts CHAOS_WORKERS cairn-worker
 * processes with the workload of tests/plugin_chaos.so, and for
 * CHAOS_DURATION seconds enqueues CHAOS_RUNS runs of `chaos` (through
 * cairn_enqueue_batch), sends each its "go" signal at a random moment (some
 * before the run awaits it: buffered), and every CHAOS_MIN_GAP_MS to
 * CHAOS_MAX_GAP_MS (random, seeded) does one of:
 *
 *   kill9     kill -9 a worker; it is started again
 *   term      SIGTERM a worker (it drains); started again once it exited
 *   pgrestart pg_ctl restart -m fast (every session is cut off); CHAOS_RESTART_PG
 *             (on Citus, of one node: the coordinator, then each worker node
 *             in turn)
 *   freeze    a TCP proxy between a worker and PostgreSQL stops forwarding,
 *             without closing anything, for 1-8 s: one connection of the
 *             worker, or all of them (a partition); CHAOS_FREEZE=1 routes
 *             every worker through its own proxy and enables it
 *
 * Workers that die on their own (a poison run abort()s the worker that runs
 * it) are started again too. Then the chaos stops (every worker up, nothing
 * frozen), the driver waits up to CHAOS_DRAIN seconds for every run to
 * finish, stops the workers with SIGTERM and computes from the database:
 *
 *   runs        chaos runs enqueued
 *   completed   non-poison runs completed
 *   poison      poison runs (CHAOS_POISON of them, keys poison-N) failed with
 *               an error that mentions "stopped": the engine gave up on them
 *   lost        every other run: not finished, failed, cancelled, or a poison
 *               run that did not end as poison
 *   reexecuted  step executions that started after that step's result was
 *               journaled (see plugin_chaos.c): an execution that saw a
 *               completed journal row of its step when it started
 *               (journaled > 0), or whose start (clock_timestamp()) is later
 *               than the commit time of that row (pg_xact_commit_timestamp
 *               of the row's xmin)
 *   drain_s     seconds from the end of the chaos until the last run finished
 *
 * It prints that as one line on stdout and exits 0 when lost and reexecuted
 * are 0 and nothing else went wrong (a completed run whose journal is not
 * a, nap, b, go, c, a journaled step without an effect, a worker that
 * crashed without a poison run to blame, a sanitizer report in a worker log);
 * 1 otherwise, 2 on bad usage. Progress and details go to stderr. Worker logs
 * and the PostgreSQL log are kept (their directory printed) when it fails,
 * or with CHAOS_KEEP_LOGS=1.
 *
 * Owns: the PostgreSQL cluster it starts (removed at exit), the worker
 * processes (killed with it: PR_SET_PDEATHSIG), the proxy threads.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cairn.h"
#include "clock.h"

#define MAX_WORKERS 16
#define BATCH       200
#define WF          "chaos"

/* ------------------------------------------------------------- helpers */

static volatile sig_atomic_t interrupted;

static void sleep_ms(int64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR && !interrupted) {
	}
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	fprintf(stderr, "chaos: %s\n", line);
}

static int64_t env_int(const char *name, int64_t def, int64_t lo, int64_t hi)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return def;
	char *end;
	long long n = strtoll(v, &end, 10);
	if (*end || n < lo || n > hi) {
		fprintf(stderr,
		        "chaos: %s=\"%s\": expected an integer from %" PRId64 " to %" PRId64 "\n",
		        name, v, lo, hi);
		exit(2);
	}
	return n;
}

/* xorshift64*: seeded, so a run of the driver can be repeated (CHAOS_SEED);
 * the timing of processes is not, so it is a guide, not a replay. */
static uint64_t rng_state;
static uint64_t rnd(void)
{
	uint64_t x = rng_state;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	rng_state = x;
	return x * 0x2545F4914F6CDD1DULL;
}
static int64_t rnd_in(int64_t lo, int64_t hi) /* [lo, hi] */
{
	return hi <= lo ? lo : lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

/* Runs argv, waits; stdout into out (up to n bytes) when out is not NULL.
 * Returns the exit code, or -1. */
static int run_cmd(char *const argv[], char *out, size_t n)
{
	int p[2];
	if (out && pipe(p) != 0)
		return -1;
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		if (out) {
			dup2(p[1], 1);
			close(p[0]);
			close(p[1]);
		}
		execvp(argv[0], argv);
		_exit(127);
	}
	if (out) {
		close(p[1]);
		size_t len = 0;
		ssize_t r;
		while (len + 1 < n && (r = read(p[0], out + len, n - 1 - len)) != 0) {
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0)
				break;
			len += (size_t)r;
		}
		out[len] = '\0';
		while (len && (out[len - 1] == '\n' || out[len - 1] == ' '))
			out[--len] = '\0';
		close(p[0]);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ------------------------------------------------------------- settings */

typedef struct settings {
	const char *worker, *plugin, *pg_sh, *citus_sh, *logs;
	int citus; /* the database is a Citus cluster (citus_sh, which pg_sh is then) */
	int runs, workers, poison, freeze, restart_pg, concurrency, shards;
	int64_t duration_ms, drain_ms, min_gap_ms, max_gap_ms;
	uint64_t seed;
	int keep_logs;
} settings;

/* ---------------------------------------------------------------- proxy */

/*
 * One proxy per worker: a TCP listener on 127.0.0.1 forwarding every
 * connection to PostgreSQL's Unix socket, a thread per connection pair. A
 * frozen pair stops reading and writing both ways but closes nothing (a
 * peer's close is not passed on either), as a network that drops packets.
 */
typedef struct pair {
	int cfd, sfd;
	atomic_int frozen;
	struct proxy *px;
	struct pair *next;
} pair;

typedef struct proxy {
	int lfd, port;
	atomic_int frozen_all;
	pthread_mutex_t mu;
	pair *pairs;
	pthread_t acceptor;
	int started;
} proxy;

static char pg_socket[sizeof(((struct sockaddr_un *)0)->sun_path)];
static atomic_int proxies_stop;

static int fwd(int from, int to)
{
	char buf[16384];
	ssize_t r = read(from, buf, sizeof buf);
	if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
		return -1;
	for (ssize_t off = 0; r > 0 && off < r;) {
		ssize_t w = write(to, buf + off, (size_t)(r - off));
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		off += w;
	}
	return 0;
}

static void *pair_main(void *arg)
{
	pair *p = arg;
	while (!atomic_load(&proxies_stop)) {
		if (atomic_load(&p->frozen) || atomic_load(&p->px->frozen_all)) {
			sleep_ms(20);
			continue;
		}
		struct pollfd f[2] = {{p->cfd, POLLIN, 0}, {p->sfd, POLLIN, 0}};
		int n = poll(f, 2, 50);
		if (n < 0 && errno != EINTR)
			break;
		if (n <= 0)
			continue;
		if (f[0].revents && fwd(p->cfd, p->sfd) < 0)
			break;
		if (f[1].revents && fwd(p->sfd, p->cfd) < 0)
			break;
	}
	proxy *px = p->px;
	pthread_mutex_lock(&px->mu);
	for (pair **q = &px->pairs; *q; q = &(*q)->next)
		if (*q == p) {
			*q = p->next;
			break;
		}
	pthread_mutex_unlock(&px->mu);
	close(p->cfd);
	close(p->sfd);
	free(p);
	return NULL;
}

static void *acceptor_main(void *arg)
{
	proxy *px = arg;
	while (!atomic_load(&proxies_stop)) {
		struct pollfd f = {px->lfd, POLLIN, 0};
		if (poll(&f, 1, 100) <= 0)
			continue;
		int c = accept4(px->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_un a = {.sun_family = AF_UNIX};
		memcpy(a.sun_path, pg_socket, sizeof a.sun_path);
		if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0) {
			if (s >= 0)
				close(s);
			close(c); /* the server is down: the client sees the connection fail */
			continue;
		}
		pair *p = calloc(1, sizeof *p);
		if (!p) {
			close(c);
			close(s);
			continue;
		}
		p->cfd = c;
		p->sfd = s;
		p->px = px;
		pthread_mutex_lock(&px->mu);
		p->next = px->pairs;
		px->pairs = p;
		pthread_t t;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		int rc = pthread_create(&t, &at, pair_main, p);
		pthread_attr_destroy(&at);
		if (rc != 0) {
			px->pairs = p->next;
			close(c);
			close(s);
			free(p);
		}
		pthread_mutex_unlock(&px->mu);
	}
	return NULL;
}

static int proxy_start(proxy *px)
{
	px->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	if (px->lfd < 0 || bind(px->lfd, (struct sockaddr *)&a, sizeof a) != 0 ||
	    listen(px->lfd, 64) != 0 || getsockname(px->lfd, (struct sockaddr *)&a, &len) != 0)
		return -1;
	px->port = ntohs(a.sin_port);
	pthread_mutex_init(&px->mu, NULL);
	if (pthread_create(&px->acceptor, NULL, acceptor_main, px) != 0)
		return -1;
	px->started = 1;
	return 0;
}

/* Freezes all pairs (all = 1) or one picked at random; the number frozen. */
static int proxy_freeze(proxy *px, int all)
{
	if (all) {
		atomic_store(&px->frozen_all, 1);
		pthread_mutex_lock(&px->mu);
		int n = 0;
		for (pair *p = px->pairs; p; p = p->next)
			n++;
		pthread_mutex_unlock(&px->mu);
		return n;
	}
	pthread_mutex_lock(&px->mu);
	int n = 0;
	for (pair *p = px->pairs; p; p = p->next)
		n++;
	int k = n ? (int)rnd_in(0, n - 1) : -1;
	for (pair *p = px->pairs; p && k >= 0; p = p->next, k--)
		if (k == 0)
			atomic_store(&p->frozen, 1);
	pthread_mutex_unlock(&px->mu);
	return n ? 1 : 0;
}

static void proxy_thaw(proxy *px)
{
	atomic_store(&px->frozen_all, 0);
	pthread_mutex_lock(&px->mu);
	for (pair *p = px->pairs; p; p = p->next)
		atomic_store(&p->frozen, 0);
	pthread_mutex_unlock(&px->mu);
}

/* -------------------------------------------------------------- workers */

enum { W_DOWN, W_UP, W_STOPPING };

typedef struct worker {
	pid_t pid;
	int state;
	int term_sent, kill_sent;
	int64_t restart_at; /* W_DOWN: when to start it again */
	proxy px;
} worker;

typedef struct chaos {
	settings s;
	char pgdir[64];
	char db_url[512]; /* the driver's own: the Unix socket */
	char logs[512];
	worker w[MAX_WORKERS];
	PGconn *pg;
	cairn_client *cl;
	/* the workload */
	int64_t *ids;        /* run ids, 0 until enqueued */
	int64_t *sig_due;    /* monotonic ms at which to send "go"; 0 sent or none */
	unsigned char *kind; /* 1 poison */
	int enqueued, signalled, sig_lo;
	/* what happened */
	int n_kill9, n_term, n_pgrestart, n_freeze, n_starts;
	int exit_killed, exit_term_ok, exit_term_bad, exit_abort, exit_other;
	int frozen_slot;
	int64_t thaw_at;
	int problems;
} chaos;

static void worker_spawn(chaos *c, int i)
{
	worker *w = &c->w[i];
	char log[700], url[600], conc[16];
	snprintf(log, sizeof log, "%s/worker-%d.log", c->logs, i);
	if (c->s.freeze)
		snprintf(url, sizeof url,
		         "host=127.0.0.1 port=%d user=cairn dbname=postgres connect_timeout=5",
		         w->px.port);
	else
		snprintf(url, sizeof url, "%s", c->db_url);
	snprintf(conc, sizeof conc, "%d", c->s.concurrency);
	pid_t pid = fork();
	if (pid < 0) {
		say("fork: %s", strerror(errno));
		w->state = W_DOWN;
		w->restart_at = clock_mono_ms() + 1000;
		return;
	}
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		struct rlimit nocore = {0, 0};
		setrlimit(RLIMIT_CORE, &nocore); /* poison runs abort() */
		signal(SIGPIPE, SIG_DFL);
		/* A SIGTERM sent before cairn-worker's main blocks it (while the
		 * loader and the sanitizers start) would end it undrained, as it
		 * would any program: blocked from here, it waits for main, which
		 * drains on it. The mask survives exec. */
		sigset_t term;
		sigemptyset(&term);
		sigaddset(&term, SIGTERM);
		sigaddset(&term, SIGINT);
		sigprocmask(SIG_BLOCK, &term, NULL);
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dprintf(fd, "=== chaos: worker %d started as pid %d\n", i, (int)getpid());
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		setenv("DATABASE_URL", url, 1);
		setenv("CAIRN_HTTP_ADDR", "127.0.0.1:0", 1);
		unsetenv("CAIRN_ADVERTISE_ADDR");
		setenv("CAIRN_PLUGINS", c->s.plugin, 1);
		setenv("CAIRN_CONCURRENCY", conc, 1);
		setenv("CAIRN_POLL_INTERVAL", "200ms", 1);
		setenv("CAIRN_HEARTBEAT_INTERVAL", "200ms", 1);
		setenv("CAIRN_REBALANCE_INTERVAL", "200ms", 1);
		setenv("CAIRN_RUNNER_TTL", "2s", 1);
		setenv("CAIRN_REATTACH_WINDOW", "1s", 1);
		setenv("CAIRN_SHUTDOWN_TIMEOUT", "5s", 1);
		setenv("CAIRN_LOG_LEVEL", "info", 1);
		execl(c->s.worker, c->s.worker, (char *)NULL);
		fprintf(stderr, "chaos: cannot run %s: %s\n", c->s.worker, strerror(errno));
		_exit(127);
	}
	w->pid = pid;
	w->state = W_UP;
	w->term_sent = w->kill_sent = 0;
	c->n_starts++;
}

/* Reaps exited workers, classifies the exit, schedules their restart. */
static void reap(chaos *c, int restart)
{
	int st;
	pid_t pid;
	while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
		int i;
		for (i = 0; i < c->s.workers && c->w[i].pid != pid; i++) {
		}
		if (i == c->s.workers)
			continue;
		worker *w = &c->w[i];
		if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && w->kill_sent) {
			c->exit_killed++;
		} else if (w->term_sent && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
			c->exit_term_ok++;
		} else if (w->term_sent && WIFEXITED(st) && WEXITSTATUS(st) == 1) {
			/* the shutdown timeout cut a step off: allowed, reported */
			c->exit_term_bad++;
		} else if (WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) {
			c->exit_abort++;
			if (!c->s.poison) {
				say("worker %d (pid %d) aborted with no poison run to blame", i,
				    (int)pid);
				c->problems++;
			}
		} else {
			c->exit_other++;
			c->problems++;
			if (WIFSIGNALED(st))
				say("worker %d (pid %d) died of signal %d", i, (int)pid,
				    WTERMSIG(st));
			else
				say("worker %d (pid %d) exited %d%s", i, (int)pid, WEXITSTATUS(st),
				    w->term_sent ? " after SIGTERM" : " on its own");
		}
		w->pid = 0;
		w->state = W_DOWN;
		w->restart_at = restart ? clock_mono_ms() + rnd_in(100, 1000) : INT64_MAX;
	}
}

static void restart_due(chaos *c)
{
	int64_t t = clock_mono_ms();
	for (int i = 0; i < c->s.workers; i++)
		if (c->w[i].state == W_DOWN && c->w[i].restart_at <= t)
			worker_spawn(c, i);
}

/* ------------------------------------------------------------- database */

static PGresult *q(chaos *c, const char *sql, int n, const char *const *params)
{
	for (int attempt = 0; attempt < 2; attempt++) {
		if (!c->pg || PQstatus(c->pg) != CONNECTION_OK) {
			PQfinish(c->pg);
			c->pg = PQconnectdb(c->db_url);
			if (PQstatus(c->pg) != CONNECTION_OK)
				continue;
			PQclear(PQexec(c->pg, "SET client_min_messages = warning"));
		}
		/* Without parameters: the simple protocol, which takes several statements. */
		PGresult *r = n ? PQexecParams(c->pg, sql, n, NULL, params, NULL, NULL, 0)
		                : PQexec(c->pg, sql);
		ExecStatusType st = PQresultStatus(r);
		if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
			return r;
		if (PQstatus(c->pg) == CONNECTION_OK) {
			say("query failed: %s", PQerrorMessage(c->pg));
			PQclear(r);
			return NULL;
		}
		PQclear(r);
	}
	return NULL;
}

static int64_t q_int(chaos *c, const char *sql)
{
	PGresult *r = q(c, sql, 0, NULL);
	int64_t v = r && PQntuples(r) && !PQgetisnull(r, 0, 0)
	                ? strtoll(PQgetvalue(r, 0, 0), NULL, 10)
	                : -1;
	PQclear(r);
	return v;
}

/* The client, reopened after it lost its connection. */
static cairn_client *client(chaos *c)
{
	if (!c->cl) {
		if (cairn_client_open(c->db_url, &c->cl) != CAIRN_OK) {
			cairn_client_free(c->cl);
			c->cl = NULL;
		}
	}
	return c->cl;
}

static void client_failed(chaos *c, int rc)
{
	if (rc == CAIRN_EDB) {
		cairn_client_free(c->cl);
		c->cl = NULL;
	}
}

static int pg_sh(chaos *c, const char *cmd, char *out, size_t n)
{
	char *argv[] = {"sh", (char *)c->s.pg_sh, (char *)cmd, c->pgdir, NULL};
	return run_cmd(argv, out, n);
}

static const char *const CITUS_NODES[] = {"coord", "w1", "w2"};

/* Restarts PostgreSQL, or on Citus one node (named in node), each in turn
 * from the coordinator on: 0 or the script's failure. */
static int pg_restart(chaos *c, const char **node)
{
	*node = "";
	if (!c->s.citus)
		return pg_sh(c, "restart", NULL, 0);
	*node = CITUS_NODES[c->n_pgrestart % 3];
	char *argv[] = {"sh", (char *)c->s.pg_sh, "restart", c->pgdir, (char *)*node, NULL};
	return run_cmd(argv, NULL, 0);
}

/* `cairn migrate --citus`, by the cairn beside the worker: 0 or not. */
static int migrate_citus(chaos *c)
{
	char cli[1100];
	snprintf(cli, sizeof cli, "%s", c->s.worker);
	char *slash = strrchr(cli, '/');
	snprintf(slash ? slash + 1 : cli, sizeof cli - (size_t)(slash ? slash + 1 - cli : 0),
	         "cairn");
	char *argv[] = {cli, "migrate", "--citus", "--db", c->db_url, NULL};
	char out[512];
	int rc = run_cmd(argv, out, sizeof out);
	say("cairn migrate --citus: %s", out);
	return rc;
}

/* ------------------------------------------------------------- workload */

static void enqueue_due(chaos *c, int64_t t0, int64_t t)
{
	/* Spread over the whole chaos: the drain then starts with runs in every
	 * state, the last ones just enqueued. */
	int64_t span = c->s.duration_ms;
	int due =
	    span <= 0 ? c->s.runs : (int)((double)c->s.runs * (double)(t - t0) / (double)span);
	if (due > c->s.runs)
		due = c->s.runs;
	while (c->enqueued < due && !interrupted) {
		int m = due - c->enqueued < BATCH ? due - c->enqueued : BATCH;
		cairn_enqueue_opts o[BATCH];
		cairn_enqueued out[BATCH];
		char keys[BATCH][32], inputs[BATCH][96];
		for (int k = 0; k < m; k++) {
			int i = c->enqueued + k;
			snprintf(keys[k], sizeof keys[k], "%s-%d", c->kind[i] ? "poison" : "run",
			         i);
			/* Seeded per run, so the workload does not depend on timing. */
			uint64_t h = (uint64_t)i * 0x9E3779B97F4A7C15ULL ^ c->s.seed;
			h ^= h >> 31;
			h *= 0xBF58476D1CE4E5B9ULL;
			h ^= h >> 29;
			snprintf(inputs[k], sizeof inputs[k], "{\"nap_ms\": %d, \"work_ms\": %d%s}",
			         (int)(h % 1000), (int)((h >> 16) % 25),
			         c->kind[i] ? ", \"poison\": true" : "");
			o[k] = (cairn_enqueue_opts){.key = keys[k], .input = inputs[k]};
		}
		cairn_client *cl = client(c);
		int rc = cl ? cairn_enqueue_batch(cl, WF, (size_t)m, o, out) : CAIRN_EDB;
		if (rc != CAIRN_OK) {
			client_failed(c, rc);
			return; /* the same keys again next time: idempotent */
		}
		int64_t tt = clock_mono_ms();
		for (int k = 0; k < m; k++) {
			int i = c->enqueued + k;
			c->ids[i] = out[k].id;
			cairn_enqueued_clear(&out[k]); /* a run's warning, when it has one */
			if (!c->kind[i])
				c->sig_due[i] = tt + rnd_in(0, 3000);
		}
		c->enqueued += m;
	}
}

static void signal_due(chaos *c, int64_t t)
{
	for (int i = c->sig_lo; i < c->enqueued && !interrupted; i++) {
		if (!c->sig_due[i] || c->sig_due[i] > t)
			continue;
		cairn_client *cl = client(c);
		int rc = cl ? cairn_signal(cl, c->ids[i], "go", "true") : CAIRN_EDB;
		if (rc == CAIRN_OK || rc == CAIRN_ESTATE) {
			/* ESTATE: finished, which needs the signal: sent before, the
			 * answer lost with a connection */
			c->sig_due[i] = 0;
			c->signalled++;
		} else {
			client_failed(c, rc);
			return;
		}
	}
	while (c->sig_lo < c->enqueued && (c->kind[c->sig_lo] || !c->sig_due[c->sig_lo]) &&
	       c->ids[c->sig_lo])
		c->sig_lo++;
}

/* ---------------------------------------------------------------- chaos */

static int pick_up_worker(chaos *c)
{
	int up[MAX_WORKERS], n = 0;
	for (int i = 0; i < c->s.workers; i++)
		if (c->w[i].state == W_UP && i != c->frozen_slot)
			up[n++] = i;
	return n ? up[rnd_in(0, n - 1)] : -1;
}

static void thaw(chaos *c)
{
	if (c->frozen_slot >= 0) {
		proxy_thaw(&c->w[c->frozen_slot].px);
		say("thawed worker %d", c->frozen_slot);
	}
	c->frozen_slot = -1;
}

static void act(chaos *c)
{
	int w_kill = 35, w_term = 30, w_pg = c->s.restart_pg ? 15 : 0,
	    w_frz = c->s.freeze && c->frozen_slot < 0 ? 20 : 0;
	int64_t r = rnd_in(0, w_kill + w_term + w_pg + w_frz - 1);
	if (r < w_kill) {
		int i = pick_up_worker(c);
		if (i < 0)
			return;
		c->w[i].kill_sent = 1;
		kill(c->w[i].pid, SIGKILL);
		c->n_kill9++;
		say("kill -9 worker %d (pid %d)", i, (int)c->w[i].pid);
	} else if (r < w_kill + w_term) {
		int i = pick_up_worker(c);
		if (i < 0)
			return;
		c->w[i].term_sent = 1;
		c->w[i].state = W_STOPPING;
		kill(c->w[i].pid, SIGTERM);
		c->n_term++;
		say("SIGTERM worker %d (pid %d)", i, (int)c->w[i].pid);
	} else if (r < w_kill + w_term + w_pg) {
		int64_t t = clock_mono_ms();
		const char *node;
		int rc = pg_restart(c, &node);
		c->n_pgrestart++;
		say("restarted %s%s in %" PRId64 " ms%s", c->s.citus ? "Citus node " : "PostgreSQL",
		    node, clock_mono_ms() - t, rc == 0 ? "" : " (restart FAILED)");
		if (rc != 0)
			c->problems++;
	} else {
		int i = pick_up_worker(c);
		if (i < 0)
			return;
		int all = rnd_in(0, 1) == 1;
		int n = proxy_freeze(&c->w[i].px, all);
		int64_t ms = rnd_in(1000, 8000);
		c->frozen_slot = i;
		c->thaw_at = clock_mono_ms() + ms;
		c->n_freeze++;
		if (all)
			say("froze every connection of worker %d (%d) for %" PRId64 " ms", i, n,
			    ms);
		else
			say("froze %s of worker %d for %" PRId64 " ms",
			    n ? "one connection" : "no connection (it had none yet)", i, ms);
	}
}

/* ------------------------------------------------------------- verdict */

static const char SQL_VERDICT[] =
    "SELECT count(*),"
    "       count(*) FILTER (WHERE status = 'completed' AND key NOT LIKE 'poison-%'),"
    "       count(*) FILTER (WHERE key LIKE 'poison-%' AND status = 'failed'"
    "                          AND error ILIKE '%stopped%'),"
    "       count(*) FILTER (WHERE finished_at IS NULL)"
    "  FROM cairn.runs WHERE workflow = 'chaos'";

/* Executions of a step that started after its completed journal row was
 * committed (or saw it). Without track_commit_timestamp the comparison is
 * NULL and only journaled counts. */
#define REEXEC_FROM                                                                                \
	" FROM chaos_effects e JOIN cairn.steps s"                                                 \
	"   ON s.run_id = e.run_id AND s.name = e.step AND s.status = 'completed'"                 \
	" WHERE (e.journaled > 0 OR e.started_at > pg_xact_commit_timestamp(s.xmin))"

static const char SQL_REEXEC[] = "SELECT count(*)" REEXEC_FROM;
static const char SQL_REEXEC_MADE_UP[] = "SELECT count(*)" REEXEC_FROM " AND e.pid = 0";
static const char SQL_REEXEC_SHOW[] =
    "SELECT e.run_id, e.step, e.pid, e.journaled, e.started_at,"
    "       pg_xact_commit_timestamp(s.xmin), s.finished_at" REEXEC_FROM
    " ORDER BY e.run_id LIMIT 10";

/* The verdict's statements join a run's rows by its part too, and read
 * each run's journal with a join rather than a subquery per run: on Citus
 * (--citus-sh) a join of runs and steps by the run's id alone is refused,
 * and so is a subquery per row over another part. */

/* Completed runs whose journal is not exactly a, nap, b, go, c (completed). */
static const char SQL_BAD_JOURNAL[] =
    "SELECT count(*) FROM cairn.runs r LEFT JOIN ("
    "    SELECT run_id, part, string_agg(name || ':' || status, ',' ORDER BY seq) AS j"
    "    FROM cairn.steps GROUP BY run_id, part) s ON s.run_id = r.id AND s.part = r.part"
    " WHERE r.workflow = 'chaos' AND r.status = 'completed'"
    "   AND s.j IS DISTINCT FROM 'a:completed,nap:completed,b:completed,go:completed,c:completed'";

/* Journaled steps no execution of which left an effect. */
static const char SQL_NO_EFFECT[] =
    "SELECT count(*) FROM cairn.steps s JOIN cairn.runs r ON r.id = s.run_id AND r.part = s.part"
    " LEFT JOIN (SELECT DISTINCT run_id, step FROM chaos_effects) e"
    "   ON e.run_id = s.run_id AND e.step = s.name"
    " WHERE r.workflow = 'chaos' AND s.kind = 'step' AND s.status = 'completed'"
    "   AND e.run_id IS NULL";

/* Executions beyond one per journaled step: the allowed at-least-once. */
static const char SQL_AGAIN[] =
    "SELECT (SELECT count(*) FROM chaos_effects e JOIN cairn.runs r ON r.id = e.run_id"
    "         WHERE r.key NOT LIKE 'poison-%') -"
    "       (SELECT count(*) FROM cairn.steps s JOIN cairn.runs r"
    "          ON r.id = s.run_id AND r.part = s.part"
    "         WHERE r.workflow = 'chaos' AND r.key NOT LIKE 'poison-%' AND s.kind = 'step'"
    "           AND s.status = 'completed')";

static const char SQL_SETUP[] =
    "CREATE TABLE IF NOT EXISTS chaos_effects ("
    "  id bigserial PRIMARY KEY, run_id bigint NOT NULL, step text NOT NULL,"
    "  pid integer, journaled integer NOT NULL,"
    "  started_at timestamptz NOT NULL DEFAULT clock_timestamp());"
    "CREATE INDEX IF NOT EXISTS chaos_effects_run ON chaos_effects (run_id, step)";

static int detector_works(chaos *c, int commit_ts)
{
	PGresult *r = q(c, "BEGIN", 0, NULL);
	if (!r)
		return 0;
	PQclear(r);
	PQclear(q(c,
	          "INSERT INTO chaos_effects (run_id, step, pid, journaled)"
	          " SELECT run_id, name, 0, v FROM (SELECT run_id, name FROM cairn.steps"
	          "  WHERE kind = 'step' AND status = 'completed' LIMIT 1) s,"
	          " (VALUES (0), (1)) AS v(v)",
	          0, NULL));
	int64_t before = q_int(c, "SELECT count(*) FROM chaos_effects WHERE pid = 0");
	int64_t n = q_int(c, SQL_REEXEC_MADE_UP);
	PQclear(q(c, "ROLLBACK", 0, NULL));
	return before == 2 && n == (commit_ts ? 2 : 1);
}

static int scan_logs(chaos *c)
{
	char cmd[1200];
	snprintf(cmd, sizeof cmd,
	         "grep -l -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' %s/worker-*.log "
	         "2>/dev/null",
	         c->logs);
	char out[2048];
	char *argv[] = {"sh", "-c", cmd, NULL};
	run_cmd(argv, out, sizeof out);
	if (out[0]) {
		say("sanitizer reports in: %s", out);
		return 1;
	}
	return 0;
}

/* ----------------------------------------------------------------- main */

static chaos *g;

static void on_signal(int sig)
{
	interrupted = 1;
}

static void cleanup(void)
{
	if (!g)
		return;
	for (int i = 0; i < g->s.workers; i++)
		if (g->w[i].pid > 0) {
			kill(g->w[i].pid, SIGKILL);
			waitpid(g->w[i].pid, NULL, 0);
		}
	atomic_store(&proxies_stop, 1);
	cairn_client_free(g->cl);
	PQfinish(g->pg);
	if (g->pgdir[0]) {
		for (int i = 0; (g->problems || g->s.keep_logs) && i < (g->s.citus ? 3 : 1); i++) {
			char from[400], to[700];
			if (g->s.citus) {
				snprintf(from, sizeof from, "%s/%s/server.log", g->pgdir, CITUS_NODES[i]);
				snprintf(to, sizeof to, "%s/postgresql-%s.log", g->logs, CITUS_NODES[i]);
			} else {
				snprintf(from, sizeof from, "%s/server.log", g->pgdir);
				snprintf(to, sizeof to, "%s/postgresql.log", g->logs);
			}
			char *argv[] = {"cp", from, to, NULL};
			run_cmd(argv, NULL, 0);
		}
		pg_sh(g, "stop", NULL, 0);
		g->pgdir[0] = '\0';
	}
	if (g->problems || g->s.keep_logs) {
		say("worker logs and the PostgreSQL log kept in %s", g->logs);
	} else {
		char *argv[] = {"rm", "-rf", g->logs, NULL};
		run_cmd(argv, NULL, 0);
	}
}

static const char USAGE[] =
    "usage: chaos --worker PATH --plugin PATH (--pg-sh PATH | --citus-sh PATH) [--logs DIR]\n"
    "\n"
    "Starts its own PostgreSQL with tests/pg.sh (--pg-sh), or its own Citus\n"
    "cluster with tests/citus.sh (--citus-sh; restarts are of one node), CHAOS_WORKERS\n"
    "cairn-worker processes with the plugin_chaos.so workload, enqueues\n"
    "CHAOS_RUNS runs while killing (-9), stopping (TERM) and restarting\n"
    "workers, restarting PostgreSQL and (CHAOS_FREEZE=1) freezing connections,\n"
    "then waits for the queue to drain and prints one line:\n"
    "  chaos: runs= completed= poison= lost= reexecuted= drain_s= seed=\n"
    "Exit 0 when lost and reexecuted are 0 and nothing else went wrong.\n"
    "\n"
    "CHAOS_RUNS (10000)          runs to enqueue\n"
    "CHAOS_WORKERS (4)           worker processes (1-16)\n"
    "CHAOS_CONCURRENCY (8)       executors per worker\n"
    "CHAOS_SHARDS (128)          shards per group\n"
    "CHAOS_POISON (3)            runs whose first step abort()s the worker\n"
    "CHAOS_FREEZE (0)            1: route workers through freezing proxies\n"
    "CHAOS_RESTART_PG (1)        0: never restart PostgreSQL\n"
    "CHAOS_DURATION (runs/60 s)  seconds of chaos (runs are enqueued all along)\n"
    "CHAOS_DRAIN (300)           seconds to wait for the drain afterwards\n"
    "CHAOS_MIN_GAP_MS (1000), CHAOS_MAX_GAP_MS (3000)  between two actions\n"
    "CHAOS_SEED (time)           seeds actions and workload; printed\n"
    "CHAOS_KEEP_LOGS (0)         1: keep the logs even when all went well\n";

int main(int argc, char **argv)
{
	static chaos cs;
	chaos *c = &cs;
	settings *s = &c->s;
	for (int i = 1; i < argc; i++) {
		const char **slot = NULL;
		if (strcmp(argv[i], "--worker") == 0)
			slot = &s->worker;
		else if (strcmp(argv[i], "--plugin") == 0)
			slot = &s->plugin;
		else if (strcmp(argv[i], "--pg-sh") == 0)
			slot = &s->pg_sh;
		else if (strcmp(argv[i], "--citus-sh") == 0)
			slot = &s->citus_sh;
		else if (strcmp(argv[i], "--logs") == 0)
			slot = &s->logs;
		else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			return fputs(USAGE, stdout), 0;
		if (!slot || i + 1 >= argc) {
			fprintf(stderr, "chaos: unknown or incomplete argument \"%s\"\n%s", argv[i],
			        USAGE);
			return 2;
		}
		*slot = argv[++i];
	}
	if (!s->worker || !s->plugin || !s->pg_sh == !s->citus_sh) {
		fputs(USAGE, stderr);
		return 2;
	}
	if (s->citus_sh) {
		s->pg_sh = s->citus_sh;
		s->citus = 1;
	}
	if (access(s->worker, X_OK) != 0 || access(s->plugin, R_OK) != 0 ||
	    access(s->pg_sh, R_OK) != 0) {
		fprintf(stderr, "chaos: %s, %s or %s is missing\n", s->worker, s->plugin, s->pg_sh);
		return 2;
	}
	s->runs = (int)env_int("CHAOS_RUNS", 10000, 1, 10000000);
	s->workers = (int)env_int("CHAOS_WORKERS", 4, 1, MAX_WORKERS);
	s->concurrency = (int)env_int("CHAOS_CONCURRENCY", 8, 1, 256);
	s->shards = (int)env_int("CHAOS_SHARDS", 128, 1, 65536);
	s->poison = (int)env_int("CHAOS_POISON", 3, 0, s->runs);
	s->freeze = (int)env_int("CHAOS_FREEZE", 0, 0, 1);
	s->restart_pg = (int)env_int("CHAOS_RESTART_PG", 1, 0, 1);
	int64_t dflt_dur = s->runs / 60 < 20 ? 20 : s->runs / 60;
	s->duration_ms = env_int("CHAOS_DURATION", dflt_dur, 1, 86400) * 1000;
	s->drain_ms = env_int("CHAOS_DRAIN", 300, 1, 86400) * 1000;
	s->min_gap_ms = env_int("CHAOS_MIN_GAP_MS", 1000, 10, 3600000);
	s->max_gap_ms = env_int("CHAOS_MAX_GAP_MS", 3000, s->min_gap_ms, 3600000);
	s->seed = (uint64_t)env_int("CHAOS_SEED", (int64_t)(time(NULL) ^ getpid()) & 0xffffffff, 0,
	                            INT64_MAX);
	s->keep_logs = (int)env_int("CHAOS_KEEP_LOGS", 0, 0, 1);
	rng_state = s->seed * 2654435761u + 0x9E3779B97F4A7C15ULL;
	if (!rng_state)
		rng_state = 1;
	c->frozen_slot = -1;

	signal(SIGPIPE, SIG_IGN);
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);

	if (s->logs) {
		snprintf(c->logs, sizeof c->logs, "%s", s->logs);
	} else {
		snprintf(c->logs, sizeof c->logs, "/tmp/cairn-chaos-logs.XXXXXX");
		if (!mkdtemp(c->logs)) {
			fprintf(stderr, "chaos: mkdtemp: %s\n", strerror(errno));
			return 1;
		}
	}
	snprintf(c->pgdir, sizeof c->pgdir, "/tmp/cairn-chaos-pg.XXXXXX");
	if (!mkdtemp(c->pgdir)) {
		fprintf(stderr, "chaos: mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	g = c;
	atexit(cleanup);
	say("seed=%" PRIu64
	    " runs=%d workers=%d poison=%d freeze=%d restart_pg=%d duration=%" PRId64
	    "s drain<=%" PRId64 "s%s",
	    s->seed, s->runs, s->workers, s->poison, s->freeze, s->restart_pg,
	    s->duration_ms / 1000, s->drain_ms / 1000, s->citus ? " on Citus" : "");

	/* ---- PostgreSQL: private, commit timestamps on (a restart applies it;
	 * citus.sh sets them on every node as it starts them) */
	if (s->citus)
		setenv("PG_COMMIT_TS", "1", 1);
	if (pg_sh(c, "start", c->db_url, sizeof c->db_url) != 0 || !c->db_url[0]) {
		say("cannot start PostgreSQL with %s", s->pg_sh);
		c->problems++;
		return 1;
	}
	snprintf(pg_socket, sizeof pg_socket, s->citus ? "%.63s/coord/.s.PGSQL.5432" : "%.63s/.s.PGSQL.5432",
	         c->pgdir);
	if (!s->citus) {
		PQclear(q(c, "ALTER SYSTEM SET track_commit_timestamp = on", 0, NULL));
		if (pg_sh(c, "restart", NULL, 0) != 0) {
			say("cannot restart PostgreSQL");
			c->problems++;
			return 1;
		}
	}
	int applied = 0;
	if (!client(c) || cairn_migrate(c->cl, NULL, s->shards, &applied) != CAIRN_OK) {
		say("migrate: %s", c->cl ? cairn_client_errmsg(c->cl) : "cannot connect");
		c->problems++;
		return 1;
	}
	if (s->citus && migrate_citus(c) != 0) {
		c->problems++;
		return 1;
	}
	PGresult *r = q(c, SQL_SETUP, 0, NULL);
	if (!r) {
		c->problems++;
		return 1;
	}
	PQclear(r);
	int commit_ts =
	    q_int(c, "SELECT (current_setting('track_commit_timestamp') = 'on')::int") == 1;
	if (!commit_ts)
		say("track_commit_timestamp is off: only the journaled-at-start check is made");

	/* ---- the workload */
	c->ids = calloc((size_t)s->runs, sizeof *c->ids);
	c->sig_due = calloc((size_t)s->runs, sizeof *c->sig_due);
	c->kind = calloc((size_t)s->runs, 1);
	if (!c->ids || !c->sig_due || !c->kind) {
		say("out of memory");
		return 1;
	}
	for (int k = 0; k < s->poison;) {
		int i = (int)rnd_in(0, s->runs - 1);
		if (!c->kind[i])
			c->kind[i] = 1, k++;
	}

	/* ---- workers */
	for (int i = 0; i < s->workers; i++) {
		if (s->freeze && proxy_start(&c->w[i].px) != 0) {
			say("proxy: %s", strerror(errno));
			c->problems++;
			return 1;
		}
		worker_spawn(c, i);
	}

	/* ---- chaos */
	int64_t t0 = clock_mono_ms(), next_act = t0 + rnd_in(s->min_gap_ms, s->max_gap_ms),
	        last_print = t0;
	while (!interrupted) {
		int64_t t = clock_mono_ms();
		if (t - t0 >= s->duration_ms && c->enqueued >= s->runs)
			break;
		reap(c, 1);
		restart_due(c);
		enqueue_due(c, t0, t);
		signal_due(c, t);
		if (c->frozen_slot >= 0 && t >= c->thaw_at)
			thaw(c);
		if (t >= next_act && t - t0 < s->duration_ms) {
			act(c);
			next_act = clock_mono_ms() + rnd_in(s->min_gap_ms, s->max_gap_ms);
		}
		if (t - last_print >= 10000) {
			say("%" PRId64 " s: enqueued %d, signalled %d, finished %" PRId64,
			    (t - t0) / 1000, c->enqueued, c->signalled,
			    q_int(c,
			          "SELECT count(*) FROM cairn.runs WHERE finished_at IS NOT NULL"));
			last_print = t;
		}
		sleep_ms(20);
	}

	/* ---- calm: nothing frozen, every worker up, then the drain */
	thaw(c);
	int64_t calm = clock_mono_ms();
	say("chaos over after %" PRId64 " s: kill9=%d term=%d pgrestart=%d freeze=%d; draining",
	    (calm - t0) / 1000, c->n_kill9, c->n_term, c->n_pgrestart, c->n_freeze);
	int64_t drained_at = -1;
	last_print = calm;
	while (!interrupted) {
		int64_t t = clock_mono_ms();
		reap(c, 1);
		for (int i = 0; i < s->workers; i++)
			if (c->w[i].state == W_DOWN)
				c->w[i].restart_at =
				    c->w[i].restart_at < t ? c->w[i].restart_at : t;
		restart_due(c);
		signal_due(c, t);
		int64_t open = q_int(c, "SELECT count(*) FROM cairn.runs WHERE workflow = 'chaos'"
		                        " AND finished_at IS NULL");
		if (open == 0 && c->signalled + s->poison >= s->runs) {
			drained_at = t;
			break;
		}
		if (t - calm >= s->drain_ms) {
			say("gave up waiting for the drain after %" PRId64 " s: %" PRId64
			    " runs unfinished",
			    (t - calm) / 1000, open);
			break;
		}
		if (t - last_print >= 10000) {
			say("draining: %" PRId64 " runs unfinished", open);
			last_print = t;
		}
		sleep_ms(100);
	}
	double drain_s = (double)((drained_at >= 0 ? drained_at : clock_mono_ms()) - calm) / 1000.0;

	/* ---- stop the workers (SIGTERM, drain) */
	for (int i = 0; i < s->workers; i++)
		if (c->w[i].state == W_UP) {
			c->w[i].term_sent = 1;
			c->w[i].state = W_STOPPING;
			kill(c->w[i].pid, SIGTERM);
		}
	for (int64_t end = clock_mono_ms() + 30000; clock_mono_ms() < end;) {
		reap(c, 0);
		int left = 0;
		for (int i = 0; i < s->workers; i++)
			left += c->w[i].pid > 0;
		if (!left)
			break;
		sleep_ms(50);
	}
	for (int i = 0; i < s->workers; i++)
		if (c->w[i].pid > 0) {
			say("worker %d did not stop within 30 s of SIGTERM; killing it", i);
			c->w[i].kill_sent = 1;
			kill(c->w[i].pid, SIGKILL);
			c->problems++;
		}
	sleep_ms(100);
	reap(c, 0);

	/* ---- the detector must see what it is looking for: two made-up
	 * executions of a journaled step (one that saw the journal row, one that
	 * started after its commit) in a transaction that is rolled back */
	if (!detector_works(c, commit_ts)) {
		say("the re-execution detector did not flag made-up re-executions");
		c->problems++;
	}

	/* ---- the verdict */
	r = q(c, SQL_VERDICT, 0, NULL);
	if (!r) {
		c->problems++;
		return 1;
	}
	int64_t runs = strtoll(PQgetvalue(r, 0, 0), NULL, 10),
	        completed = strtoll(PQgetvalue(r, 0, 1), NULL, 10),
	        poison = strtoll(PQgetvalue(r, 0, 2), NULL, 10),
	        unfinished = strtoll(PQgetvalue(r, 0, 3), NULL, 10);
	PQclear(r);
	int64_t lost = (int64_t)s->runs - completed - poison;
	int64_t reexec = q_int(c, SQL_REEXEC);
	int64_t bad_journal = q_int(c, SQL_BAD_JOURNAL), no_effect = q_int(c, SQL_NO_EFFECT),
	        again = q_int(c, SQL_AGAIN);

	printf("chaos: runs=%" PRId64 " completed=%" PRId64 " poison=%" PRId64 " lost=%" PRId64
	       " reexecuted=%" PRId64 " drain_s=%.1f seed=%" PRIu64 "\n",
	       runs, completed, poison, lost, reexec, drain_s, s->seed);
	fflush(stdout);

	say("actions: kill9=%d term=%d pgrestart=%d freeze=%d; worker starts %d; exits: killed %d, "
	    "drained %d, cut off by the shutdown timeout %d, aborted (poison) %d, other %d",
	    c->n_kill9, c->n_term, c->n_pgrestart, c->n_freeze, c->n_starts, c->exit_killed,
	    c->exit_term_ok, c->exit_term_bad, c->exit_abort, c->exit_other);
	say("steps executed again before their result was journaled (allowed, at least once): "
	    "%" PRId64,
	    again);
	if (lost) {
		say("lost: %" PRId64 " (unfinished %" PRId64 ", poison runs expected %d, ended as "
		    "poison %" PRId64 ")",
		    lost, unfinished, s->poison, poison);
		r = q(
		    c,
		    "SELECT id, key, status, coalesce(error, '') FROM cairn.runs WHERE workflow = "
		    "'chaos' AND NOT ((status = 'completed' AND key NOT LIKE 'poison-%') OR (key "
		    "LIKE 'poison-%' AND status = 'failed' AND error ILIKE '%stopped%')) ORDER BY "
		    "id "
		    "LIMIT 10",
		    0, NULL);
		for (int i = 0; r && i < PQntuples(r); i++)
			say("  run %s %s: %s %s", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
			    PQgetvalue(r, i, 2), PQgetvalue(r, i, 3));
		PQclear(r);
		c->problems++;
	}
	if (reexec) {
		r = q(c, SQL_REEXEC_SHOW, 0, NULL);
		for (int i = 0; r && i < PQntuples(r); i++)
			say("  re-executed: run %s step %s by pid %s: saw %s journal rows; started "
			    "%s, "
			    "journal committed %s (finished_at %s)",
			    PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), PQgetvalue(r, i, 2),
			    PQgetvalue(r, i, 3), PQgetvalue(r, i, 4), PQgetvalue(r, i, 5),
			    PQgetvalue(r, i, 6));
		PQclear(r);
		c->problems++;
	}
	if (bad_journal) {
		say("%" PRId64 " completed runs have a journal other than a, nap, b, go, c",
		    bad_journal);
		c->problems++;
	}
	if (no_effect) {
		say("%" PRId64 " journaled steps have no recorded execution", no_effect);
		c->problems++;
	}
	if (runs != s->runs) {
		say("%" PRId64 " runs in the database, %d meant to be enqueued", runs, s->runs);
		c->problems++;
	}
	if (scan_logs(c))
		c->problems++;
	if (interrupted) {
		say("interrupted");
		c->problems++;
	}
	return c->problems ? 1 : 0;
}
