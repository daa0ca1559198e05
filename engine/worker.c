/*
 * worker.c - the cairn-worker daemon as a library: configuration, the
 * supervisor loop that keeps the database connection (reconnecting with
 * capped exponential backoff and jitter, logging each state change once),
 * and the lifecycle: start the HTTP endpoint and the loops, wait for SIGTERM
 * or SIGINT, drain within the shutdown timeout, join every thread.
 *
 * Owns: the supervisor thread and its PGconn, the HTTP daemon (http.c). The
 * lease, dispatch and execution loops plug in beside the supervisor.
 */
#include "worker.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backoff.h"
#include "client.h"
#include "db.h"
#include "lease.h"
#include "plugin.h"

/* Reconnects back off to at most this. */
#define RECONNECT_CAP_MS 15000

const double WORKER_STEP_BOUNDS_S[STEP_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                   0.1,   0.25,   0.5,   1,    2.5,   10};

int64_t worker_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t worker_unix_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t worker_reconnect_ms(int failures)
{
	return backoff_reconnect_ms(failures, RECONNECT_CAP_MS, randombytes_uniform(1000000) / 1e6);
}

void worker_stamp(worker_loop *l)
{
	atomic_store(&l->stamp_ms, worker_now_ms());
}

int64_t worker_epoch(cairn_worker *w, int group, int shard)
{
	if (group < 0 || group >= w->nown || shard < 0 || shard >= w->shards)
		return 0;
	int64_t e = atomic_load(&w->own[group].epoch[shard]);
	return e > 0 ? e : 0;
}

int worker_group_index(const cairn_worker *w, const char *group)
{
	for (int i = 0; i < w->nown; i++)
		if (strcmp(w->own[i].name, group) == 0)
			return i;
	return -1;
}

void worker_history_add(cairn_worker *w, const rebalance_rec *rec)
{
	pthread_mutex_lock(&w->mu);
	rebalance_rec *r = &w->history[w->nhistory++ % REBALANCE_HISTORY];
	*r = *rec;
	r->unix_ms = worker_unix_ms();
	pthread_mutex_unlock(&w->mu);
}

void worker_cond_init(pthread_cond_t *cv)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &ca);
	pthread_condattr_destroy(&ca);
}

void worker_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms)
{
	if (ms <= 0)
		return;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(ms / 1000);
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(cv, mu, &ts);
}

void worker_wait_locked(cairn_worker *w, int64_t ms)
{
	if (!w->stopping)
		worker_cond_wait_ms(&w->cv, &w->mu, ms);
}

int cairn_worker_new(int argc, char **argv, cairn_worker **out)
{
	*out = NULL;
	if (sodium_init() < 0)
		return CAIRN_ENOMEM;
	cairn_worker *w = calloc(1, sizeof *w);
	if (!w)
		return CAIRN_ENOMEM;
	*out = w;
	pthread_mutex_init(&w->mu, NULL);
	worker_cond_init(&w->cv);
	w->log = (logger){.level = LOG_INFO, .format = LOG_LOGFMT, .fd = 2};
	snprintf(w->state, sizeof w->state, "starting");
	snprintf(w->not_ready, sizeof w->not_ready, "starting");
	char host[64] = "localhost";
	gethostname(host, sizeof host - 1);
	snprintf(w->name, sizeof w->name, "%s:%d", host, (int)getpid());
	if (config_load(&w->cfg, argc, argv, &w->err) < 0)
		return CAIRN_EINVAL;
	w->log.level = w->cfg.log_level;
	w->log.format = w->cfg.log_format;
	return CAIRN_OK;
}

const char *cairn_worker_errmsg(const cairn_worker *w)
{
	return w ? buf_str(&w->err) : "out of memory";
}

const char *cairn_worker_config_text(cairn_worker *w)
{
	buf_reset(&w->cfgtext);
	config_describe(&w->cfg, &w->cfgtext);
	return buf_str(&w->cfgtext);
}

static buf settings_help;
static void settings_help_make(void)
{
	config_help(&settings_help);
}

const char *cairn_worker_settings_help(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, settings_help_make);
	return buf_str(&settings_help);
}

void cairn_worker_stop(cairn_worker *w)
{
	pthread_mutex_lock(&w->mu);
	w->stopping = 1;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

void cairn_worker_free(cairn_worker *w)
{
	if (!w)
		return;
	dispatch_free(w);
	singletons_free(w);
	for (int i = 0; i < w->nown; i++) {
		free(w->own[i].epoch);
		free(w->own[i].busy);
	}
	free(w->flows);
	config_free(&w->cfg);
	buf_free(&w->err);
	buf_free(&w->cfgtext);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	free(w);
}

static worker_loop *loop_add(cairn_worker *w, const char *name, int64_t interval_ms)
{
	worker_loop *l = &w->loops[w->nloops++];
	l->name = name;
	l->interval_ms = interval_ms;
	worker_stamp(l);
	return l;
}

/* ------------------------------------------------------------ supervisor */

static void set_not_ready(cairn_worker *w, const char *reason)
{
	pthread_mutex_lock(&w->mu);
	snprintf(w->not_ready, sizeof w->not_ready, "%s", reason);
	pthread_mutex_unlock(&w->mu);
}

/* Checks the schema and the shard count; 0 ready, -1 not ready, -2 fatal. */
static int check_schema(cairn_worker *w, PGconn *c)
{
	buf err = BUF_INIT;
	PGresult *r = db_exec(
	    c, &err, "SELECT value::int FROM cairn.settings WHERE name = 'shards_per_group'", 0,
	    NULL);
	int rc = 0;
	if (!r) {
		set_not_ready(w, "the database has no cairn schema: run `cairn migrate`");
		rc = -1;
	} else if (PQntuples(r) == 0) {
		set_not_ready(w, "shards_per_group is not recorded: run `cairn migrate`");
		rc = -1;
	} else {
		int shards = db_get_int(r, 0, 0);
		if (w->cfg.shards && w->cfg.shards != shards) {
			buf_printf(
			    &w->err,
			    "CAIRN_SHARDS is %d but the database records shards_per_group = %d: "
			    "a shard count cannot change once runs are stored",
			    w->cfg.shards, shards);
			rc = -2;
		} else {
			pthread_mutex_lock(&w->mu);
			w->shards = shards;
			pthread_mutex_unlock(&w->mu);
		}
	}
	PQclear(r);
	buf_free(&err);
	return rc;
}

typedef struct supervisor {
	cairn_worker *w;
	worker_loop *loop;
	pthread_t thread;
	_Atomic int done;
} supervisor;

/* Sleeps ms in slices of the loop's interval, stamping its heartbeat. */
static void nap(supervisor *s, int64_t ms)
{
	cairn_worker *w = s->w;
	int64_t until = worker_now_ms() + ms;
	pthread_mutex_lock(&w->mu);
	for (;;) {
		worker_stamp(s->loop);
		int64_t left = until - worker_now_ms();
		if (w->wake_supervisor) {
			w->wake_supervisor = 0; /* a singleton ended: look at it now */
			break;
		}
		if (w->stopping || left <= 0)
			break;
		worker_wait_locked(w, left < s->loop->interval_ms ? left : s->loop->interval_ms);
	}
	pthread_mutex_unlock(&w->mu);
}

static int is_stopping(cairn_worker *w)
{
	pthread_mutex_lock(&w->mu);
	int s = w->stopping;
	pthread_mutex_unlock(&w->mu);
	return s;
}

static void set_ready(cairn_worker *w, int connected, const char *reason)
{
	pthread_mutex_lock(&w->mu);
	w->db_connected = connected;
	snprintf(w->not_ready, sizeof w->not_ready, "%s", reason);
	pthread_mutex_unlock(&w->mu);
}

/* Detaches: forget every shard, close the lease connection, count it. */
static void detach(supervisor *s, lease *l, PGconn **conn, const char *why)
{
	cairn_worker *w = s->w;
	if (l->runner_id || l->rebalanced) {
		atomic_fetch_add(&w->m.detachments, 1);
		/* Shards held when the connection went: lost, not released. */
		atomic_fetch_add(&w->m.lease_losses, (uint64_t)atomic_load(&w->m.shards_owned));
		log_kv(&w->log, LOG_WARN, "detached: forgot every shard", "reason", why, NULL);
	}
	lease_forget(l);
	pthread_mutex_lock(&w->mu);
	w->runner_id = 0;
	pthread_mutex_unlock(&w->mu);
	singletons_sync(w); /* none is owned now: stop them */
	if (*conn)
		PQfinish(*conn);
	*conn = NULL;
	l->conn = NULL;
	char reason[256];
	snprintf(reason, sizeof reason, "detached: %s", why);
	set_ready(w, 0, reason);
}

/*
 * The supervisor owns the lease connection: connect (with backoff), check the
 * schema, wait for the re-attach window, register, then heartbeat and
 * rebalance until stopped; on stop release every shard and deregister.
 */
static void *supervisor_main(void *arg)
{
	supervisor *s = arg;
	cairn_worker *w = s->w;
	PGconn *conn = NULL;
	lease l = {0};
	int failures = 0, ever_connected = 0, logged_down = 0, hb_failures = 0, have_lease = 0;
	int64_t healthy_since = 0, next_heartbeat = 0;
	while (!is_stopping(w)) {
		worker_stamp(s->loop);
		if (!conn) {
			buf err = BUF_INIT;
			conn = db_connect(w->cfg.database_url, "cairn-worker lease", &err);
			if (!conn) {
				if (!logged_down) {
					log_kv(&w->log, LOG_WARN,
					       "database unreachable; retrying with backoff",
					       "error", buf_str(&err), NULL);
					logged_down = 1;
				}
				char reason[512];
				snprintf(reason, sizeof reason, "database unreachable: %s",
				         buf_str(&err));
				set_ready(w, 0, reason);
				buf_free(&err);
				nap(s, worker_reconnect_ms(failures++));
				continue;
			}
			buf_free(&err);
			if (ever_connected)
				atomic_fetch_add(&w->m.db_reconnects, 1);
			healthy_since = worker_now_ms();
			failures = 0;
			logged_down = 0;
			hb_failures = 0;
			log_kv(&w->log, LOG_INFO, "database connected", NULL);
		}
		l.conn = conn;
		if (!l.runner_id) {
			int sc = check_schema(w, conn);
			if (sc == -2) {
				log_kv(&w->log, LOG_ERROR, "configuration mismatch; stopping",
				       "error", buf_str(&w->err), NULL);
				pthread_mutex_lock(&w->mu);
				w->fatal = 1;
				w->stopping = 1;
				pthread_cond_broadcast(&w->cv);
				pthread_mutex_unlock(&w->mu);
				break;
			}
			if (!db_ok(conn)) {
				detach(s, &l, &conn, "lease connection lost");
				continue;
			}
			if (sc == -1) {
				nap(s, w->cfg.heartbeat_interval_ms);
				continue;
			}
			if (!have_lease) {
				if (lease_init(&l, w, w->shards) < 0)
					break;
				l.conn = conn;
				have_lease = 1;
			}
			/* Re-attach only after storage has been healthy for the window. */
			int64_t wait = healthy_since +
			               (ever_connected ? w->cfg.reattach_window_ms : 0) -
			               worker_now_ms();
			if (wait > 0) {
				set_ready(w, 1, "waiting for the re-attach window");
				nap(s, wait);
				continue;
			}
			ever_connected = 1;
		}
		int64_t now = worker_now_ms();
		if (now >= next_heartbeat) {
			next_heartbeat = now + w->cfg.heartbeat_interval_ms;
			if (lease_heartbeat(&l) < 0) {
				if (!db_ok(conn) || ++hb_failures >= w->cfg.detach_after)
					detach(s, &l, &conn,
					       db_ok(conn) ? "heartbeats failing"
					                   : "lease connection lost");
				continue;
			}
			hb_failures = 0;
		}
		if (now >= l.next_rebalance_ms) {
			int changed = lease_rebalance(&l);
			if (changed < 0 && !db_ok(conn)) {
				detach(s, &l, &conn, "lease connection lost");
				continue;
			}
			l.next_rebalance_ms =
			    worker_now_ms() + (changed > 0 ? w->cfg.rebalance_debounce_ms
			                                   : w->cfg.rebalance_interval_ms);
			if (changed >= 0)
				set_ready(w, 1, "");
		}
		singletons_sync(w);
		int64_t next =
		    l.next_rebalance_ms < next_heartbeat ? l.next_rebalance_ms : next_heartbeat;
		int64_t restart = singletons_next_ms(w);
		if (restart && restart < next)
			next = restart;
		nap(s, next - worker_now_ms());
	}
	if (conn && db_ok(conn) && l.runner_id)
		lease_release_all(&l);
	singletons_stop_all(w);
	if (conn)
		PQfinish(conn);
	lease_free(&l);
	set_ready(w, 0, "stopped");
	atomic_store(&s->done, 1);
	return NULL;
}

/* ------------------------------------------------------------- lifecycle */

/* While draining: waits up to ms for SIGTERM or SIGINT, and exits at once
 * if one comes. */
static void second_signal_exits(cairn_worker *w, const sigset_t *sigs, long ms)
{
	int sig = sigtimedwait(sigs, NULL, &(struct timespec){0, ms * 1000000L});
	if (sig == SIGTERM || sig == SIGINT) {
		log_kv(&w->log, LOG_WARN, "second signal: exiting now", NULL);
		_exit(1);
	}
}

int cairn_worker_run(cairn_worker *w)
{
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	w->start_mono_ms = worker_now_ms();
	w->start_unix_ms = worker_unix_ms();
	supervisor sup = {.w = w};
	sup.loop = loop_add(w, "supervisor", w->cfg.heartbeat_interval_ms);

	buf perr = BUF_INIT;
	if (plugin_load_all(w, w->cfg.plugins, &perr) < 0) {
		buf_reset(&w->err);
		buf_puts(&w->err, buf_str(&perr));
		buf_free(&perr);
		log_kv(&w->log, LOG_ERROR, "cannot load a plugin", "error", buf_str(&w->err), NULL);
		return CAIRN_EINVAL;
	}
	buf_free(&perr);
	singletons_register_builtin(w);
	if (http_start(w) < 0) {
		log_kv(&w->log, LOG_ERROR, "cannot start the HTTP endpoint", "addr",
		       w->cfg.http_addr, "error", buf_str(&w->err), NULL);
		return CAIRN_EINVAL;
	}
	char port[16];
	snprintf(port, sizeof port, "%d", w->http_port);
	/* An advertised address with port 0 means "the port we were given". */
	size_t alen = strlen(w->cfg.advertise_addr);
	if (alen >= 2 && strcmp(w->cfg.advertise_addr + alen - 2, ":0") == 0) {
		char *a = malloc(alen + 8);
		if (a) {
			snprintf(a, alen + 8, "%.*s:%d", (int)(alen - 2), w->cfg.advertise_addr,
			         w->http_port);
			free(w->cfg.advertise_addr);
			w->cfg.advertise_addr = a;
		}
	}
	if (dispatch_start(w) < 0) {
		buf_reset(&w->err);
		buf_puts(&w->err, "cannot start the dispatcher: out of memory");
		http_stop(w);
		return CAIRN_ENOMEM;
	}
	log_kv(&w->log, LOG_INFO, "cairn-worker started", "version", CAIRN_VERSION, "runner",
	       w->name, "http_addr", w->cfg.http_addr, "http_port", port, NULL);
	pthread_create(&sup.thread, NULL, supervisor_main, &sup);
	pthread_mutex_lock(&w->mu);
	snprintf(w->state, sizeof w->state, "running");
	pthread_mutex_unlock(&w->mu);

	/* Wait for a signal or a stop request. */
	struct timespec tick = {0, 100 * 1000000L};
	const char *why = "stop requested";
	for (;;) {
		int sig = sigtimedwait(&sigs, NULL, &tick);
		if (sig == SIGTERM || sig == SIGINT) {
			why = sig == SIGTERM ? "SIGTERM" : "SIGINT";
			break;
		}
		if (is_stopping(w))
			break;
	}
	log_kv(&w->log, LOG_INFO, "draining", "reason", why, NULL);
	pthread_mutex_lock(&w->mu);
	snprintf(w->state, sizeof w->state, "draining");
	snprintf(w->not_ready, sizeof w->not_ready, "draining");
	pthread_mutex_unlock(&w->mu);

	/* Runs stop at their next durable point and their writes are committed
	 * while the leases still hold; then the supervisor releases everything. */
	int64_t deadline = worker_now_ms() + w->cfg.shutdown_timeout_ms;
	int finished = 0, cut = 0;
	dispatch_stop_begin(w);
	while (dispatch_executing(w) > 0 && worker_now_ms() < deadline)
		second_signal_exits(w, &sigs, 20);
	dispatch_stop_end(w, &finished, &cut);
	pthread_mutex_lock(&w->mu);
	w->stopping = 1;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);

	/* A second signal exits at once. Releasing gets at least two seconds. */
	if (deadline < worker_now_ms() + 2000)
		deadline = worker_now_ms() + 2000;
	while (!atomic_load(&sup.done) && worker_now_ms() < deadline)
		second_signal_exits(w, &sigs, 20);
	int clean = atomic_load(&sup.done);
	if (clean)
		pthread_join(sup.thread, NULL);
	http_stop(w);
	pthread_mutex_lock(&w->mu);
	snprintf(w->state, sizeof w->state, "stopped");
	pthread_mutex_unlock(&w->mu);
	char fin[24], cutoff[24];
	snprintf(fin, sizeof fin, "%d", finished);
	snprintf(cutoff, sizeof cutoff, "%d", cut);
	log_kv(&w->log, LOG_INFO, "stopped", "finished_cleanly", fin, "cut_off", cutoff, NULL);
	if (!clean || cut) {
		/* The supervisor is stuck in a database call past the deadline. */
		log_kv(&w->log, LOG_WARN, "shutdown timeout passed with a loop still busy", NULL);
		_exit(0);
	}
	return w->fatal ? CAIRN_ESCHEMA : CAIRN_OK;
}
