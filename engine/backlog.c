/*
 * backlog.c - the cairn.backlog singleton (see backlog.h). Each round reads,
 * on the singleton's own connection:
 *   - the unfinished runs per shard group, workflow and state, and the
 *     oldest due run's age (SQL_BACKLOG): each part walks an index of
 *     unfinished runs only (runs_start, messages_deliver, runs_held,
 *     runs_status), at most BACKLOG_ROWS_MAX rows, so a round costs the same
 *     however many finished runs the tables keep, and a huge backlog is
 *     counted up to the cap, oldest first;
 *   - the shards of each known group that no live runner owns (SQL_UNOWNED);
 *   - how long the most overdue schedule has been due (SQL_SCHEDULE_LAG).
 * Workflows past CAIRN_METRICS_MAX_WORKFLOWS, the smallest backlogs first,
 * are folded into workflow "other", as the workers' own counters are.
 * The result replaces the last one under the lock; when the singleton stops
 * (its shard moved, the worker drains) it is dropped, before the fence that
 * lets another worker start the singleton is released, so two workers
 * never publish at once. Prometheus may still hold the old worker's series
 * until its next scrape of it: hence max, not sum, over instances.
 */
#include "backlog.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "db.h"
#include "metrics.h"
#include "pgarr.h"

#define STR_(x) #x
#define STR(x)  STR_(x)

/* The states a run is counted in: one each, so that they add up to the
 * unfinished runs (as far as the cap lets them). */
/* clang-format off */
#define BACKLOG_STATES(X)                                                                   \
	X(BL_DUE, "due")           /* pending and due to start, or sleeping/waiting with a    \
	                              wake-up, signal or cancel due: needs a worker now */      \
	X(BL_DELAYED, "delayed")   /* pending, its start later (a delay, a retry's backoff) */  \
	X(BL_HELD, "held")         /* held by flow control (cairn limit) */                     \
	X(BL_RUNNING, "running")   /* claimed by a worker */                                    \
	X(BL_SLEEPING, "sleeping") /* a durable sleep or a step's backoff, not yet due */       \
	X(BL_WAITING, "waiting")   /* a signal or child wait, nothing due */
/* clang-format on */
#define BL_STATE_ENUM(id, name) id,
enum bl_state { BACKLOG_STATES(BL_STATE_ENUM) BL_NSTATES };
#undef BL_STATE_ENUM
#define BL_STATE_NAME(id, name) [id] = name,
static const char *const BL_STATE_NAMES[] = {BACKLOG_STATES(BL_STATE_NAME)};
#undef BL_STATE_NAME

/*
 * $1: the most rows each part walks. Every row: group, workflow, state, its
 * runs and the age in seconds of its oldest due run (due rows only); then
 * one last row with NULLs and whether a part reached the cap. A sleeping
 * or waiting run with a message due counts as due, not in its status (the
 * -1 rows), and once however many messages it has. Runs with a due start
 * are pending: a running run's start stays until its final write and is no
 * backlog. On Citus it runs over every node: its join names the part (a
 * join of colocated tables by their distribution column), and the cap's
 * row counts from a union of rows (a scalar subquery per count was
 * refused there).
 */
static const char SQL_BACKLOG[] =
    "WITH due_start AS ("
    "  SELECT shard_group AS g, workflow AS w, start_at AS at FROM cairn.runs "
    "  WHERE start_at <= now() AND status = 'pending' ORDER BY start_at LIMIT $1), "
    "msgs AS ("
    "  SELECT run_id, part, deliver_at FROM cairn.messages WHERE deliver_at <= now() "
    "  ORDER BY deliver_at LIMIT $1), "
    "due_msg AS ("
    "  SELECT r.shard_group AS g, r.workflow AS w, r.status AS s, min(m.deliver_at) AS at "
    "  FROM msgs m JOIN cairn.runs r ON r.id = m.run_id AND r.part = m.part "
    "  WHERE r.status IN ('sleeping', 'waiting') GROUP BY r.id, r.part), "
    "delayed AS ("
    "  SELECT shard_group AS g, workflow AS w FROM cairn.runs "
    "  WHERE start_at > now() AND status = 'pending' LIMIT $1), "
    "held AS (SELECT shard_group AS g, workflow AS w FROM cairn.runs WHERE held LIMIT $1), "
    "busy AS ("
    "  SELECT shard_group AS g, workflow AS w, status AS s FROM cairn.runs "
    "  WHERE status IN ('running', 'sleeping', 'waiting') LIMIT $1), "
    "parts AS ("
    "  SELECT g, w, 'due' AS s, 1 AS n, at FROM due_start "
    "  UNION ALL SELECT g, w, 'due', 1, at FROM due_msg "
    "  UNION ALL SELECT g, w, s, -1, NULL FROM due_msg "
    "  UNION ALL SELECT g, w, 'delayed', 1, NULL FROM delayed "
    "  UNION ALL SELECT g, w, 'held', 1, NULL FROM held "
    "  UNION ALL SELECT g, w, s, 1, NULL FROM busy) "
    "SELECT g, w, s, greatest(sum(n), 0), extract(epoch FROM now() - min(at))::float8, NULL "
    "FROM parts GROUP BY g, w, s "
    "UNION ALL "
    "SELECT NULL, NULL, NULL, NULL, NULL, max(n) >= $1 FROM ("
    "  SELECT count(*) AS n FROM due_start UNION ALL SELECT count(*) FROM msgs "
    "  UNION ALL SELECT count(*) FROM delayed UNION ALL SELECT count(*) FROM held "
    "  UNION ALL SELECT count(*) FROM busy) c";

/*
 * The shards no live runner owns, per group: of the groups live runners
 * serve and those with unfinished runs ($3, the backlog's); $1 the runner
 * TTL (ms), $2 the shards per group. A group whose runs no runner serves
 * has every shard unowned; a group with neither runners nor runs (one no
 * longer used) is no one's concern and not shown. Liveness (which reads
 * pg_stat_activity) is read from the runners alone, before the leases are
 * counted by owner: on Citus a statement over the leases runs on the
 * worker nodes, where no runner's session is.
 */
static const char SQL_UNOWNED[] =
    "WITH live AS MATERIALIZED (SELECT r.id, r.groups FROM cairn.runners r "
    "                           WHERE cairn.runner_live(r, $1)), "
    "gs AS (SELECT unnest(groups) AS g FROM live UNION SELECT unnest($3::text[])), "
    "owned AS (SELECT shard_group AS g, count(*) AS n FROM cairn.shard_leases "
    "          WHERE owner = ANY (ARRAY(SELECT id FROM live)) GROUP BY 1) "
    "SELECT gs.g, $2::int - coalesce(o.n, 0) FROM gs LEFT JOIN owned o ON o.g = gs.g "
    "ORDER BY 1";

/* Seconds the most overdue schedule has been due (0: none is), and the
 * database's clock (Unix seconds). */
static const char SQL_SCHEDULE_LAG[] =
    "SELECT coalesce(extract(epoch FROM now() - min(next_at)), 0)::float8, "
    "  extract(epoch FROM now())::float8 "
    "FROM cairn.schedules WHERE NOT paused AND next_at <= now()";

static const char SQL_SHARDS[] =
    "SELECT value::int FROM cairn.settings WHERE name = 'shards_per_group'";

typedef struct bl_row {
	char *group, *workflow;
	int state;
	int64_t runs;
	double oldest_s; /* due rows: the oldest due run's age; -1 otherwise */
} bl_row;

typedef struct bl_group {
	char *name;
	int64_t unowned;
} bl_group;

/* One read. */
typedef struct bl_result {
	bl_row *rows;
	int nrows;
	bl_group *groups;
	int ngroups;
	int capped;
	double schedule_lag_s, read_at_s, took_s;
} bl_result;

struct backlog {
	backlog_env env;
	pthread_mutex_t mu; /* guards published and last */
	int published;
	bl_result last;
};

static void result_free(bl_result *r)
{
	for (int i = 0; i < r->nrows; i++) {
		free(r->rows[i].group);
		free(r->rows[i].workflow);
	}
	for (int i = 0; i < r->ngroups; i++)
		free(r->groups[i].name);
	free(r->rows);
	free(r->groups);
	memset(r, 0, sizeof *r);
}

int backlog_new(const backlog_env *env, backlog **out)
{
	backlog *b = calloc(1, sizeof *b);
	if (!b)
		return -CAIRN_ENOMEM;
	b->env = *env;
	pthread_mutex_init(&b->mu, NULL);
	*out = b;
	return 0;
}

void backlog_free(backlog *b)
{
	if (!b)
		return;
	result_free(&b->last);
	pthread_mutex_destroy(&b->mu);
	free(b);
}

/* ------------------------------------------------------------ folding */

static int by_workflow(const void *a, const void *b)
{
	return strcmp(((const bl_row *)a)->workflow, ((const bl_row *)b)->workflow);
}

static int by_key(const void *a, const void *b)
{
	const bl_row *x = a, *y = b;
	int c = strcmp(x->group, y->group);
	if (!c)
		c = strcmp(x->workflow, y->workflow);
	return c ? c : x->state - y->state;
}

typedef struct wf_total {
	const char *name; /* the first of its rows' */
	int64_t runs;
	int keep;
} wf_total;

/* Indexes into the totals t, largest first, then by name: which workflows
 * keep their label. */
static int by_total(const void *a, const void *b, void *t)
{
	const wf_total *x = (const wf_total *)t + *(const int *)a;
	const wf_total *y = (const wf_total *)t + *(const int *)b;
	if (x->runs != y->runs)
		return x->runs > y->runs ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* Which rows' workflows are past the max largest (fold[i] = 1): 0 or
 * -CAIRN_ENOMEM. The rows are in workflow order. */
static int past_max(const bl_result *r, int max, char *fold)
{
	wf_total *t = calloc((size_t)r->nrows, sizeof *t);
	int *rank = calloc((size_t)r->nrows, sizeof *rank);
	if (!t || !rank) {
		free(t);
		free(rank);
		return -CAIRN_ENOMEM;
	}
	int nt = 0;
	for (int i = 0; i < r->nrows; i++) {
		if (!nt || strcmp(t[nt - 1].name, r->rows[i].workflow) != 0) {
			rank[nt] = nt;
			t[nt++].name = r->rows[i].workflow;
		}
		t[nt - 1].runs += r->rows[i].runs;
	}
	qsort_r(rank, (size_t)nt, sizeof *rank, by_total, t);
	for (int i = 0; i < nt && i < max; i++)
		t[rank[i]].keep = 1;
	for (int i = 0, k = 0; i < r->nrows; i++) {
		while (strcmp(t[k].name, r->rows[i].workflow) != 0)
			k++;
		fold[i] = !t[k].keep && strcmp(r->rows[i].workflow, METRICS_OTHER) != 0;
	}
	free(rank);
	free(t);
	return 0;
}

/* Renames the workflows past the max largest to "other" and merges rows
 * that then share group, workflow and state; leaves the rows sorted by
 * group, workflow and state. 0 or -CAIRN_ENOMEM. */
static int fold(bl_result *r, int max)
{
	if (r->nrows == 0)
		return 0;
	qsort(r->rows, (size_t)r->nrows, sizeof *r->rows, by_workflow);
	char *past = calloc((size_t)r->nrows, 1);
	int rc = past ? past_max(r, max, past) : -CAIRN_ENOMEM;
	for (int i = 0; !rc && i < r->nrows; i++) {
		if (!past[i])
			continue;
		char *o = strdup(METRICS_OTHER);
		if (!o)
			rc = -CAIRN_ENOMEM;
		else {
			free(r->rows[i].workflow);
			r->rows[i].workflow = o;
		}
	}
	free(past);
	if (rc)
		return rc;
	qsort(r->rows, (size_t)r->nrows, sizeof *r->rows, by_key);
	int n = 0;
	for (int i = 0; i < r->nrows; i++) {
		bl_row *prev = n ? &r->rows[n - 1] : NULL;
		if (prev && by_key(prev, &r->rows[i]) == 0) {
			prev->runs += r->rows[i].runs;
			if (r->rows[i].oldest_s > prev->oldest_s)
				prev->oldest_s = r->rows[i].oldest_s;
			free(r->rows[i].group);
			free(r->rows[i].workflow);
			continue;
		}
		r->rows[n++] = r->rows[i];
	}
	r->nrows = n;
	return 0;
}

/* ------------------------------------------------------------- reading */

static int state_of(const char *s)
{
	for (int i = 0; i < BL_NSTATES; i++)
		if (strcmp(BL_STATE_NAMES[i], s) == 0)
			return i;
	return -1;
}

/* The backlog's rows into r: 0, -CAIRN_EDB or -CAIRN_ENOMEM. */
static int read_runs(PGconn *c, bl_result *r, buf *err)
{
	const char *p[] = {STR(BACKLOG_ROWS_MAX)};
	PGresult *res = db_exec(c, err, SQL_BACKLOG, 1, p);
	if (!res)
		return -CAIRN_EDB;
	int n = PQntuples(res), rc = 0;
	r->rows = calloc((size_t)n + 1, sizeof *r->rows);
	for (int i = 0; r->rows && i < n; i++) {
		if (PQgetisnull(res, i, 0)) {
			r->capped = db_get_bool(res, i, 5);
			continue;
		}
		int st = state_of(PQgetvalue(res, i, 2));
		if (st < 0)
			continue; /* a status this version does not know: not backlog */
		bl_row *row = &r->rows[r->nrows];
		row->group = strdup(PQgetvalue(res, i, 0));
		row->workflow = strdup(PQgetvalue(res, i, 1));
		row->state = st;
		row->runs = db_get_i64(res, i, 3);
		row->oldest_s = PQgetisnull(res, i, 4) ? -1 : strtod(PQgetvalue(res, i, 4), NULL);
		r->nrows++;
		if (!row->group || !row->workflow) {
			rc = -CAIRN_ENOMEM;
			break;
		}
	}
	if (!r->rows)
		rc = -CAIRN_ENOMEM;
	PQclear(res);
	return rc;
}

/* The unowned shards of every known group into r. */
static int read_unowned(PGconn *c, int64_t ttl_ms, bl_result *r, buf *err)
{
	PGresult *res = db_exec(c, err, SQL_SHARDS, 0, NULL);
	if (!res)
		return -CAIRN_EDB;
	int shards = PQntuples(res) == 1 ? db_get_int(res, 0, 0) : 0;
	PQclear(res);
	pgarr groups = PGARR_INIT;
	for (int i = 0; i < r->nrows; i++)
		if (i == 0 || strcmp(r->rows[i].group, r->rows[i - 1].group) != 0)
			pgarr_add(&groups, r->rows[i].group);
	char ttl[24], n[24];
	const char *p[] = {db_i64(ttl, ttl_ms), db_i64(n, shards), pgarr_str(&groups)};
	res = groups.b.oom ? NULL : db_exec(c, err, SQL_UNOWNED, 3, p);
	pgarr_free(&groups);
	if (!res)
		return -CAIRN_EDB;
	int rows = PQntuples(res), rc = 0;
	r->groups = calloc((size_t)rows + 1, sizeof *r->groups);
	for (int i = 0; r->groups && i < rows; i++) {
		r->groups[i].name = strdup(PQgetvalue(res, i, 0));
		r->groups[i].unowned = db_get_i64(res, i, 1);
		r->ngroups++;
		if (!r->groups[i].name)
			rc = -CAIRN_ENOMEM;
	}
	if (!r->groups)
		rc = -CAIRN_ENOMEM;
	PQclear(res);
	return rc;
}

static int read_schedules(PGconn *c, bl_result *r, buf *err)
{
	PGresult *res = db_exec(c, err, SQL_SCHEDULE_LAG, 0, NULL);
	if (!res)
		return -CAIRN_EDB;
	r->schedule_lag_s = strtod(PQgetvalue(res, 0, 0), NULL);
	r->read_at_s = strtod(PQgetvalue(res, 0, 1), NULL);
	PQclear(res);
	return 0;
}

/* One round: reads, folds and publishes. 0, -CAIRN_EDB or -CAIRN_ENOMEM. */
static int backlog_read(backlog *b, PGconn *c, buf *err)
{
	bl_result r = {0};
	int64_t t0 = clock_mono_ms();
	int rc = read_runs(c, &r, err);
	if (!rc)
		rc = fold(&r, b->env.cfg->metrics_max_workflows);
	if (!rc)
		rc = read_unowned(c, b->env.cfg->runner_ttl_ms, &r, err);
	if (!rc)
		rc = read_schedules(c, &r, err);
	if (rc) {
		if (rc == -CAIRN_ENOMEM) {
			buf_reset(err);
			buf_puts(err, "out of memory");
		}
		result_free(&r);
		return rc;
	}
	r.took_s = (double)(clock_mono_ms() - t0) / 1000.0;
	pthread_mutex_lock(&b->mu);
	bl_result old = b->last;
	b->last = r;
	b->published = 1;
	pthread_mutex_unlock(&b->mu);
	result_free(&old);
	return 0;
}

static void unpublish(backlog *b)
{
	pthread_mutex_lock(&b->mu);
	bl_result old = b->last;
	memset(&b->last, 0, sizeof b->last);
	b->published = 0;
	pthread_mutex_unlock(&b->mu);
	result_free(&old);
}

/*
 * cairn.backlog: a round every CAIRN_BACKLOG_INTERVAL. A round that fails
 * while the connection is fine (a statement timeout: the session's is the
 * interval, at least CAIRN_STATEMENT_TIMEOUT) keeps the last result, whose
 * cairn_backlog_read_timestamp_seconds then ages, and is logged once until
 * a round succeeds; a lost connection returns, and the supervisor restarts
 * the singleton after its backoff.
 */
int backlog_singleton(cairn_singleton *s, void *arg)
{
	backlog *b = arg;
	const config *cfg = b->env.cfg;
	buf err = BUF_INIT;
	PGconn *c = db_connect(cairn_singleton_conninfo(s), "cairn-worker backlog", &err);
	int64_t limit = cfg->backlog_interval_ms > cfg->statement_timeout_ms
	                    ? cfg->backlog_interval_ms
	                    : cfg->statement_timeout_ms;
	int rc = c && db_session_limits(c, limit, limit / 2, 0, &err) == 0 ? CAIRN_OK : CAIRN_EDB;
	int failing = 0;
	while (rc == CAIRN_OK && !cairn_singleton_cancelled(s)) {
		int64_t t0 = clock_mono_ms();
		if (backlog_read(b, c, &err) == 0) {
			failing = 0;
		} else if (!db_ok(c)) {
			rc = CAIRN_EDB;
			break;
		} else if (!failing++) {
			log_kv(b->env.log, LOG_WARN,
			       "cannot read the backlog; /metrics keeps the last reading", "error",
			       buf_str(&err), NULL);
		}
		int64_t left = cfg->backlog_interval_ms - (clock_mono_ms() - t0);
		if (left > 0)
			cairn_singleton_sleep(s, left);
	}
	if (rc != CAIRN_OK)
		log_kv(b->env.log, LOG_WARN, "backlog reader failed", "error", buf_str(&err), NULL);
	unpublish(b);
	PQfinish(c);
	buf_free(&err);
	return rc;
}

/* ----------------------------------------------------------- rendering */

/* The runs of every state of each (group, workflow) the last read found,
 * 0 for the states it found none in, so that each series stays while
 * the pair has unfinished runs. */
static void render_runs(const bl_result *r, buf *out)
{
	char g[256], w[256];
	metrics_family(out, "cairn_backlog_runs", "gauge",
	               "Unfinished runs per shard group, workflow and state (due: need a worker "
	               "now; delayed, held, running, sleeping, waiting), as cairn.backlog last "
	               "read them; only on the worker that runs it.");
	for (int i = 0; i < r->nrows;) {
		int64_t n[BL_NSTATES] = {0};
		int k = i;
		for (; k < r->nrows && strcmp(r->rows[k].group, r->rows[i].group) == 0 &&
		       strcmp(r->rows[k].workflow, r->rows[i].workflow) == 0;
		     k++)
			n[r->rows[k].state] = r->rows[k].runs;
		metrics_label(r->rows[i].group, g);
		metrics_label(r->rows[i].workflow, w);
		for (int st = 0; st < BL_NSTATES; st++)
			buf_printf(out,
			           "cairn_backlog_runs{group=\"%s\",workflow=\"%s\",state=\"%s\"} "
			           "%" PRId64 "\n",
			           g, w, BL_STATE_NAMES[st], n[st]);
		i = k;
	}
	metrics_family(out, "cairn_backlog_oldest_due_seconds", "gauge",
	               "How long the oldest due run of a shard group and workflow has been due "
	               "(its start, wake-up, signal or cancel), as of the last read; only "
	               "where runs are due.");
	for (int i = 0; i < r->nrows; i++)
		if (r->rows[i].state == BL_DUE && r->rows[i].runs > 0)
			buf_printf(out,
			           "cairn_backlog_oldest_due_seconds{group=\"%s\",workflow=\"%s\"} "
			           "%.3f\n",
			           metrics_label(r->rows[i].group, g),
			           metrics_label(r->rows[i].workflow, w),
			           r->rows[i].oldest_s > 0 ? r->rows[i].oldest_s : 0);
}

void backlog_render(backlog *b, buf *out)
{
	char g[256];
	pthread_mutex_lock(&b->mu);
	const bl_result *r = &b->last;
	metrics_sample(out, "cairn_backlog_publisher", "gauge",
	               "1 on the worker that runs cairn.backlog and shows the database's backlog "
	               "(the cairn_backlog_*, cairn_shards_unowned and cairn_schedule_lag_seconds "
	               "families), 0 on the others.",
	               NULL, b->published);
	if (!b->published) {
		pthread_mutex_unlock(&b->mu);
		return;
	}
	render_runs(r, out);
	metrics_sample(out, "cairn_backlog_capped", "gauge",
	               "1 when a part of the last backlog read reached its cap of " STR(
	                   BACKLOG_ROWS_MAX) " rows: the counts are lower bounds.",
	               NULL, r->capped);
	metrics_sample(out, "cairn_backlog_read_timestamp_seconds", "gauge",
	               "When the backlog shown was read (the database's clock, Unix seconds).",
	               NULL, r->read_at_s);
	metrics_sample(out, "cairn_backlog_read_duration_seconds", "gauge",
	               "How long the last backlog read took.", NULL, r->took_s);
	metrics_family(out, "cairn_shards_unowned", "gauge",
	               "Shards of a group that no live runner owns (a group with runs and no "
	               "runner has them all), as of the last backlog read.");
	for (int i = 0; i < r->ngroups; i++)
		buf_printf(out, "cairn_shards_unowned{group=\"%s\"} %" PRId64 "\n",
		           metrics_label(r->groups[i].name, g), r->groups[i].unowned);
	metrics_sample(out, "cairn_schedule_lag_seconds", "gauge",
	               "How long the most overdue schedule (not paused) has been due without "
	               "firing, as of the last backlog read; 0 when none is.",
	               NULL, r->schedule_lag_s);
	pthread_mutex_unlock(&b->mu);
}
