/*
 * lease.c - membership and shard ownership through Postgres alone (see
 * lease.h). Runs on the supervisor thread's lease connection; a runner is
 * live while its lease backend is in pg_stat_activity, its heartbeat is
 * younger than the TTL and it is healthy (cairn.runner_live, shared with
 * `cairn runners`). Every runner computes the same desired map; a shard
 * still locked by its old owner is retried next round. Session advisory
 * locks stack, so a shard is locked only when not held, and a release is
 * verified against pg_locks. A runner past the TTL whose lease backend is
 * still connected (a half-open connection) has that backend terminated
 * before its shards are taken. A wanted shard whose lock another backend
 * holds, that no live runner explains, is an outsider's (any login may take
 * an advisory lock): reported (log, metric, /readyz) and taken back by
 * terminating that backend where this runner's role may. What the runner
 * serves (routing by workflow) is written with its row, refreshed while it
 * lives and cut short when the last live runner serving a workflow goes.
 */
#include "lease.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "assign.h"
#include "cairn.h"
#include "client.h"
#include "clock.h"
#include "db.h"
#include "pgarr.h"

#define HISTORY 16 /* rebalance rounds kept for /status */

/* Per group: the wanted shards held by outsiders (see check_outsiders). */
typedef struct outsiders {
	int shards;        /* held by outsiders this runner may not terminate, at the last look */
	int64_t looked_ms; /* monotonic time of the last look at pg_locks; 0: look next time */
	buf said;          /* what the last look found, for /readyz; empty when nothing */
} outsiders;

/* Per group: whether its live runners serve different workflows (see
 * check_mixed). */
typedef struct mixed {
	uint64_t ids; /* a hash of the live runners' ids the last look was for; 0: none yet */
	buf said;     /* what it found: the workflows that only some serve; empty: none */
} mixed;

/* One rebalance round that changed something. */
typedef struct round {
	int64_t unix_ms;
	int group;
	int acquired, released, live_runners;
	char acquired_shards[128], released_shards[128]; /* "0-12,15", cut with "..." */
	const char *why;                                 /* static text */
} round;

struct lease {
	lease_env env;
	PGconn *conn;
	_Atomic int64_t runner_id;
	_Atomic int rebalanced;
	int pending;         /* the last round wanted shards it could not take yet */
	int64_t stats_since; /* monotonic ms of a change not seen analyzed yet; 0: none */
	int watcher;         /* one of the two oldest of several live runners */
	pthread_mutex_t mu;  /* guards the history and members */
	round history[HISTORY];
	int nhistory;
	char members[40];  /* the live runners' fingerprint last seen */
	outsiders *out;    /* [ngroups]; the supervisor's only */
	mixed *mix;        /* [ngroups]; the supervisor's only */
	int64_t served_ms; /* monotonic time of the last refresh of what it serves; 0: none */
};

int lease_new(const lease_env *env, lease **out)
{
	lease *l = calloc(1, sizeof *l);
	*out = l;
	if (!l)
		return -CAIRN_ENOMEM;
	l->env = *env;
	pthread_mutex_init(&l->mu, NULL);
	l->out = calloc((size_t)shardmap_ngroups(env->map) + 1, sizeof *l->out);
	l->mix = calloc((size_t)shardmap_ngroups(env->map) + 1, sizeof *l->mix);
	return l->out && l->mix ? 0 : -CAIRN_ENOMEM;
}

void lease_free(lease *l)
{
	if (!l)
		return;
	for (int i = 0; l->out && i < shardmap_ngroups(l->env.map); i++)
		buf_free(&l->out[i].said);
	for (int i = 0; l->mix && i < shardmap_ngroups(l->env.map); i++)
		buf_free(&l->mix[i].said);
	free(l->out);
	free(l->mix);
	pthread_mutex_destroy(&l->mu);
	free(l);
}

int64_t lease_runner_id(const lease *l)
{
	return atomic_load(&((lease *)l)->runner_id);
}

int lease_rebalanced(const lease *l)
{
	return atomic_load(&((lease *)l)->rebalanced);
}

void lease_use(lease *l, PGconn *conn)
{
	l->conn = conn;
}

static void outsiders_gone(lease *l, int gi);

void lease_forget(lease *l)
{
	for (int i = 0; i < shardmap_ngroups(l->env.map); i++)
		outsiders_gone(l, i);
	shardmap_forget(l->env.map);
	atomic_store(&l->rebalanced, 0);
	atomic_store(&l->runner_id, 0);
}

/*
 * Routing by workflow (migration 0020). A runner registers with what it
 * serves: a row of cairn.runner_workflows per (group, workflow), deleted
 * with its runner row, and the durable cairn.workflows rows (first_seen,
 * last_seen, runtime) that enqueue routes by. live_until there is how long
 * the group counts as served by a live worker: every SERVED_REFRESH_MS each
 * live runner moves it to now() + SERVED_LIVE_MS + its TTL (skipped when
 * another runner did within half that), so it never lapses while one
 * lives, and the runners cut it short (SQL_SERVED_LAPSE) when they see the
 * last live runner that served it go. One statement a runner every 15 s,
 * writing a row only every 7.5 s at most: an enqueue reads one index entry
 * and no pg_stat_activity.
 */
#define SERVED_REFRESH_MS 15000
#define SERVED_LIVE_MS    (2 * SERVED_REFRESH_MS)

/* $1-$5 the runner's row; $6, $7 its workflows and their runtimes; $8 how
 * long they count as live. */
static const char SQL_REGISTER[] =
    "WITH r AS (INSERT INTO cairn.runners (name, address, version, groups, weight, lease_pid) "
    "           VALUES ($1, $2, $3, $4::text[], $5, pg_backend_pid()) RETURNING id), "
    "s AS (SELECT g, w.name, w.runtime FROM unnest($4::text[]) g, "
    "        unnest($6::text[], $7::text[]) AS w(name, runtime)), "
    "rw AS (INSERT INTO cairn.runner_workflows (runner_id, shard_group, workflow, runtime) "
    "       SELECT r.id, s.g, s.name, s.runtime FROM r, s), "
    "ws AS (INSERT INTO cairn.workflows AS w (workflow, shard_group, runtime, live_until, "
    "                                          last_seen) "
    "       SELECT s.name, s.g, s.runtime, now() + $8 * interval '1 millisecond', now() FROM s "
    "       ORDER BY 1, 2 "
    "       ON CONFLICT (workflow, shard_group) DO UPDATE SET runtime = excluded.runtime, "
    "         last_seen = excluded.last_seen, "
    "         live_until = greatest(w.live_until, excluded.live_until)) "
    "SELECT id FROM r";

/* $1 the runner, $2 as $8 above; rows refreshed less than $3 ms ago (by
 * another runner) are left as they are. A row someone deleted comes back.
 * An UPDATE, then an INSERT of what it did not find: Citus (where
 * workflows is a reference table) refuses a function that is not IMMUTABLE
 * (now(), timestamptz arithmetic) in ON CONFLICT's SET and WHERE. */
static const char SQL_SERVED_REFRESH[] =
    "WITH mine AS (SELECT rw.workflow, rw.shard_group, rw.runtime FROM cairn.runner_workflows rw "
    "              WHERE rw.runner_id = $1), "
    "up AS (UPDATE cairn.workflows w SET last_seen = now(), "
    "         live_until = now() + $2 * interval '1 millisecond' "
    "       FROM mine m WHERE w.workflow = m.workflow AND w.shard_group = m.shard_group "
    "         AND (w.last_seen < now() - $3 * interval '1 millisecond' OR w.live_until < now())) "
    "INSERT INTO cairn.workflows AS w (workflow, shard_group, runtime, live_until) "
    "SELECT m.workflow, m.shard_group, m.runtime, now() + $2 * interval '1 millisecond' "
    "FROM mine m ORDER BY 1, 2 ON CONFLICT (workflow, shard_group) DO NOTHING";

/* Ends live_until of the (workflow, group) no live runner (TTL $1) serves:
 * after a membership change and a runner's own clean stop. */
static const char SQL_SERVED_LAPSE[] =
    "UPDATE cairn.workflows w SET live_until = now() "
    "WHERE w.live_until > now() AND NOT EXISTS (SELECT 1 FROM cairn.runner_workflows rw "
    "  JOIN cairn.runners r ON r.id = rw.runner_id "
    "  WHERE rw.workflow = w.workflow AND rw.shard_group = w.shard_group "
    "    AND cairn.runner_live(r, $1))";

/*
 * The heartbeat also watches the membership: it returns a fingerprint of the
 * live runners (cairn.runner_live, with their health) and, when that differs
 * from the one this runner last saw ($3), tells every runner on
 * cairn_members, so that they rebalance at once instead of on a timer. It
 * also says how many live runners are older (lower id): the two oldest beat
 * every CAIRN_HEARTBEAT_INTERVAL, and so notice a crash within it (a killed
 * worker's lease backend leaves pg_stat_activity at once); the others beat
 * every third of the TTL, so the fleet's idle load does not grow with a
 * heartbeat per worker per interval.
 */
#define SQL_MEMBERS                                                                                \
	"live AS (SELECT r.id, r.healthy FROM cairn.runners r WHERE cairn.runner_live(r, $2)), "   \
	"fp AS (SELECT " CAIRN_MEMBERS_FP " AS f, "                                                \
	"              count(*) AS n, count(*) FILTER (WHERE id < $1) AS older FROM live) "
static const char SQL_HEARTBEAT[] =
    "WITH hb AS (UPDATE cairn.runners SET heartbeat_at = now(), lease_pid = pg_backend_pid() "
    "            WHERE id = $1 RETURNING id), " SQL_MEMBERS ", "
    "ntf AS (SELECT count(pg_notify('" CAIRN_MEMBERS_CHANNEL "', f)) AS n FROM fp "
    "        WHERE f <> $3) "
    "SELECT EXISTS (SELECT 1 FROM hb), fp.f, fp.n, fp.older, (SELECT n FROM ntf) FROM fp";

static const char SQL_LEAVE[] =
    "WITH " SQL_MEMBERS "SELECT count(pg_notify('" CAIRN_MEMBERS_CHANNEL "', f)) FROM fp";

/* How long what a runner serves counts as live after a refresh. */
static int64_t served_live_ms(const lease *l)
{
	return SERVED_LIVE_MS + l->env.cfg->runner_ttl_ms;
}

static int do_register(lease *l, buf *err)
{
	const lease_env *e = &l->env;
	pgarr groups = PGARR_INIT, names = PGARR_INIT, runtimes = PGARR_INIT;
	for (int i = 0; i < shardmap_ngroups(e->map); i++)
		pgarr_add(&groups, shardmap_group_name(e->map, i));
	for (int i = 0; e->reg && i < registry_nworkflows(e->reg); i++) {
		const workflow_def *d = registry_workflow_at(e->reg, i);
		pgarr_add(&names, d->name);
		pgarr_add(&runtimes, d->runtime);
	}
	char weight[24], live[24];
	const char *p[] = {e->runner_name,       e->cfg->advertise_addr,         CAIRN_VERSION,
	                   pgarr_str(&groups),   db_i64(weight, e->cfg->weight), pgarr_str(&names),
	                   pgarr_str(&runtimes), db_i64(live, served_live_ms(l))};
	PGresult *r = groups.b.oom || names.b.oom || runtimes.b.oom
	                  ? NULL
	                  : db_exec(l->conn, err, SQL_REGISTER, 8, p);
	pgarr_free(&groups);
	pgarr_free(&names);
	pgarr_free(&runtimes);
	if (!r)
		return -CAIRN_EDB;
	l->served_ms = clock_mono_ms();
	int64_t id = db_get_i64(r, 0, 0);
	PQclear(r);
	atomic_store(&l->runner_id, id);
	char text[24];
	log_kv(e->log, LOG_INFO, "registered", "runner_id", db_i64(text, id), NULL);
	return 0;
}

int lease_members_seen(lease *l, const char *fingerprint)
{
	pthread_mutex_lock(&l->mu);
	int changed = strcmp(l->members, fingerprint) != 0;
	snprintf(l->members, sizeof l->members, "%s", fingerprint);
	pthread_mutex_unlock(&l->mu);
	return changed;
}

int64_t lease_beat_interval(const lease *l)
{
	const config *cfg = l->env.cfg;
	int64_t slow = cfg->runner_ttl_ms / 3;
	return l->watcher || slow < cfg->heartbeat_interval_ms ? cfg->heartbeat_interval_ms : slow;
}

int lease_pending(const lease *l)
{
	return l->pending;
}

/* One heartbeat: 0 with *found (our row is there) and *changed (the
 * membership changed since we last saw it), or -CAIRN_EDB. */
static int beat(lease *l, int64_t id, int *found, int *changed, buf *err)
{
	char text[24], ttl[24], seen[40];
	pthread_mutex_lock(&l->mu);
	snprintf(seen, sizeof seen, "%s", l->members);
	pthread_mutex_unlock(&l->mu);
	const char *p[] = {db_i64(text, id), db_i64(ttl, l->env.cfg->runner_ttl_ms), seen};
	PGresult *r = db_exec(l->conn, err, SQL_HEARTBEAT, 3, p);
	if (!r)
		return -CAIRN_EDB;
	*found = db_get_bool(r, 0, 0);
	*changed = lease_members_seen(l, PQgetvalue(r, 0, 1));
	l->watcher = db_get_int(r, 0, 2) > 1 && db_get_int(r, 0, 3) < 2;
	PQclear(r);
	return 0;
}

/* What the runner serves stays live (SQL_SERVED_REFRESH) every
 * SERVED_REFRESH_MS; after a membership change, what no live runner serves
 * any more stops being (SQL_SERVED_LAPSE). A failure is logged: the
 * heartbeat stands. */
static void served_keep(lease *l, int64_t id, int members_changed)
{
	char ttl[24], me[24], live[24], skip[24];
	buf err = BUF_INIT;
	db_i64(ttl, l->env.cfg->runner_ttl_ms);
	if (members_changed &&
	    db_cmd(l->conn, &err, SQL_SERVED_LAPSE, 1, (const char *const[]){ttl}) < 0)
		log_kv(l->env.log, LOG_WARN, "cannot mark the workflows no live runner serves",
		       "error", buf_str(&err), NULL);
	int64_t now = clock_mono_ms();
	if (now - l->served_ms >= SERVED_REFRESH_MS) {
		const char *p[] = {db_i64(me, id), db_i64(live, served_live_ms(l)),
		                   db_i64(skip, SERVED_REFRESH_MS / 2)};
		if (db_cmd(l->conn, &err, SQL_SERVED_REFRESH, 3, p) < 0)
			log_kv(l->env.log, LOG_WARN,
			       "cannot refresh the workflows this runner serves", "error",
			       buf_str(&err), NULL);
		else
			l->served_ms = now;
	}
	buf_free(&err);
}

int lease_heartbeat(lease *l, int *members_changed)
{
	buf err = BUF_INIT;
	int rc = 0, found = 1;
	*members_changed = 0;
	int64_t id = lease_runner_id(l);
	if (!id && !(rc = do_register(l, &err)))
		id = lease_runner_id(l);
	if (!rc) {
		rc = beat(l, id, &found, members_changed, &err);
		if (!rc && !found) {
			/* Removed as dead by a health checker: stop the shards' work,
			 * give every lock back (their lease rows no longer name us)
			 * and register anew. */
			log_kv(l->env.log, LOG_WARN, "runner row was removed; registering again",
			       NULL);
			lease_forget(l);
			l->env.forget_hook(l->env.hook_arg);
			db_cmd(l->conn, NULL, "SELECT pg_advisory_unlock_all()", 0, NULL);
			rc = do_register(l, &err);
			if (!rc)
				rc = beat(l, lease_runner_id(l), &found, members_changed, &err);
		}
	}
	if (rc)
		log_kv(l->env.log, LOG_WARN, "heartbeat failed", "error", buf_str(&err), NULL);
	else
		served_keep(l, lease_runner_id(l), *members_changed);
	buf_free(&err);
	return rc;
}

static const char SQL_LIVE[] =
    "SELECT r.id, r.weight FROM cairn.runners r "
    "WHERE $1 = ANY (r.groups) AND r.healthy AND cairn.runner_live(r, $2) ORDER BY r.id";

static const char SQL_ACQUIRE[] =
    "WITH got AS (SELECT s FROM unnest($3::int[]) s WHERE pg_try_advisory_lock($2::int, s)) "
    "INSERT INTO cairn.shard_leases (shard_group, shard, part, owner, epoch, acquired_at) "
    "SELECT $1, s, cairn.part_of(s), $4, 1, now() FROM got ORDER BY s "
    "ON CONFLICT ON CONSTRAINT shard_leases_pkey DO UPDATE "
    "  SET owner = excluded.owner, epoch = cairn.shard_leases.epoch + 1, "
    "    acquired_at = excluded.acquired_at "
    "RETURNING shard, epoch";

static const char SQL_UNLOCK[] = "SELECT pg_advisory_unlock($1::int, s) FROM unnest($2::int[]) s";

/*
 * A release clears the owner of the lease rows of its shards that still
 * name this runner, part by part (SQL_RELEASE_PARTS groups the shards by
 * part): each part's rows locked in shard order, as an acquisition locks
 * them, then updated ($1 group, $2 shards, $3 this runner, $4 the part's
 * key). On Citus each is one task on the node of the part: a lock over
 * the rows of several parts was refused ("could not run distributed query
 * with FOR UPDATE/SHARE commands"), which left a runner that lost its
 * shards unable to let them go. Then the advisory locks are given back
 * (SQL_UNLOCK), by a statement that reads no distributed table, so on
 * Citus on the coordinator, where they were taken.
 */
static const char SQL_RELEASE_PARTS[] =
    "SELECT cairn.part_of(s), array_agg(s ORDER BY s) FROM unnest($1::int[]) s GROUP BY 1 "
    "ORDER BY 1";
static const char SQL_RELEASE_PART[] =
    "WITH lk AS (SELECT shard FROM cairn.shard_leases "
    "            WHERE part = $4 AND shard_group = $1 AND owner = $3 AND shard = ANY ($2::int[]) "
    "            ORDER BY shard FOR UPDATE) "
    "UPDATE cairn.shard_leases SET owner = NULL "
    "WHERE part = $4 AND shard_group = $1 AND shard IN (SELECT shard FROM lk)";

static const char SQL_STILL_LOCKED[] =
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
    "AND classid = ($1::int)::oid AND objsubid = 2 AND objid::bigint = ANY ($2::bigint[])";

/* The shards as an int array literal. */
static void shard_array(pgarr *a, const int *shards, int n)
{
	for (int i = 0; i < n; i++)
		pgarr_add_i64(a, shards[i]);
}

/*
 * Releases the given shards of a group: hide them from the dispatcher, let
 * the release hook stop their work (bounded by a deadline), then unlock and
 * verify against pg_locks.
 */
static int release_shards(lease *l, int gi, const int *shards, int n, buf *err)
{
	if (n == 0)
		return 0;
	const lease_env *e = &l->env;
	const char *gname = shardmap_group_name(e->map, gi);
	for (int i = 0; i < n; i++)
		shardmap_releasing(e->map, gi, shards[i]);
	int64_t limit = e->cfg->shutdown_timeout_ms < 10000 ? e->cfg->shutdown_timeout_ms : 10000;
	e->release_hook(e->hook_arg, gi, shards, n, clock_mono_ms() + limit);
	pgarr arr = PGARR_INIT;
	shard_array(&arr, shards, n);
	char key[24], me[24];
	db_i64(key, shardmap_lock_key(e->map, gi));
	const char *ps[] = {pgarr_str(&arr)};
	PGresult *parts = db_exec(l->conn, err, SQL_RELEASE_PARTS, 1, ps);
	int rc = parts ? 0 : -CAIRN_EDB;
	db_i64(me, lease_runner_id(l));
	for (int i = 0; parts && i < PQntuples(parts) && !rc; i++) {
		const char *p[] = {gname, PQgetvalue(parts, i, 1), me, PQgetvalue(parts, i, 0)};
		rc = db_cmd(l->conn, err, SQL_RELEASE_PART, 4, p) < 0 ? -CAIRN_EDB : 0;
	}
	PQclear(parts);
	const char *pu[] = {key, pgarr_str(&arr)};
	if (!rc && db_cmd(l->conn, err, SQL_UNLOCK, 2, pu) < 0)
		rc = -CAIRN_EDB;
	if (!rc) {
		/* Session locks stack: make sure none is left behind. */
		const char *q[] = {key, pgarr_str(&arr)};
		PGresult *r = db_exec(l->conn, err, SQL_STILL_LOCKED, 2, q);
		if (r && db_get_i64(r, 0, 0) != 0)
			log_kv(e->log, LOG_ERROR, "advisory locks still held after release",
			       "group", gname, NULL);
		PQclear(r);
	}
	pgarr_free(&arr);
	for (int i = 0; i < n; i++)
		shardmap_released(e->map, gi, shards[i]);
	return rc;
}

static int shard_cmp(const void *a, const void *b)
{
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

/* Tries to lock and take the shards; the ones it got are written to got
 * (ascending). 0 with *ngot set, or -CAIRN_EDB. */
static int acquire_shards(lease *l, int gi, const int *want, int n, int *got, int *ngot, buf *err)
{
	const lease_env *e = &l->env;
	*ngot = 0;
	pgarr arr = PGARR_INIT;
	shard_array(&arr, want, n);
	char key[24], me[24];
	db_i64(key, shardmap_lock_key(e->map, gi));
	const char *q[] = {shardmap_group_name(e->map, gi), key, pgarr_str(&arr),
	                   db_i64(me, lease_runner_id(l))};
	PGresult *r = db_exec(l->conn, err, SQL_ACQUIRE, 4, q);
	if (!r) {
		/* The statement rolled back, but session locks it took survive:
		 * give them back so none is held without an epoch. */
		const char *u[] = {key, pgarr_str(&arr)};
		db_cmd(l->conn, NULL, SQL_UNLOCK, 2, u);
		pgarr_free(&arr);
		return -CAIRN_EDB;
	}
	int shards = shardmap_shards(e->map);
	for (int i = 0; i < PQntuples(r); i++) {
		int s = db_get_int(r, i, 0);
		if (s >= 0 && s < shards && !shardmap_held(e->map, gi, s)) {
			shardmap_acquired(e->map, gi, s, db_get_i64(r, i, 1));
			got[(*ngot)++] = s;
		}
	}
	PQclear(r);
	pgarr_free(&arr);
	/* On Citus the rows come part by part, whatever the statement's order. */
	qsort(got, (size_t)*ngot, sizeof *got, shard_cmp);
	return 0;
}

/* Writes ascending shard numbers as ranges ("0-12,15,17-20"), cut at the
 * last whole range that fits, followed by "...". */
static void shard_ranges(char *out, size_t size, const int *sorted, int n)
{
	buf b = BUF_INIT;
	shardmap_ranges(&b, sorted, n);
	const char *s = buf_str(&b);
	if (strlen(s) < size) {
		snprintf(out, size, "%s", s);
	} else {
		size_t cut = size - 4;
		while (cut > 0 && s[cut] != ',')
			cut--;
		snprintf(out, size, "%.*s...", (int)cut, s);
	}
	buf_free(&b);
}

static void history_add(lease *l, const round *rec)
{
	pthread_mutex_lock(&l->mu);
	round *r = &l->history[l->nhistory++ % HISTORY];
	*r = *rec;
	r->unix_ms = clock_unix_ms();
	pthread_mutex_unlock(&l->mu);
}

/* The live runners of a group, and this runner's index among them (-1). */
static int live_runners(lease *l, int gi, assign_runner **out, int *n, int *me, buf *err)
{
	char ttl[24];
	const char *p[] = {shardmap_group_name(l->env.map, gi),
	                   db_i64(ttl, l->env.cfg->runner_ttl_ms)};
	PGresult *r = db_exec(l->conn, err, SQL_LIVE, 2, p);
	if (!r)
		return -CAIRN_EDB;
	*n = PQntuples(r);
	*me = -1;
	*out = calloc((size_t)*n + 1, sizeof **out);
	for (int i = 0; *out && i < *n; i++) {
		(*out)[i].id = db_get_i64(r, i, 0);
		(*out)[i].weight = db_get_int(r, i, 1);
		if ((*out)[i].id == lease_runner_id(l))
			*me = i;
	}
	PQclear(r);
	return *out ? 0 : -CAIRN_ENOMEM;
}

/*
 * Outsiders. Any login may take an advisory lock, and so a shard's lock:
 * a backend that holds the lock of a shard this runner wants and is not a
 * live runner's lease backend (runners.lease_pid) keeps the shard from
 * every runner, and its runs wait forever. It is looked for only when a
 * wanted shard's lock try failed and no live runner explains it (the
 * shard's lease row names another live runner: a handover in progress), at
 * most once per heartbeat interval while it lasts, so a fleet at rest never
 * reads pg_locks. Each such backend is logged (pid, user,
 * application_name) and terminated where this runner's role may (a
 * superuser, or for a non-superuser's backend a member of its role or of
 * pg_signal_backend, as pg_terminate_backend checks); the shards it held
 * are taken at the next round. The others are counted
 * (cairn_shards_held_by_outsiders) and make /readyz 503 until they let go.
 */

/* The lease rows of shards ($2) of a group ($1) that name a runner. */
static const char SQL_LEASE_OWNERS[] =
    "SELECT shard, owner FROM cairn.shard_leases "
    "WHERE shard_group = $1 AND shard = ANY ($2::int[]) AND owner IS NOT NULL";

/*
 * The superuser roles (oid[]) and whether this session's role is one, for
 * SQL_OUTSIDERS. Read by a statement of their own: on Citus, a statement
 * that reads a cairn table is run as SQL text with its views expanded, so a
 * read of pg_roles (a view of pg_authid) beside cairn.runners reads
 * pg_authid as this role, which only a superuser may ("permission denied
 * for table pg_authid" for a worker of any other role).
 */
static const char SQL_SUPERUSERS[] =
    "SELECT coalesce(array_agg(oid), '{}'), coalesce(bool_or(rolname = current_user), false) "
    "FROM pg_roles WHERE rolsuper";

/*
 * The holders of the locks of shards ($2) of the group whose key is $1,
 * other than this session and the lease backends of live runners (TTL $3):
 * one row per (pid, shard), by pid, with the holder's user and
 * application_name (visible to every role), the id of the runner whose
 * lease backend it was (one past its TTL, which terminate_stale also ends),
 * whether this role may terminate it, and, where it may, whether
 * pg_terminate_backend saw it gone within $4 ms. The CTE that terminates
 * is evaluated once (it is volatile), before any row is returned. $5 and
 * $6 are SQL_SUPERUSERS's. The backends are read from pg_stat_get_activity,
 * the function under pg_stat_activity, for the reason SQL_SUPERUSERS gives:
 * the view reads pg_authid for the user's name.
 */
static const char SQL_OUTSIDERS[] =
    "WITH held AS (SELECT l.pid, l.objid::int AS shard FROM pg_locks l "
    "  WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 "
    "    AND l.classid = ($1::int)::oid AND l.objid::bigint = ANY ($2::bigint[]) "
    "    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "    AND l.pid <> pg_backend_pid() "
    "    AND NOT EXISTS (SELECT 1 FROM cairn.runners r "
    "                    WHERE r.lease_pid = l.pid AND cairn.runner_live(r, $3))), "
    "who AS (SELECT h.pid, pg_get_userbyid(a.usesysid) AS usename, a.application_name, "
    "          (SELECT max(r.id) FROM cairn.runners r WHERE r.lease_pid = h.pid) AS runner, "
    /* Whether this role may signal the backend, as pg_terminate_backend
     * checks: a superuser may signal any; anyone else only a
     * non-superuser's, with the privileges of its role or of
     * pg_signal_backend. */
    "          coalesce($6::boolean "
    "            OR (NOT a.usesysid = ANY ($5::oid[]) "
    "                AND (pg_has_role(a.usesysid, 'USAGE') "
    "                     OR pg_has_role('pg_signal_backend', 'USAGE'))), false) AS may "
    "        FROM (SELECT DISTINCT pid FROM held) h "
    "        LEFT JOIN pg_stat_get_activity(NULL) a ON a.pid = h.pid), "
    "act AS (SELECT w.*, CASE WHEN w.may THEN pg_terminate_backend(w.pid, $4) END AS gone "
    "        FROM who w) "
    "SELECT a.pid, h.shard, a.usename, a.application_name, a.runner, a.may, a.gone "
    "FROM act a JOIN held h ON h.pid = a.pid ORDER BY a.pid, h.shard";

static void outsiders_count(lease *l)
{
	int n = 0;
	for (int i = 0; i < shardmap_ngroups(l->env.map); i++)
		n += l->out[i].shards;
	atomic_store(&l->env.m->shards_held_by_outsiders, n);
}

/* No wanted shard of group gi is an outsider's (any more). */
static void outsiders_gone(lease *l, int gi)
{
	outsiders *o = &l->out[gi];
	if (o->said.len)
		log_kv(l->env.log, LOG_INFO,
		       "no shard of the group is held by an outsider any more", "group",
		       shardmap_group_name(l->env.map, gi), NULL);
	o->shards = 0;
	o->looked_ms = 0;
	buf_reset(&o->said);
	outsiders_count(l);
}

int lease_outsiders(const lease *l, buf *reason)
{
	int n = 0;
	for (int i = 0; i < shardmap_ngroups(l->env.map); i++) {
		if (!l->out[i].shards)
			continue;
		n += l->out[i].shards;
		buf_printf(reason, "%s%s", reason->len ? "; " : "", buf_str(&l->out[i].said));
	}
	return n;
}

/* Whether runner id is one of the live runners rs, other than us. */
static int live_other(const lease *l, int64_t id, const assign_runner *rs, int nlive)
{
	for (int i = 0; i < nlive; i++)
		if (rs[i].id == id)
			return id != lease_runner_id(l);
	return 0;
}

/* Keeps in missed (n) only the shards whose lease row names no live runner
 * of the group but us (rs): returns how many are left, or n when the rows
 * cannot be read (then every one is looked at). */
static int unexplained(lease *l, int gi, int *missed, int n, const assign_runner *rs, int nlive)
{
	int shards = shardmap_shards(l->env.map);
	unsigned char *explained = calloc((size_t)shards, 1);
	pgarr arr = PGARR_INIT;
	shard_array(&arr, missed, n);
	const char *p[] = {shardmap_group_name(l->env.map, gi), pgarr_str(&arr)};
	PGresult *r = explained ? db_exec(l->conn, NULL, SQL_LEASE_OWNERS, 2, p) : NULL;
	pgarr_free(&arr);
	for (int i = 0; r && i < PQntuples(r); i++) {
		int s = db_get_int(r, i, 0);
		if (s >= 0 && s < shards)
			explained[s] = (unsigned char)live_other(l, db_get_i64(r, i, 1), rs, nlive);
	}
	int k = 0;
	for (int i = 0; i < n; i++)
		if (!r || !explained[missed[i]])
			missed[k++] = missed[i];
	PQclear(r);
	free(explained);
	return k;
}

/* One holder's rows (from row i, all of one pid): terminated (logged) if
 * this role may; otherwise added to the group's account in said and
 * *shards, and logged unless the last look (before) said the same of it.
 * Returns the row after them. */
static int outsider_seen(lease *l, int gi, PGresult *r, int i, const buf *before, buf *said,
                         int *shards, int *ended)
{
	const lease_env *e = &l->env;
	const char *pid = PQgetvalue(r, i, 0);
	int first = i, *list = malloc((size_t)PQntuples(r) * sizeof *list), n = 0;
	for (; i < PQntuples(r) && strcmp(PQgetvalue(r, i, 0), pid) == 0; i++)
		if (list)
			list[n++] = db_get_int(r, i, 1);
	char ranges[128], count[24];
	shard_ranges(ranges, sizeof ranges, list, n);
	free(list);
	db_i64(count, i - first);
	const char *user = PQgetisnull(r, first, 2) ? "?" : PQgetvalue(r, first, 2);
	const char *app = PQgetisnull(r, first, 3) ? "?" : PQgetvalue(r, first, 3);
	const char *runner = PQgetvalue(r, first, 4); /* "" unless a runner's, past its TTL */
	const char *group = shardmap_group_name(e->map, gi);
	int may = db_get_bool(r, first, 5);
	if (may) {
		*ended = 1;
		atomic_fetch_add(&e->m->outsiders_terminated, 1);
		log_kv(e->log, LOG_WARN,
		       "terminated a backend that held shards and is not a live runner's lease "
		       "backend",
		       "group", group, "shards", ranges, "count", count, "pid", pid, "user", user,
		       "application_name", app, "gone", db_get_bool(r, first, 6) ? "true" : "false",
		       *runner ? "runner_id" : NULL, runner, NULL);
		return i;
	}
	*shards += i - first;
	buf it = BUF_INIT;
	buf_printf(&it, "pid %s (user %s, application_name %s) holds %s (%s)", pid, user, app,
	           count, ranges);
	if (!strstr(buf_str(before), buf_str(&it)))
		log_kv(e->log, LOG_WARN,
		       "shards held by a backend that is not a live runner's lease backend; this "
		       "worker's role may not terminate it",
		       "group", group, "shards", ranges, "count", count, "pid", pid, "user", user,
		       "application_name", app, *runner ? "runner_id" : NULL, runner, NULL);
	if (said->len < 512) /* /readyz has room for a few */
		buf_printf(said, "%s%s", said->len ? "; " : "", buf_str(&it));
	else if (!strstr(buf_str(said), "; ..."))
		buf_puts(said, "; ...");
	buf_free(&it);
	return i;
}

/* Looks at pg_locks for the holders of the missed shards of group gi (see
 * SQL_OUTSIDERS) and accounts for them; logs what changed. */
static void look_for_outsiders(lease *l, int gi, const int *missed, int n)
{
	const lease_env *e = &l->env;
	outsiders *o = &l->out[gi];
	pgarr arr = PGARR_INIT;
	shard_array(&arr, missed, n);
	char key[24], ttl[24], wait[24];
	buf err = BUF_INIT;
	PGresult *su = db_exec(l->conn, &err, SQL_SUPERUSERS, 0, NULL), *r = NULL;
	if (su) {
		const char *p[] = {db_i64(key, shardmap_lock_key(e->map, gi)),
		                   pgarr_str(&arr),
		                   db_i64(ttl, e->cfg->runner_ttl_ms),
		                   db_i64(wait, e->cfg->runner_ttl_ms / 4),
		                   PQgetvalue(su, 0, 0),
		                   PQgetvalue(su, 0, 1)};
		r = db_exec(l->conn, &err, SQL_OUTSIDERS, 6, p);
		PQclear(su);
	}
	pgarr_free(&arr);
	o->looked_ms = clock_mono_ms();
	if (!r) {
		log_kv(e->log, LOG_WARN, "cannot look for the holders of wanted shards", "group",
		       shardmap_group_name(e->map, gi), "error", buf_str(&err), NULL);
		buf_free(&err);
		return;
	}
	buf_free(&err);
	buf holders = BUF_INIT;
	int shards = 0, ended = 0;
	for (int i = 0; i < PQntuples(r);)
		i = outsider_seen(l, gi, r, i, &o->said, &holders, &shards, &ended);
	PQclear(r);
	int64_t looked = ended ? 0 : o->looked_ms; /* ended: the next round takes them, or looks */
	if (!shards) {
		outsiders_gone(l, gi);
	} else {
		buf_reset(&o->said);
		buf_printf(
		    &o->said,
		    "%d shards of group %s are held by a backend that is not a live runner's "
		    "lease backend, and this worker's database role may not terminate it "
		    "(it needs superuser, or pg_signal_backend for a non-superuser's "
		    "backend): %s",
		    shards, shardmap_group_name(e->map, gi), buf_str(&holders));
		o->shards = shards;
		outsiders_count(l);
	}
	o->looked_ms = looked;
	buf_free(&holders);
}

/* After a round's acquisition in group gi: the shards wanted (want[s] ==
 * me) and not held, that no live runner explains, are looked at (at most
 * once per heartbeat interval while they last). */
static void check_outsiders(lease *l, int gi, const int *want, int me, const assign_runner *rs,
                            int nlive)
{
	shardmap *map = l->env.map;
	int shards = shardmap_shards(map), n = 0;
	int *missed = malloc((size_t)shards * sizeof *missed);
	if (!missed)
		return;
	for (int s = 0; me >= 0 && s < shards; s++)
		if (want[s] == me && !shardmap_held(map, gi, s))
			missed[n++] = s;
	if (n)
		n = unexplained(l, gi, missed, n, rs, nlive);
	outsiders *o = &l->out[gi];
	if (!n)
		outsiders_gone(l, gi);
	else if (!o->looked_ms ||
	         clock_mono_ms() - o->looked_ms >= l->env.cfg->heartbeat_interval_ms)
		look_for_outsiders(l, gi, missed, n);
	free(missed);
}

/*
 * Mixed sets. A run waits for the owner of its shard to serve its
 * workflow, so a group whose live runners serve different workflows (a
 * rolling deploy that adds one) leaves some runs waiting until it is over.
 * Looked at when the group's live runners change; said once per change of
 * what differs, and once when it is over.
 */
static const char SQL_MIXED[] =
    "SELECT rw.workflow || ' (runners ' || string_agg(rw.runner_id::text, ',' "
    "         ORDER BY rw.runner_id) || ' of ' || $3::int || ')' "
    "FROM cairn.runner_workflows rw "
    "WHERE rw.shard_group = $1 AND rw.runner_id = ANY ($2::bigint[]) "
    "GROUP BY rw.workflow HAVING count(*) < $3::int ORDER BY rw.workflow";

static void check_mixed(lease *l, int gi, const assign_runner *rs, int nlive)
{
	mixed *m = &l->mix[gi];
	uint64_t ids = 1469598103934665603ULL;
	pgarr arr = PGARR_INIT;
	for (int i = 0; i < nlive; i++) {
		ids = (ids ^ (uint64_t)rs[i].id) * 1099511628211ULL;
		pgarr_add_i64(&arr, rs[i].id);
	}
	if (ids == m->ids || nlive < 2 || arr.b.oom) {
		if (nlive < 2 && m->said.len)
			buf_reset(&m->said); /* one runner serves what it serves */
		m->ids = nlive < 2 ? 0 : m->ids;
		pgarr_free(&arr);
		return;
	}
	const char *group = shardmap_group_name(l->env.map, gi);
	char n[24];
	const char *p[] = {group, pgarr_str(&arr), db_i64(n, nlive)};
	buf err = BUF_INIT;
	PGresult *r = db_exec(l->conn, &err, SQL_MIXED, 3, p);
	pgarr_free(&arr);
	if (!r) /* looked at again next round */
		log_kv(l->env.log, LOG_WARN, "cannot compare the workflows of the group's runners",
		       "group", group, "error", buf_str(&err), NULL);
	buf_free(&err);
	if (!r)
		return;
	m->ids = ids;
	buf now = BUF_INIT;
	for (int i = 0; i < PQntuples(r); i++)
		buf_printf(&now, "%s%s", i ? ", " : "", PQgetvalue(r, i, 0));
	PQclear(r);
	if (now.len && strcmp(buf_str(&now), buf_str(&m->said)) != 0)
		log_kv(l->env.log, LOG_WARN,
		       "the live runners of a group serve different workflows: a run of one of "
		       "them waits until the owner of its shard serves it",
		       "group", group, "workflows", buf_str(&now), NULL);
	else if (!now.len && m->said.len)
		log_kv(l->env.log, LOG_INFO,
		       "the live runners of the group serve the same workflows", "group", group,
		       NULL);
	buf_reset(&m->said);
	buf_puts(&m->said, buf_str(&now));
	buf_free(&now);
}

static int rebalance_group(lease *l, int gi, int *changed, buf *err)
{
	shardmap *map = l->env.map;
	int shards = shardmap_shards(map), nlive = 0, me = -1;
	assign_runner *rs = NULL;
	int rc = live_runners(l, gi, &rs, &nlive, &me, err);
	int *want = malloc((size_t)shards * sizeof *want),
	    *lst = malloc((size_t)shards * sizeof *lst);
	if (!rc && (!want || !lst))
		rc = -CAIRN_ENOMEM;
	round rec = {.group = gi, .live_runners = nlive};
	int k = 0;
	if (!rc) {
		assign_shards(rs, nlive, (uint64_t)(uint32_t)shardmap_lock_key(map, gi), shards,
		              want);
		/* Release what is no longer ours. */
		for (int s = 0; s < shards; s++)
			if (shardmap_held(map, gi, s) && want[s] != me)
				lst[k++] = s;
		if (k) {
			shard_ranges(rec.released_shards, sizeof rec.released_shards, lst, k);
			rc = release_shards(l, gi, lst, k, err);
			*changed += k;
			rec.released = k;
		}
	}
	/* Try to acquire what is ours and not yet held. */
	k = 0;
	for (int s = 0; !rc && me >= 0 && s < shards; s++)
		if (!shardmap_held(map, gi, s) && want[s] == me)
			lst[k++] = s;
	if (!rc && k) {
		rc = acquire_shards(l, gi, lst, k, lst, &rec.acquired, err);
		l->pending |= !rc && rec.acquired < k;
		shard_ranges(rec.acquired_shards, sizeof rec.acquired_shards, lst, rec.acquired);
		*changed += rec.acquired;
	}
	if (rec.acquired || rec.released) {
		rec.why = me < 0                      ? "this runner is not live yet"
		          : k > 0 && rec.acquired < k ? "shards still held by their old owner"
		                                      : "live runners changed";
		history_add(l, &rec);
	}
	if (!rc && want)
		check_outsiders(l, gi, want, me, rs, nlive);
	if (!rc)
		check_mixed(l, gi, rs, nlive);
	free(rs);
	free(want);
	free(lst);
	return rc;
}

/*
 * The lease backends of runners that serve one of our groups and whose
 * heartbeat is older than the TTL: a runner cut off by a half-open
 * connection is dead to everyone, but its backend (and so its advisory
 * locks) would stay until the server's keepalives notice, which may take
 * hours. Only a pid that is still a backend of this database, started before
 * the runner's last heartbeat (so not a reused pid) and not our own. The
 * backends are pg_stat_get_activity's, not pg_stat_activity's, whose user
 * names a worker not a superuser may not read on Citus (SQL_SUPERUSERS).
 */
static const char SQL_TERMINATE_STALE[] =
    "SELECT r.id, r.lease_pid, pg_terminate_backend(r.lease_pid, $4) "
    "FROM cairn.runners r JOIN pg_stat_get_activity(NULL) a "
    "  ON a.pid = r.lease_pid "
    "  AND a.datid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "WHERE r.groups && $1::text[] AND r.id <> $2 "
    "  AND r.heartbeat_at < now() - $3 * interval '1 millisecond' "
    "  AND a.backend_start <= r.heartbeat_at AND r.lease_pid <> pg_backend_pid()";

/* Terminates the lease backends of runners past the TTL, before their shards
 * are taken; a failure (say, no permission to signal the backend) is logged
 * and the round goes on. */
static void terminate_stale(lease *l)
{
	const lease_env *e = &l->env;
	int64_t me = lease_runner_id(l);
	if (!me)
		return;
	pgarr groups = PGARR_INIT;
	for (int i = 0; i < shardmap_ngroups(e->map); i++)
		pgarr_add(&groups, shardmap_group_name(e->map, i));
	char id[24], ttl[24], wait[24];
	/* Wait for the backend to be gone (its locks with it) for at most a
	 * quarter of the TTL: half of the statement_timeout of this session. */
	const char *p[] = {pgarr_str(&groups), db_i64(id, me), db_i64(ttl, e->cfg->runner_ttl_ms),
	                   db_i64(wait, e->cfg->runner_ttl_ms / 4)};
	buf err = BUF_INIT;
	PGresult *r = db_exec(l->conn, &err, SQL_TERMINATE_STALE, 4, p);
	pgarr_free(&groups);
	if (!r)
		log_kv(e->log, LOG_WARN,
		       "cannot terminate the lease backend of a runner past its TTL", "error",
		       buf_str(&err), NULL);
	for (int i = 0; r && i < PQntuples(r); i++)
		log_kv(e->log, LOG_WARN, "terminated the lease backend of a runner past its TTL",
		       "runner_id", PQgetvalue(r, i, 0), "pid", PQgetvalue(r, i, 1), "gone",
		       db_get_bool(r, i, 2) ? "true" : "false", NULL);
	PQclear(r);
	buf_free(&err);
}

int lease_rebalance(lease *l, int *changed)
{
	buf err = BUF_INIT;
	int rc = 0;
	*changed = 0;
	l->pending = 0;
	terminate_stale(l);
	for (int i = 0; i < shardmap_ngroups(l->env.map) && !rc; i++)
		rc = rebalance_group(l, i, changed, &err);
	if (rc)
		log_kv(l->env.log, LOG_WARN, "rebalance failed", "error", buf_str(&err), NULL);
	buf_free(&err);
	if (rc)
		return rc;
	atomic_store(&l->rebalanced, 1);
	/* The pollers' claim plans on how many shards each runner owns: keep
	 * the planner's picture of this small table current. Every runner of a
	 * fleet that starts changes it, so it is analyzed once for all the
	 * changes that came before (db_analyze_unless_recent), or again at the
	 * next round while another runner analyzes it. */
	if (*changed && !l->stats_since)
		l->stats_since = clock_mono_ms();
	if (l->stats_since &&
	    db_analyze_unless_recent(l->conn, DB_LOCK_ANALYZE_LEASES, "cairn.shard_leases",
	                             clock_mono_ms() - l->stats_since + 1) >= 0)
		l->stats_since = 0;
	if (*changed) {
		atomic_fetch_add(&l->env.m->rebalances, 1);
		char n[24], owned[24];
		log_kv(l->env.log, LOG_INFO, "rebalanced", "changed", db_i64(n, *changed), "owned",
		       db_i64(owned, shardmap_owned(l->env.map)), NULL);
	}
	return 0;
}

void lease_release_all(lease *l)
{
	buf err = BUF_INIT;
	shardmap *map = l->env.map;
	int shards = shardmap_shards(map);
	int *lst = malloc((size_t)(shards > 0 ? shards : 1) * sizeof *lst);
	for (int g = 0; g < shardmap_ngroups(map) && lst; g++) {
		int k = 0;
		for (int s = 0; s < shards; s++)
			if (shardmap_held(map, g, s))
				lst[k++] = s;
		release_shards(l, g, lst, k, &err);
	}
	free(lst);
	int64_t id = lease_runner_id(l);
	if (id) {
		/* Tell the others, so they take the shards now. */
		char text[24], ttl[24];
		const char *p[] = {db_i64(text, id), db_i64(ttl, l->env.cfg->runner_ttl_ms)};
		if (db_cmd(l->conn, &err, "DELETE FROM cairn.runners WHERE id = $1", 1, p) == 0) {
			db_cmd(l->conn, &err, SQL_LEAVE, 2, p);
			/* What only this runner served is no longer served live. */
			db_cmd(l->conn, &err, SQL_SERVED_LAPSE, 1, p + 1);
		}
	}
	buf_free(&err);
}

void lease_history(lease *l, cJSON *array)
{
	if (!array)
		return;
	pthread_mutex_lock(&l->mu);
	int first = l->nhistory > HISTORY ? l->nhistory - HISTORY : 0;
	for (int i = l->nhistory - 1; i >= first; i--) {
		const round *rec = &l->history[i % HISTORY];
		cJSON *it = cJSON_CreateObject();
		cJSON_AddNumberToObject(it, "unix_ms", (double)rec->unix_ms);
		cJSON_AddStringToObject(it, "group", shardmap_group_name(l->env.map, rec->group));
		cJSON_AddNumberToObject(it, "acquired", rec->acquired);
		cJSON_AddNumberToObject(it, "released", rec->released);
		cJSON_AddStringToObject(it, "acquired_shards", rec->acquired_shards);
		cJSON_AddStringToObject(it, "released_shards", rec->released_shards);
		cJSON_AddNumberToObject(it, "live_runners", rec->live_runners);
		cJSON_AddStringToObject(it, "why", rec->why);
		cJSON_AddItemToArray(array, it);
	}
	pthread_mutex_unlock(&l->mu);
}
