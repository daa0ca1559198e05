/*
 * worker.c - the cairn-worker daemon as a library: configuration, the
 * supervisor loop that keeps the lease connection (reconnecting with capped
 * exponential backoff and jitter, logging each state change once), and the
 * lifecycle: start the modules and the HTTP endpoint, wait for SIGTERM or
 * SIGINT, drain within the shutdown timeout, join every thread. It never
 * exits the process: cairn_worker_run returns, and the program decides.
 *
 * Owns: every module of the worker (worker.h), the supervisor thread and
 * its lease connection. The hooks here are the only place modules meet:
 * the lease loop's release hook stops dispatch and singletons, and a
 * singleton that ends wakes the supervisor.
 */
#include "worker.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "client.h"
#include "clock.h"
#include "db.h"
#include "notify.h"
#include "plugin.h"

#define WORKER_STATE_NAME(id, name) [id] = name,
static const char *const WORKER_STATE_NAMES[] = {WORKER_STATE_MAP(WORKER_STATE_NAME)};
#undef WORKER_STATE_NAME

const char *worker_state_name(worker_state s)
{
	return WORKER_STATE_NAMES[s];
}

/* ------------------------------------------------------------ creation */

/* The worker before its configuration: 0, or -CAIRN_ENOMEM (*out may be set). */
static int worker_alloc(cairn_worker **out)
{
	*out = NULL;
	if (sodium_init() < 0)
		return -CAIRN_ENOMEM;
	cairn_worker *w = calloc(1, sizeof *w);
	if (!w)
		return -CAIRN_ENOMEM;
	*out = w;
	pthread_mutex_init(&w->mu, NULL);
	if (clock_cond_init(&w->cv) < 0)
		return -CAIRN_ENOMEM;
	w->log = (logger){.level = LOG_INFO, .format = LOG_LOGFMT, .fd = 2};
	w->state = WORKER_STARTING;
	snprintf(w->not_ready, sizeof w->not_ready, "starting");
	char host[64] = "localhost";
	gethostname(host, sizeof host - 1);
	snprintf(w->name, sizeof w->name, "%s:%d", host, (int)getpid());
	return 0;
}

static int poke_self(void *arg, int64_t runner, const char *path)
{
	cairn_worker *w = arg;
	if (!runner || lease_runner_id(w->lease) != runner)
		return 0;
	status_poke(&w->status, path);
	return 1;
}

static int push_self(void *arg, int64_t runner, int64_t run)
{
	cairn_worker *w = arg;
	return runner && lease_runner_id(w->lease) == runner &&
	       dispatch_push(w->status.dispatch, run);
}

/* Once the configuration is loaded: the registry (with the built-in
 * singletons, so that a user's singleton of the same name is refused at its
 * registration) and the shard map. 0 or a negated status. */
static int worker_setup(cairn_worker *w)
{
	w->log.level = w->cfg.log_level;
	w->log.format = w->cfg.log_format;
	w->backlog_env = (backlog_env){.cfg = &w->cfg, .log = &w->log};
	if (metrics_init(&w->m, w->cfg.metrics_max_workflows) < 0 ||
	    backlog_new(&w->backlog_env, &w->backlog) < 0 || registry_new(&w->reg) < 0 ||
	    shardmap_new(w->cfg.groups, w->cfg.ngroups, &w->map) < 0)
		return -CAIRN_ENOMEM;
	/* Each workflow takes its metrics slot as it registers. */
	registry_count_in(w->reg, &w->m);
	w->maint = (maint_env){.cfg = &w->cfg,
	                       .log = &w->log,
	                       .m = &w->m,
	                       .poke_self = poke_self,
	                       .push_self = push_self,
	                       .poke_arg = w,
	                       .backlog = w->backlog};
	return maint_register(w->reg, &w->maint, &w->err);
}

int cairn_worker_new(int argc, char **argv, cairn_worker **out)
{
	int rc = worker_alloc(out);
	if (!rc)
		rc = config_load(&(*out)->cfg, argc, argv, &(*out)->err);
	if (!rc)
		rc = worker_setup(*out);
	return -rc;
}

int cairn_worker_new_with(const cairn_worker_settings *s, cairn_worker **out)
{
	cairn_worker_settings none = {0};
	if (!s)
		s = &none;
	int rc = worker_alloc(out);
	if (!rc)
		rc = config_load_settings(&(*out)->cfg, s->database_url, s->settings,
		                          s->from_environment, &(*out)->err);
	if (!rc)
		rc = worker_setup(*out);
	return -rc;
}

const char *cairn_worker_errmsg(const cairn_worker *w)
{
	return w ? buf_str(&w->err) : "out of memory";
}

const char *cairn_worker_setting(const cairn_worker *w, const char *name)
{
	return config_text(&w->cfg, name);
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

int cairn_workflow_register(cairn_worker *w, const char *name, cairn_workflow_fn fn,
                            const cairn_workflow_opts *opts)
{
	return -registry_add_workflow(w->reg, name, fn, opts, &w->err);
}

int cairn_singleton_register(cairn_worker *w, const char *name, cairn_singleton_fn fn, void *arg,
                             const cairn_singleton_opts *opts)
{
	singleton_def def = {.fn = fn, .arg = arg, .backoff_ms = w->cfg.singleton_backoff_ms};
	buf_reset(&w->err);
	if (name)
		snprintf(def.name, sizeof def.name, "%s", name);
	if (name && strlen(name) > NAME_MAX_BYTES) {
		char perr[PARSE_ERR_MAX];
		parse_check_name("singleton name", name, perr);
		buf_puts(&w->err, perr);
		return CAIRN_EINVAL;
	}
	if (opts && opts->group && (def.group = shardmap_group_index(w->map, opts->group)) < 0) {
		buf_printf(&w->err,
		           "singleton %s: group \"%s\" is not one of CAIRN_SHARD_GROUPS (%s)",
		           name ? name : "(null)", opts->group, w->cfg.groups_text);
		return CAIRN_EINVAL;
	}
	if (opts && opts->backoff_ms < 0) {
		buf_printf(&w->err, "singleton %s: backoff_ms is %" PRId64 "; accepted: >= 0",
		           name ? name : "(null)", opts->backoff_ms);
		return CAIRN_EINVAL;
	}
	if (opts && opts->backoff_ms)
		def.backoff_ms = opts->backoff_ms;
	return -registry_add_singleton(w->reg, name ? &def : &(singleton_def){0}, &w->err);
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
	dispatch_free(w->dispatch);
	tracer_stop(w->tracer, 0);
	singletons_free(w->singletons);
	lease_free(w->lease);
	shardmap_free(w->map);
	registry_free(w->reg);
	backlog_free(w->backlog);
	metrics_free(&w->m);
	config_free(&w->cfg);
	buf_free(&w->err);
	buf_free(&w->cfgtext);
	api_free(w->api);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	free(w);
}

/* ----------------------------------------------------------------- hooks */

/* The lease loop is about to unlock these shards: stop their work. */
static void release_hook(void *arg, int group, const int *shards, int n, int64_t deadline_ms)
{
	cairn_worker *w = arg;
	dispatch_drop_queued(w->dispatch, group);
	if (shardmap_wait_idle(w->map, group, shards, n, deadline_ms) < 0)
		log_kv(&w->log, LOG_WARN,
		       "released shards with runs still in flight (their writes are fenced)",
		       "group", shardmap_group_name(w->map, group), NULL);
	singletons_stop_shards(w->singletons, group, shards, n);
}

/* Every shard was forgotten: stop the singletons that ran on them. */
static void forget_hook(void *arg)
{
	singletons_sync(((cairn_worker *)arg)->singletons);
}

/* A singleton returned: the supervisor looks at restarts now. */
static void wake_supervisor(void *arg)
{
	cairn_worker *w = arg;
	pthread_mutex_lock(&w->mu);
	w->wake_supervisor = 1;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

/* The relay said the live runners changed (their fingerprint): rebalance
 * now, unless this runner has seen that membership already. Any thread. */
static void members_changed(void *arg, const char *fingerprint)
{
	cairn_worker *w = arg;
	if (!lease_members_seen(w->lease, fingerprint))
		return;
	atomic_fetch_add(&w->m.members_told, 1);
	pthread_mutex_lock(&w->mu);
	w->members_changed = 1;
	w->wake_supervisor = 1;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

/* The worker's state for its HTTP endpoint (status_env.view); status.c
 * holds w->mu. */
static void view_locked(void *arg, status_view *v)
{
	const cairn_worker *w = arg;
	*v = (status_view){.state = worker_state_name(w->state),
	                   .not_ready = w->not_ready,
	                   .stopping = w->stopping,
	                   .db_connected = w->db_connected};
}

/* A plugin's cairn_plugin_init, with this worker to register on
 * (plugin_env.init). */
static int init_plugin(void *arg, cairn_plugin_init_fn init, const char **why)
{
	cairn_worker *w = arg;
	int rc = init(w);
	if (rc != 0)
		*why = cairn_worker_errmsg(w);
	return rc;
}

/* ------------------------------------------------------------ supervisor */

static void set_ready(cairn_worker *w, int connected, const char *reason)
{
	pthread_mutex_lock(&w->mu);
	if (connected >= 0)
		w->db_connected = connected;
	snprintf(w->not_ready, sizeof w->not_ready, "%s", reason);
	pthread_mutex_unlock(&w->mu);
}

static int is_stopping(cairn_worker *w)
{
	pthread_mutex_lock(&w->mu);
	int s = w->stopping;
	pthread_mutex_unlock(&w->mu);
	return s;
}

/*
 * On Citus: a coordinator session cut between the two phases of a write to
 * a reference table (a heartbeat writes cairn.runners) leaves the
 * transaction prepared on the worker nodes, holding the table's write lock
 * on the first of them, until Citus's maintenance daemon recovers it every
 * citus.recover_2pc_interval (60 s by default). Until then every runner's
 * heartbeat waits, and a runner that heartbeats for longer than the TTL
 * counts as gone. Said once per worker when the interval is over half the
 * TTL, or recovery is off.
 */
static void check_citus_recovery(cairn_worker *w, PGconn *c)
{
	buf err = BUF_INIT;
	PGresult *r = db_exec(c, &err,
	                      "SELECT setting::bigint FROM pg_settings "
	                      "WHERE name = 'citus.recover_2pc_interval'",
	                      0, NULL);
	if (r && PQntuples(r) == 1) {
		int64_t ms = db_get_i64(r, 0, 0);
		if (ms < 0 || ms > w->cfg.runner_ttl_ms / 2) {
			char v[24], ttl[24];
			log_kv(&w->log, LOG_WARN,
			       "citus.recover_2pc_interval is over half of CAIRN_RUNNER_TTL: "
			       "a session cut in a two-phase commit holds every heartbeat "
			       "until it is recovered; set it to 1s on the coordinator "
			       "(docs/deployment.md, \"On Citus\")",
			       "recover_2pc_interval_ms", db_i64(v, ms), "runner_ttl_ms",
			       db_i64(ttl, w->cfg.runner_ttl_ms), NULL);
		}
	}
	PQclear(r);
	buf_free(&err);
}

/* Checks the schema and the shard count: 0 ready, -CAIRN_ESCHEMA not ready
 * yet (not migrated), -CAIRN_EINVAL fatal (a shard count mismatch, a schema
 * newer than this build), -CAIRN_EDB. */
static int check_schema(cairn_worker *w, PGconn *c)
{
	buf err = BUF_INIT;
	db_settings st;
	int rc = db_read_settings(c, &st, &err), shards = st.shards;
	if (rc == -CAIRN_ESCHEMA) {
		set_ready(w, -1, buf_str(&err));
	} else if (!rc && w->cfg.shards && w->cfg.shards != shards) {
		buf_reset(&w->err);
		buf_printf(&w->err,
		           "CAIRN_SHARDS is %d but the database records shards_per_group = %d: "
		           "a shard count cannot change once runs are stored",
		           w->cfg.shards, shards);
		rc = -CAIRN_EINVAL;
	} else if (!rc && st.schema_version > migrate_newest_version()) {
		buf_reset(&w->err);
		buf_printf(&w->err,
		           "the database's schema is at migration %04d, newer than this "
		           "cairn-worker, which knows migrations up to %04d: run the version of "
		           "cairn that migrated it",
		           st.schema_version, migrate_newest_version());
		rc = -CAIRN_EINVAL;
	} else if (!rc && shardmap_set_shards(w->map, shards) < 0) {
		buf_reset(&w->err);
		buf_printf(&w->err, "cannot size the shard map for %d shards", shards);
		rc = -CAIRN_EINVAL;
	}
	if (!rc && st.nparts > 1 && !w->citus_checked) {
		w->citus_checked = 1;
		check_citus_recovery(w, c);
	}
	buf_free(&err);
	return rc;
}

typedef struct supervisor {
	cairn_worker *w;
	watch *loop;
	pthread_t thread;
	_Atomic int done;
	_Atomic int zombies; /* singleton threads still running after the stop */
	PGconn *conn;
	int ever_connected, hb_failures, rb_failures;
	int64_t healthy_since, next_heartbeat, next_rebalance, last_rebalance;
} supervisor;

/* Sleeps ms in slices of the loop's interval, stamping its heartbeat; wakes
 * early when a singleton is due (a restart, a fence retry, a stop deadline). */
static void nap(supervisor *s, int64_t ms)
{
	cairn_worker *w = s->w;
	int64_t until = clock_mono_ms() + ms;
	int64_t due = singletons_next_ms(w->singletons);
	if (due && due < until)
		until = due;
	pthread_mutex_lock(&w->mu);
	for (;;) {
		watch_stamp(s->loop);
		int64_t left = until - clock_mono_ms();
		if (w->wake_supervisor) {
			w->wake_supervisor = 0; /* a singleton ended, or the members changed */
			break;
		}
		if (w->stopping || left <= 0)
			break;
		clock_cond_wait_ms(&w->cv, &w->mu,
		                   left < s->loop->interval_ms ? left : s->loop->interval_ms);
	}
	pthread_mutex_unlock(&w->mu);
}

/* Detaches: forget every shard, close the lease connection, count it. */
static void detach(supervisor *s, const char *why)
{
	cairn_worker *w = s->w;
	if (lease_runner_id(w->lease) || lease_rebalanced(w->lease)) {
		atomic_fetch_add(&w->m.detachments, 1);
		/* Shards held when the connection went: lost, not released. */
		atomic_fetch_add(&w->m.lease_losses, (uint64_t)shardmap_owned(w->map));
		log_kv(&w->log, LOG_WARN, "detached: forgot every shard", "reason", why, NULL);
	}
	lease_forget(w->lease);
	singletons_sync(w->singletons); /* none is owned now: stop them */
	PQfinish(s->conn);
	s->conn = NULL;
	lease_use(w->lease, NULL);
	char reason[256];
	snprintf(reason, sizeof reason, "detached: %s", why);
	set_ready(w, 0, reason);
}

/* Connects the lease connection; 0, or -CAIRN_EDB after a nap. */
static int connect_lease(supervisor *s, int *failures, int *logged_down)
{
	cairn_worker *w = s->w;
	buf err = BUF_INIT;
	s->conn = db_connect(w->cfg.database_url, "cairn-worker lease", &err);
	/* A lease statement must be done well within the TTL, or the others
	 * think us dead: the server cancels it at half the TTL (lock waits at a
	 * quarter), and the supervisor gives up waiting at the TTL. */
	/* Its writes (heartbeats, leases) need not wait for the disk: a crash
	 * of the database ends every session and so every lease anyway, and an
	 * epoch bump is durable before any commit fenced by it is. */
	if (s->conn &&
	    db_session_limits(s->conn, w->cfg.runner_ttl_ms / 2, w->cfg.runner_ttl_ms / 4,
	                      DB_SESSION_NO_DISK_WAIT, &err) < 0) {
		PQfinish(s->conn);
		s->conn = NULL;
	}
	/* The start checked the pooling if the database was up then; a
	 * connection made later (a reconnect, a database that came up late)
	 * behind a pooler is checked again, and never attaches through
	 * transaction pooling. */
	int pooled = s->conn ? db_behind_pooler(s->conn, &err) : 0, refused = 0;
	if (pooled > 0)
		refused =
		    db_check_session_pooling(s->conn, w->cfg.database_url, &err) == -CAIRN_ESTATE;
	if (pooled < 0 || refused) {
		PQfinish(s->conn);
		s->conn = NULL;
	}
	if (refused)
		log_kv(&w->log, LOG_ERROR, "refusing to attach", "error", buf_str(&err), NULL);
	else if (!s->conn && !*logged_down) {
		log_kv(&w->log, LOG_WARN, "database unreachable; retrying with backoff", "error",
		       buf_str(&err), NULL);
		*logged_down = 1;
	}
	if (!s->conn) {
		char reason[1024];
		snprintf(reason, sizeof reason, "%s: %s",
		         refused ? "refusing to attach" : "database unreachable", buf_str(&err));
		set_ready(w, 0, reason);
		buf_free(&err);
		nap(s, db_backoff_ms((*failures)++));
		return -CAIRN_EDB;
	}
	buf_free(&err);
	if (s->ever_connected)
		atomic_fetch_add(&w->m.db_reconnects, 1);
	s->healthy_since = clock_mono_ms();
	*failures = *logged_down = s->hb_failures = s->rb_failures = 0;
	log_kv(&w->log, LOG_INFO, "database connected", NULL);
	lease_use(w->lease, s->conn);
	return 0;
}

/* Before registering: the schema is there and the re-attach window passed.
 * 0 with *go set when it may register now (otherwise it napped or detached),
 * or -CAIRN_EINVAL for a fatal mismatch. */
static int ready_to_attach(supervisor *s, int *go)
{
	cairn_worker *w = s->w;
	*go = 0;
	int sc = check_schema(w, s->conn);
	if (sc == -CAIRN_EINVAL)
		return sc;
	if (!db_ok(s->conn)) {
		detach(s, "lease connection lost");
		return 0;
	}
	if (sc) {
		nap(s, w->cfg.heartbeat_interval_ms);
		return 0;
	}
	/* Re-attach only after storage has been healthy for the window. */
	int64_t wait = s->healthy_since + (s->ever_connected ? w->cfg.reattach_window_ms : 0) -
	               clock_mono_ms();
	if (wait > 0) {
		set_ready(w, 1, "waiting for the re-attach window");
		nap(s, wait);
		return 0;
	}
	s->ever_connected = 1;
	*go = 1;
	return 0;
}

/* Takes the flag the members hook set. */
static int take_members_changed(cairn_worker *w)
{
	pthread_mutex_lock(&w->mu);
	int changed = w->members_changed;
	w->members_changed = 0;
	pthread_mutex_unlock(&w->mu);
	return changed;
}

/*
 * One heartbeat and rebalance round when due; whether it detached. A round
 * rebalances when the membership changed (heard on cairn_members or seen by
 * its own heartbeat), again after CAIRN_REBALANCE_DEBOUNCE while it wants
 * shards their old owner still holds, and otherwise every
 * CAIRN_REBALANCE_INTERVAL as a fallback.
 */
static int lease_round_detached(supervisor *s)
{
	cairn_worker *w = s->w;
	int64_t now = clock_mono_ms();
	int64_t soon = s->last_rebalance + w->cfg.rebalance_debounce_ms;
	if (take_members_changed(w) && s->next_rebalance > soon)
		s->next_rebalance = soon;
	if (now >= s->next_heartbeat) {
		int changed = 0;
		if (lease_heartbeat(w->lease, &changed) < 0) {
			s->next_heartbeat = now + w->cfg.heartbeat_interval_ms;
			if (!db_ok(s->conn) || ++s->hb_failures >= w->cfg.detach_after) {
				detach(s, db_ok(s->conn) ? "heartbeats failing"
				                         : "lease connection lost");
				return 1;
			}
			return 0;
		}
		s->hb_failures = 0;
		s->next_heartbeat = now + lease_beat_interval(w->lease);
		if (changed && s->next_rebalance > soon)
			s->next_rebalance = soon;
	}
	if (now >= s->next_rebalance) {
		int changed = 0, rc = lease_rebalance(w->lease, &changed);
		/* A round that keeps failing (a statement or lock timeout each
		 * time) holds shards it cannot release: detach as for heartbeats. */
		if (rc && (!db_ok(s->conn) || ++s->rb_failures >= w->cfg.detach_after)) {
			detach(s, db_ok(s->conn) ? "rebalance rounds failing"
			                         : "lease connection lost");
			return 1;
		}
		if (!rc)
			s->rb_failures = 0;
		if (changed)
			dispatch_shards_taken(w->dispatch); /* claim what the new shards hold */
		s->last_rebalance = clock_mono_ms();
		s->next_rebalance = s->last_rebalance + (rc ? w->cfg.heartbeat_interval_ms
		                                         : changed || lease_pending(w->lease)
		                                             ? w->cfg.rebalance_debounce_ms
		                                             : w->cfg.rebalance_interval_ms);
		if (!rc) {
			/* Ready, unless backends that are no runner's hold shards
			 * of ours that we may not take back. */
			buf why = BUF_INIT;
			set_ready(w, 1, lease_outsiders(w->lease, &why) ? buf_str(&why) : "");
			buf_free(&why);
		}
	}
	return 0;
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
	int failures = 0, logged_down = 0;
	db_set_wait_limit(w->cfg.runner_ttl_ms); /* this thread's statements: the lease's */
	while (!is_stopping(w)) {
		watch_stamp(s->loop);
		/* Also while detached: reap stopped singletons, declare zombies. */
		singletons_sync(w->singletons);
		if (!s->conn && connect_lease(s, &failures, &logged_down) < 0)
			continue;
		if (!lease_runner_id(w->lease)) {
			int go, rc = ready_to_attach(s, &go);
			if (rc < 0) {
				log_kv(&w->log, LOG_ERROR, "configuration mismatch; stopping",
				       "error", buf_str(&w->err), NULL);
				pthread_mutex_lock(&w->mu);
				w->fatal = 1;
				w->stopping = 1;
				pthread_cond_broadcast(&w->cv);
				pthread_mutex_unlock(&w->mu);
				break;
			}
			if (!go)
				continue;
		}
		if (lease_round_detached(s))
			continue;
		singletons_sync(w->singletons);
		int64_t next =
		    s->next_rebalance < s->next_heartbeat ? s->next_rebalance : s->next_heartbeat;
		int64_t restart = singletons_next_ms(w->singletons);
		if (restart && restart < next)
			next = restart;
		nap(s, next - clock_mono_ms());
	}
	if (db_ok(s->conn) && lease_runner_id(w->lease))
		lease_release_all(w->lease);
	atomic_store(&s->zombies, singletons_stop_all(w->singletons));
	PQfinish(s->conn);
	s->conn = NULL;
	set_ready(w, 0, "stopped");
	atomic_store(&s->done, 1);
	return NULL;
}

/* ------------------------------------------------------------- lifecycle */

static void set_state(cairn_worker *w, worker_state st)
{
	pthread_mutex_lock(&w->mu);
	w->state = st;
	if (st == WORKER_DRAINING)
		snprintf(w->not_ready, sizeof w->not_ready, "draining");
	pthread_mutex_unlock(&w->mu);
}

/* While draining: waits up to ms for SIGTERM or SIGINT; 1 if one came. */
static int second_signal(cairn_worker *w, const sigset_t *sigs, long ms)
{
	int sig = sigtimedwait(sigs, NULL, &(struct timespec){0, ms * 1000000L});
	if (sig != SIGTERM && sig != SIGINT)
		return 0;
	log_kv(&w->log, LOG_WARN, "second signal: stopping now", NULL);
	return 1;
}

/* An advertised address with port 0 means "the port we were given". The
 * HTTP thread may read the address already: swap it under w->mu. */
static int advertise_bound_port(cairn_worker *w)
{
	size_t alen = strlen(w->cfg.advertise_addr);
	if (alen < 2 || strcmp(w->cfg.advertise_addr + alen - 2, ":0") != 0)
		return 0;
	char *a = malloc(alen + 8);
	if (!a)
		return -CAIRN_ENOMEM;
	snprintf(a, alen + 8, "%.*s:%d", (int)(alen - 2), w->cfg.advertise_addr, w->http_port);
	pthread_mutex_lock(&w->mu);
	char *old = w->cfg.advertise_addr;
	w->cfg.advertise_addr = a;
	pthread_mutex_unlock(&w->mu);
	free(old);
	return 0;
}

/* How long a cancelled singleton may run on before it is a zombie: the
 * shutdown timeout, within [1 s, 10 s] (the bound of a released shard's runs). */
static int64_t singleton_stop_timeout_ms(const config *cfg)
{
	int64_t t = cfg->shutdown_timeout_ms;
	return t < 1000 ? 1000 : t > 10000 ? 10000 : t;
}

/* Loads plugins and creates and starts every module: 0, or a negated
 * status with w->err saying why (nothing is left running). */
static int start_modules(cairn_worker *w)
{
	buf perr = BUF_INIT;
	int rc =
	    plugin_load_all(&(plugin_env){.init = init_plugin, .arg = w}, w->cfg.plugins, &perr);
	if (rc < 0) {
		buf_reset(&w->err);
		buf_puts(&w->err, buf_str(&perr));
		buf_free(&perr);
		log_kv(&w->log, LOG_ERROR, "cannot load a plugin", "error", buf_str(&w->err), NULL);
		return rc;
	}
	buf_free(&perr);
	watch *poll_watch = watchdog_add(&w->dog, "poller", w->cfg.poll_interval_ms);
	/* The committer stamps while idle and after every statement; a healthy
	 * server answers each one within CAIRN_STATEMENT_TIMEOUT (if only to
	 * cancel it), so its watch goes stale a second after that. */
	watch *commit_watch =
	    watchdog_add(&w->dog, "committer", (w->cfg.statement_timeout_ms + 2) / 3);
	watch *mark_watch = watchdog_add(&w->dog, "marker", (w->cfg.statement_timeout_ms + 2) / 3);
	lease_env le = {.cfg = &w->cfg,
	                .runner_name = w->name,
	                .log = &w->log,
	                .m = &w->m,
	                .map = w->map,
	                .reg = w->reg,
	                .release_hook = release_hook,
	                .forget_hook = forget_hook,
	                .hook_arg = w};
	singletons_env se = {.reg = w->reg,
	                     .map = w->map,
	                     .conninfo = w->cfg.database_url,
	                     .log = &w->log,
	                     .m = &w->m,
	                     .stop_timeout_ms = singleton_stop_timeout_ms(&w->cfg),
	                     .fence_retry_ms = w->cfg.heartbeat_interval_ms,
	                     .wake = wake_supervisor,
	                     .wake_arg = w};
	rc = lease_new(&le, &w->lease);
	se.lease = w->lease;
	if (!rc)
		rc = singletons_new(&se, &w->singletons);
	trace_settings ts = {.url = w->cfg.otel_traces_url,
	                     .headers = w->cfg.otel_headers,
	                     .service_name = w->cfg.otel_service_name,
	                     .resource_attrs = w->cfg.otel_resource_attributes,
	                     .queue_max = w->cfg.otel_queue_max,
	                     .batch_max = w->cfg.otel_batch_max,
	                     .delay_ms = w->cfg.otel_delay_ms,
	                     .timeout_ms = w->cfg.otel_timeout_ms};
	buf terr = BUF_INIT;
	if (!rc && !w->tracer && (rc = tracer_start(&ts, &w->m, &w->log, &w->tracer, &terr)) < 0) {
		buf_reset(&w->err);
		buf_printf(&w->err, "cannot start the worker: %s", buf_str(&terr));
		buf_free(&terr);
		return rc;
	}
	buf_free(&terr);
	dispatch_env de = {.cfg = &w->cfg,
	                   .log = &w->log,
	                   .m = &w->m,
	                   .tracer = w->tracer,
	                   .map = w->map,
	                   .reg = w->reg,
	                   .lease = w->lease,
	                   .loop = poll_watch,
	                   .commit_loop = commit_watch,
	                   .mark_loop = mark_watch};
	if (!rc && (!poll_watch || !commit_watch || !mark_watch))
		rc = -CAIRN_ENOMEM;
	if (!rc)
		rc = dispatch_start(&de, &w->dispatch);
	if (rc) {
		buf_reset(&w->err);
		buf_printf(&w->err, "cannot start the worker: %s", cairn_strstatus(-rc));
		return rc;
	}
	if (!w->api && (rc = api_new(w->cfg.database_url, w->cfg.keys, &w->api))) {
		buf_reset(&w->err);
		buf_puts(&w->err, "cannot start the worker: out of memory");
		int clean, cut;
		dispatch_stop_begin(w->dispatch);
		dispatch_stop_end(w->dispatch, &clean, &cut);
		return rc;
	}
	w->status = (status_env){.cfg = &w->cfg,
	                         .runner_name = w->name,
	                         .start_mono_ms = w->start_mono_ms,
	                         .m = &w->m,
	                         .dog = &w->dog,
	                         .map = w->map,
	                         .lease = w->lease,
	                         .dispatch = w->dispatch,
	                         .singletons = w->singletons,
	                         .backlog = w->backlog,
	                         .api = w->api,
	                         .mu = &w->mu,
	                         .view = view_locked,
	                         .members_changed = members_changed,
	                         .arg = w};
	/* The names it answers to besides IP addresses and localhost (DNS
	 * rebinding): the advertised host, which other runners call, and
	 * CAIRN_HTTP_HOSTS. */
	const char *adv = w->cfg.advertise_addr, *colon = strrchr(adv, ':');
	buf hosts = BUF_INIT;
	buf_printf(&hosts, "%.*s,%s", colon ? (int)(colon - adv) : (int)strlen(adv), adv,
	           w->cfg.http_hosts);
	rc = hosts.oom ? -CAIRN_ENOMEM
	               : http_start(&w->cfg.http_sa, buf_str(&hosts), status_handle, &w->status,
	                            &w->http, &w->http_port);
	buf_free(&hosts);
	if (rc < 0) {
		buf_reset(&w->err);
		buf_printf(&w->err, "cannot listen on %s (in use, or not an address of this host)",
		           w->cfg.http_addr);
		log_kv(&w->log, LOG_ERROR, "cannot start the HTTP endpoint", "addr",
		       w->cfg.http_addr, "error", buf_str(&w->err), NULL);
		int clean, cut;
		dispatch_stop_begin(w->dispatch);
		dispatch_stop_end(w->dispatch, &clean, &cut);
		return -CAIRN_EINVAL;
	}
	if (advertise_bound_port(w) < 0) {
		buf_reset(&w->err);
		buf_puts(&w->err, "cannot start the worker: out of memory");
		int clean, cut;
		dispatch_stop_begin(w->dispatch);
		dispatch_stop_end(w->dispatch, &clean, &cut);
		http_stop(w->http);
		w->http = NULL;
		return -CAIRN_ENOMEM;
	}
	return 0;
}

/*
 * The leases are session advisory locks and the relay LISTENs, so every
 * connection of the worker must keep its server session: refuse a pooler
 * in transaction or statement mode before anything is taken. A database
 * that cannot be reached now is left to the supervisor (it reconnects with
 * backoff); a check that fails half-way is logged and not fatal.
 */
static int check_pooling(cairn_worker *w)
{
	buf err = BUF_INIT;
	PGconn *c = db_connect(w->cfg.database_url, "cairn-worker pool check", &err);
	int rc = c ? db_check_session_pooling(c, w->cfg.database_url, &err) : 0;
	if (c)
		PQfinish(c);
	if (rc == -CAIRN_ESTATE) {
		buf_reset(&w->err);
		buf_puts(&w->err, buf_str(&err));
		log_kv(&w->log, LOG_ERROR, "refusing to start", "error", buf_str(&err), NULL);
	} else if (rc < 0) {
		log_kv(&w->log, LOG_WARN, "could not check the connection for a pooler", "error",
		       buf_str(&err), NULL);
		rc = 0;
	}
	buf_free(&err);
	return rc;
}

int cairn_worker_run(cairn_worker *w)
{
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	w->start_mono_ms = clock_mono_ms();
	/* On the heap: after a cut-off drain the supervisor may outlive this
	 * call (it is then never freed; the process is about to exit). */
	supervisor *sup = calloc(1, sizeof *sup);
	if (!sup) {
		buf_reset(&w->err);
		buf_puts(&w->err, "cannot start the worker: out of memory");
		return CAIRN_ENOMEM;
	}
	sup->w = w;
	sup->loop = watchdog_add(&w->dog, "supervisor", w->cfg.heartbeat_interval_ms);
	int rc = sup->loop ? check_pooling(w) : -CAIRN_ENOMEM;
	if (!rc)
		rc = start_modules(w);
	if (rc) {
		free(sup);
		return -rc;
	}
	char port[16];
	snprintf(port, sizeof port, "%d", w->http_port);
	log_kv(&w->log, LOG_INFO, "cairn-worker started", "version", CAIRN_VERSION, "runner",
	       w->name, "http_addr", w->cfg.http_addr, "http_port", port, NULL);
	int sup_started = pthread_create(&sup->thread, NULL, supervisor_main, sup) == 0;
	if (!sup_started) {
		log_kv(&w->log, LOG_ERROR, "cannot start the supervisor thread; stopping", NULL);
		cairn_worker_stop(w);
		atomic_store(&sup->done, 1);
	}
	set_state(w, WORKER_RUNNING);

	/* Wait for a signal or a stop request, telling the service manager (if
	 * any) when the worker is first ready and, while every loop is alive,
	 * feeding its watchdog at half the interval it asked for. */
	struct timespec tick = {0, 100 * 1000000L};
	const char *why = "stop requested";
	int told_ready = 0;
	int64_t dog_ms = notify_watchdog_ms(), next_dog = 0;
	for (;;) {
		int sig = sigtimedwait(&sigs, NULL, &tick);
		if (sig == SIGTERM || sig == SIGINT) {
			why = sig == SIGTERM ? "SIGTERM" : "SIGINT";
			break;
		}
		if (is_stopping(w))
			break;
		if (!told_ready && status_ready(&w->status)) {
			told_ready = 1;
			if (notify_send("READY=1") > 0)
				log_kv(&w->log, LOG_INFO, "told the service manager: ready", NULL);
		}
		if (dog_ms && clock_mono_ms() >= next_dog && !watchdog_stale(&w->dog)) {
			notify_send("WATCHDOG=1");
			next_dog = clock_mono_ms() + dog_ms / 2;
		}
	}
	notify_send("STOPPING=1");
	log_kv(&w->log, LOG_INFO, "draining", "reason", why, NULL);
	set_state(w, WORKER_DRAINING);

	/* Runs stop at their next durable point and their writes are committed
	 * while the leases still hold; then the supervisor releases everything. */
	int64_t deadline = clock_mono_ms() + w->cfg.shutdown_timeout_ms;
	int finished = 0, cut = 0, abandoned = 0;
	dispatch_stop_begin(w->dispatch);
	while (!abandoned && dispatch_executing(w->dispatch) > 0 && clock_mono_ms() < deadline)
		abandoned = second_signal(w, &sigs, 20);
	if (!abandoned)
		dispatch_stop_end(w->dispatch, &finished, &cut);
	if (!abandoned && !cut) {
		/* Every execution has ended: the spans still queued go now (an
		 * export that hangs takes at most OTEL_EXPORTER_OTLP_TIMEOUT). */
		tracer_stop(w->tracer, 2000);
		w->tracer = NULL;
	}
	cairn_worker_stop(w);

	/* Releasing gets at least two seconds; a second signal cuts it short. */
	if (deadline < clock_mono_ms() + 2000)
		deadline = clock_mono_ms() + 2000;
	while (!abandoned && !atomic_load(&sup->done) && clock_mono_ms() < deadline)
		abandoned = second_signal(w, &sigs, 20);
	int clean = atomic_load(&sup->done) && !abandoned;
	int zombies = clean ? atomic_load(&sup->zombies) : 0;
	if (clean) {
		if (sup_started)
			pthread_join(sup->thread, NULL);
		free(sup);
	}
	if (clean && !cut && !zombies) {
		api_stop(w->api);
		http_stop(w->http);
		w->http = NULL;
	}
	set_state(w, WORKER_STOPPED);
	char fin[24], cutoff[24];
	log_kv(&w->log, LOG_INFO, "stopped", "finished_cleanly", db_i64(fin, finished), "cut_off",
	       db_i64(cutoff, cut), NULL);
	if (abandoned) {
		buf_reset(&w->err);
		buf_puts(&w->err, "a second signal stopped the drain");
		return CAIRN_EINTR;
	}
	if (zombies) {
		log_kv(&w->log, LOG_WARN, "a singleton ignored its cancel flag and still runs",
		       NULL);
		buf_reset(&w->err);
		buf_puts(&w->err, "a singleton ignored its cancel flag and still runs");
		return CAIRN_ETIMEOUT;
	}
	if (!clean || cut) {
		log_kv(&w->log, LOG_WARN, "shutdown timeout passed with a loop still busy", NULL);
		buf_reset(&w->err);
		buf_puts(&w->err, "the shutdown timeout passed with work still running");
		return CAIRN_ETIMEOUT;
	}
	if (!sup_started) {
		buf_reset(&w->err);
		buf_puts(&w->err, "cannot start the supervisor thread");
		return CAIRN_ENOMEM;
	}
	return w->fatal ? CAIRN_ESCHEMA : CAIRN_OK;
}
