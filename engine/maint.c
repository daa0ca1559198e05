/*
 * maint.c - the built-in singletons (DESIGN section 6):
 *   cairn.health   GETs every runner's /healthz with libcurl and counts
 *                  failed probes in cairn.runners.health_failures. A runner
 *                  that answers with anything but 200 (its loops are stuck)
 *                  HEALTH_FAILURES times in a row is marked unhealthy, so
 *                  its shards move (never the last healthy runner). A probe
 *                  that gets no answer is counted but never marks a runner
 *                  that the database says is live (fresh heartbeat, lease
 *                  backend connected): that runner demonstrably works, and
 *                  the probe's failure is the network's or the address's;
 *                  a runner that is really gone loses its shards through
 *                  its heartbeat and lease instead. Removes runners whose
 *                  heartbeat is older than twice the TTL. A round every
 *                  HEALTH_ROUNDS_EVERY heartbeat intervals, one statement
 *                  while every runner is healthy.
 *   cairn.janitor  deletes finished runs older than CAIRN_RETENTION, in
 *                  small batches, checking for cancellation between them,
 *                  every minute (or every CAIRN_RETENTION if shorter); the
 *                  first run of a chain stays while later links do; and
 *                  every STRANDED_INTERVAL_MS moves the due runs of
 *                  groups that no live runner serves (nobody claims them)
 *                  to a group with a live worker that serves their
 *                  workflow, or, once none has for
 *                  CAIRN_UNKNOWN_WORKFLOW_TIMEOUT, to its own group, whose
 *                  owner fails them (SQL_STRANDED).
 *   cairn.relay    the one LISTENing session: forwards wake-ups and
 *                  membership changes to the runners over HTTP (relay_main).
 *   cairn.scheduler fires the schedules that are due (scheduler_main).
 *   cairn.backlog  reads the database's backlog for /metrics (backlog.c).
 * Each opens its own connection and returns an error (so the singleton
 * supervisor restarts it with backoff) when the database fails.
 */
#include "maint.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "client.h"
#include "clock.h"
#include "cron.h"
#include "db.h"
#include "hash.h"
#include "pgarr.h"
#include "schedule.h"

#define HEALTH_FAILURES      3
#define HEALTH_ROUNDS_EVERY  10 /* heartbeat intervals */
#define JANITOR_BATCH        "500"
#define JANITOR_INTERVAL_MS  60000
#define STRANDED_BATCH       "200"
#define STRANDED_INTERVAL_MS 5000

/* One statement per round while all is well: removes the runners whose
 * heartbeat is older than twice the TTL (first row: their ids, the other
 * columns NULL), then lists the runners to probe, with whether the database
 * sees them live and whether their health record is clean. */
static const char SQL_HEALTH_LIST[] =
    "WITH gone AS (DELETE FROM cairn.runners "
    "              WHERE heartbeat_at < now() - 2 * $1 * interval '1 millisecond' RETURNING id) "
    "SELECT NULL::bigint, NULL::text, NULL::boolean, NULL::boolean, "
    "       (SELECT string_agg(id::text, ',') FROM gone) "
    "UNION ALL "
    "SELECT r.id, r.address, cairn.runner_live(r, $1::bigint), "
    "       r.health_failures = 0 AND r.healthy, NULL "
    "FROM cairn.runners r WHERE r.heartbeat_at > now() - $1 * interval '1 millisecond' "
    "ORDER BY 1 NULLS FIRST";

static const char SQL_HEALTH_OK[] = "UPDATE cairn.runners SET health_failures = 0, healthy = true "
                                    "WHERE id = $1 AND (health_failures <> 0 OR NOT healthy)";

/* Counts the failure; marks unhealthy only when it may ($4) and another
 * healthy live runner remains. */
static const char SQL_HEALTH_FAIL[] =
    "UPDATE cairn.runners r SET health_failures = r.health_failures + 1, "
    "  healthy = CASE WHEN $4::boolean AND r.health_failures + 1 >= $2 "
    "    AND EXISTS (SELECT 1 FROM cairn.runners o "
    "      WHERE o.id <> r.id AND o.healthy "
    "        AND o.heartbeat_at > now() - $3 * interval '1 millisecond') "
    "    THEN false ELSE r.healthy END "
    "WHERE r.id = $1 RETURNING r.healthy, r.health_failures";

/* The outer condition is checked again on the row as it is when deleted: a
 * run that `cairn retry` re-drove meanwhile is no longer finished, and stays.
 * The first run of a chain of runs that continued as new (migration 0022)
 * stays while a later link does: its key names the chain, and `cairn
 * result` of it follows the chain to its last run. The links that ended
 * go like any finished run, so a workflow that continues for ever keeps
 * about a retention's worth of them. $1 retention (ms), $2 at most so many,
 * $3 of the part whose key this is (cairn.parts; 0 on one server): on
 * Citus one task on the node of the part, where a statement over every
 * part was refused (it joins runs to runs by chain_id). A signal sent to a
 * run as it continued as new, which its successor (in the same shard, so
 * the same part) reads but has not taken yet (see cont in commit.c), goes
 * to it (mv). */
#define JANITOR(returning)                                                                         \
	"WITH old AS (SELECT r.id FROM cairn.runs r "                                              \
	"  WHERE r.part = $3 AND r.finished_at < now() - $1 * interval '1 millisecond' "           \
	"    AND NOT EXISTS (SELECT 1 FROM cairn.runs c WHERE c.part = $3 AND c.chain_id = r.id) " \
	"  ORDER BY r.finished_at LIMIT $2), "                                                     \
	"mv AS (UPDATE cairn.signals g SET run_id = s.id FROM old o "                              \
	"  JOIN cairn.runs s ON s.part = $3 AND s.continued_from = o.id "                          \
	"  WHERE g.part = $3 AND g.run_id = o.id AND g.consumed_by_seq IS NULL "                   \
	"    AND s.finished_at IS NULL) "                                                          \
	"DELETE FROM cairn.runs WHERE part = $3 AND id IN (SELECT id FROM old) "                   \
	"AND finished_at < now() - $1 * interval '1 millisecond'" returning
static const char SQL_JANITOR[] = JANITOR("");
/* With parts: the deleted runs' workflows, keys and ids, whose keys the
 * janitor deletes from run_keys in the same transaction (SQL_JANITOR_KEYS:
 * $1 the keys' parts, $2 workflows, $3 keys, $4 ids; a statement over the
 * parts named, which it reads as an intermediate result). */
static const char SQL_JANITOR_PARTS[] = JANITOR(" RETURNING workflow, key, id");
static const char SQL_JANITOR_KEYS[] =
    "DELETE FROM cairn.run_keys k WHERE (k.part, k.workflow, k.key, k.run_id) IN "
    "  (SELECT * FROM unnest($1::int[], $2::text[], $3::text[], $4::bigint[]))";

/*
 * Stranded runs (routing by workflow, migration 0020): a run whose group has
 * no live runner at all is claimed by nobody, so no worker's
 * unknown-workflow path sees it. Of the oldest due runs and messages
 * (STRANDED_BATCH of each: the due runs of live groups are claimed oldest
 * first, so those stranded come to the front), those of groups without a
 * live runner move, with their messages, to a group with a live worker
 * that serves their workflow (cairn.reroute_target, as a claim moves
 * them), whose owner is woken. Those of a workflow that no live worker has
 * served for CAIRN_UNKNOWN_WORKFLOW_TIMEOUT, due for as long, move to this
 * janitor's own group, whose owner fails them as any run it cannot serve,
 * with its messages and the run's parent told: only once the janitor has
 * itself watched for that long, so a fleet that starts after a pause fails
 * nothing before the other groups' workers are up. A run locked by a
 * writer is left for the next pass.
 *
 * Liveness reads pg_stat_activity (cairn.runner_live), so it is read by a
 * statement that touches no distributed table (SQL_LIVE_GROUPS), where the
 * runners' lease sessions are: on Citus, a function in a statement sent to
 * a worker node runs there, and would see none of them. Then the stranded
 * runs (SQL_STRANDED), their targets (SQL_STRANDED_TARGETS, again no
 * distributed table), the move, part by part (SQL_STRANDED_MOVE, one task
 * on the node of the part on Citus), and the wake-up of their owners. A
 * pass with nothing stranded is the first two statements, each reading a
 * few index entries.
 */
static const char SQL_LIVE_GROUPS[] =
    "SELECT coalesce(array_agg(DISTINCT g), '{}') FROM cairn.runners r, unnest(r.groups) g "
    "WHERE cairn.runner_live(r, $1)";
/* $1 the live groups, $2 how many due runs and messages to look at, $3
 * CAIRN_UNKNOWN_WORKFLOW_TIMEOUT: each stranded run, its part, workflow and
 * group, and whether it has been due for that long. */
static const char SQL_STRANDED[] =
    "WITH due AS ((SELECT id FROM cairn.runs WHERE start_at <= now() "
    "              ORDER BY start_at, id LIMIT $2) "
    "        UNION (SELECT run_id FROM cairn.messages WHERE deliver_at <= now() "
    "               ORDER BY deliver_at, id LIMIT $2)) "
    "SELECT r.id, r.part, r.workflow, r.shard_group, "
    "       r.scheduled_at <= now() - $3 * interval '1 millisecond' "
    "FROM cairn.runs r WHERE r.id = ANY (ARRAY(SELECT id FROM due)) "
    "  AND r.finished_at IS NULL AND r.shard_group <> ALL ($1::text[])";
/* $1 runner TTL, $2 CAIRN_UNKNOWN_WORKFLOW_TIMEOUT, $3 watched that long,
 * $4 this janitor's group, $5, $6, $7 the stranded runs' workflows, groups
 * and whether each was due that long: the group each goes to, NULL for
 * none yet. */
static const char SQL_STRANDED_TARGETS[] =
    "SELECT coalesce(cairn.reroute_target(x.w, x.g, $1), "
    "         CASE WHEN $3 AND x.old AND NOT EXISTS (SELECT 1 FROM cairn.workflows w "
    "                WHERE w.workflow = x.w "
    "                  AND w.live_until > now() - $2 * interval '1 millisecond') "
    "              THEN $4 END) "
    "FROM unnest($5::text[], $6::text[], $7::bool[]) WITH ORDINALITY AS x(w, g, old, ord) "
    "ORDER BY x.ord";
/* Part $1: runs $2 from groups $3 to groups $4, those still there. The
 * runs are found by their ids (= ANY: their primary key), a join with the
 * arrays' rows was planned as a scan of every run. */
static const char SQL_STRANDED_MOVE[] =
    "WITH s AS (SELECT r.id, r.shard_group AS g FROM cairn.runs r "
    "           WHERE r.part = $1 AND r.id = ANY ($2::bigint[]) AND r.finished_at IS NULL "
    "           FOR UPDATE OF r SKIP LOCKED), "
    "x AS (SELECT * FROM unnest($2::bigint[], $3::text[], $4::text[]) AS x(id, g, t)), "
    "mv AS (UPDATE cairn.runs r SET shard_group = x.t, updated_at = now() "
    "       FROM s JOIN x ON x.id = s.id AND x.g = s.g WHERE r.part = $1 AND r.id = s.id "
    "       RETURNING r.id, r.shard_group, r.shard, r.workflow, x.g AS from_group), "
    "mvm AS (UPDATE cairn.messages m SET shard_group = mv.shard_group FROM mv "
    "        WHERE m.part = $1 AND m.run_id = mv.id) "
    "SELECT id, shard_group, shard, workflow, from_group FROM mv";

static size_t discard(char *p, size_t size, size_t n, void *u)
{
	return size * n;
}

typedef enum probe { PROBE_OK, PROBE_ANSWERED_FAIL, PROBE_NO_ANSWER } probe;

/* GET (or, with post, an empty POST) http://address/path, with the bearer
 * token if one is set (CAIRN_HTTP_TOKEN): the status code, or 0 with why
 * saying what failed. */
static long http_call(CURL *h, const char *token, const char *address, const char *path, int post,
                      int64_t timeout_ms, char *why, size_t n)
{
	char url[1024], auth[300];
	struct curl_slist *headers = NULL;
	snprintf(url, sizeof url, "http://%s%s", address, path);
	curl_easy_reset(h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http");
	curl_easy_setopt(h, CURLOPT_PROXY, ""); /* runners reach each other directly */
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
	if (post) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
	}
	if (*token) {
		snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
		if (!(headers = curl_slist_append(NULL, auth))) {
			snprintf(why, n, "out of memory");
			return 0;
		}
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
	}
	CURLcode cc = curl_easy_perform(h);
	curl_slist_free_all(headers);
	if (cc != CURLE_OK) {
		snprintf(why, n, "no answer: %s", curl_easy_strerror(cc));
		return 0;
	}
	long code = 0;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
	snprintf(why, n, "answered %ld", code);
	return code;
}

/* GETs /healthz at address; why says what failed. */
static probe probe_runner(CURL *h, const char *address, int64_t timeout_ms, char *why, size_t n)
{
	long code = http_call(h, "", address, "/healthz", 0, timeout_ms, why, n);
	return code == 200 ? PROBE_OK : code ? PROBE_ANSWERED_FAIL : PROBE_NO_ANSWER;
}

static int health_round(const maint_env *e, PGconn *c, CURL *h)
{
	buf err = BUF_INIT;
	char ttl[24], limit[24];
	db_i64(ttl, e->cfg->runner_ttl_ms);
	db_i64(limit, HEALTH_FAILURES);
	const char *p[] = {ttl};
	PGresult *r = db_exec(c, &err, SQL_HEALTH_LIST, 1, p);
	int rc = r ? 0 : -1;
	int64_t timeout =
	    e->cfg->heartbeat_interval_ms < 1000 ? e->cfg->heartbeat_interval_ms : 1000;
	if (r && !PQgetisnull(r, 0, 4))
		log_kv(e->log, LOG_INFO, "removed dead runners", "runner_ids", PQgetvalue(r, 0, 4),
		       NULL);
	for (int i = 1; r && i < PQntuples(r) && !rc; i++) {
		const char *id = PQgetvalue(r, i, 0), *addr = PQgetvalue(r, i, 1);
		int live = db_get_bool(r, i, 2), clean = db_get_bool(r, i, 3);
		char why[CURL_ERROR_SIZE + 32] = "";
		probe pr = addr[0] ? probe_runner(h, addr, timeout, why, sizeof why) : PROBE_OK;
		if (pr == PROBE_OK) {
			if (!clean)
				rc = db_cmd(c, &err, SQL_HEALTH_OK, 1, (const char *const[]){id});
			continue;
		}
		/* No answer from a runner the database sees alive marks nothing. */
		int may_mark = pr == PROBE_ANSWERED_FAIL || !live;
		PGresult *f = db_exec(c, &err, SQL_HEALTH_FAIL, 4,
		                      (const char *const[]){id, limit, ttl, may_mark ? "t" : "f"});
		if (!f) {
			rc = -1;
			break;
		}
		int n = PQntuples(f) == 1 ? db_get_int(f, 0, 1) : 0;
		char fails[24];
		snprintf(fails, sizeof fails, "%d", n);
		log_kv(e->log, LOG_INFO, "runner health probe failed", "runner_id", id, "address",
		       addr, "failures", fails, "reason", why, NULL);
		if (n >= HEALTH_FAILURES && may_mark)
			log_kv(e->log, LOG_WARN,
			       db_get_bool(f, 0, 0)
			           ? "runner failing health checks, kept healthy: it is the last "
			             "healthy runner"
			           : "runner marked unhealthy",
			       "runner_id", id, "address", addr, NULL);
		else if (n == HEALTH_FAILURES)
			log_kv(
			    e->log, LOG_WARN,
			    "runner does not answer at its advertised address but is live in the "
			    "database (fresh heartbeat, lease connection open): kept healthy with "
			    "its shards; check its CAIRN_ADVERTISE_ADDR and the network",
			    "runner_id", id, "address", addr, NULL);
		PQclear(f);
	}
	PQclear(r);
	if (rc)
		log_kv(e->log, LOG_WARN, "health check round failed", "error", buf_str(&err), NULL);
	else
		atomic_fetch_add(&e->m->health_checks, 1);
	buf_free(&err);
	return rc;
}

static int health_main(cairn_singleton *s, void *arg)
{
	const maint_env *e = arg;
	buf err = BUF_INIT;
	PGconn *c = db_connect(cairn_singleton_conninfo(s), "cairn-worker health", &err);
	CURL *h = curl_easy_init();
	int rc = c && h ? CAIRN_OK : CAIRN_EDB;
	if (!c)
		log_kv(e->log, LOG_WARN, "health checker cannot connect", "error", buf_str(&err),
		       NULL);
	while (rc == CAIRN_OK && !cairn_singleton_cancelled(s)) {
		if (health_round(e, c, h) < 0 && !db_ok(c))
			rc = CAIRN_EDB;
		else
			cairn_singleton_sleep(s,
			                      HEALTH_ROUNDS_EVERY * e->cfg->heartbeat_interval_ms);
	}
	if (h)
		curl_easy_cleanup(h);
	PQfinish(c);
	buf_free(&err);
	return rc;
}

/* Wakes the owners of runs ids (bigint[]) of shards (int[]) in groups
 * (text[]), from a statement that reads no distributed table, after the
 * commit that wrote them: on Citus this runs on the coordinator, where the
 * relay listens. Lost on failure, like every wake-up: the poll fallback
 * makes up for it. */
static void wake_each(PGconn *c, const char *groups, const char *shards, const char *ids)
{
	const char *p[] = {groups, shards, ids};
	PQclear(db_exec(c, NULL,
	                "SELECT count(cairn.wake(x.g, x.sh, x.id, false)) "
	                "FROM unnest($1::text[], $2::int[], $3::bigint[]) AS x(g, sh, id)",
	                3, p));
}

/* The runs moved by SQL_STRANDED_MOVE (r, its rows): their owners to wake
 * (groups, shards, ids) and, for the log, "ID (WORKFLOW, FROM to TO)". */
typedef struct moved {
	pgarr groups, shards, ids;
	buf said;
} moved;

/* Moves the stranded runs of r (SQL_STRANDED's rows) whose target (t, the
 * rows of SQL_STRANDED_TARGETS) is not NULL, part by part, into out: 0 or
 * -1. */
static int stranded_move(PGconn *c, PGresult *r, PGresult *t, moved *out, buf *err)
{
	int n = PQntuples(r);
	char *done = calloc((size_t)n + 1, 1);
	if (!done)
		return -1;
	int rc = 0;
	for (int i = 0; i < n && !rc; i++) {
		if (done[i] || PQgetisnull(t, i, 0))
			continue;
		const char *part = PQgetvalue(r, i, 1);
		pgarr ids = PGARR_INIT, from = PGARR_INIT, to = PGARR_INIT;
		for (int k = i; k < n; k++)
			if (!done[k] && !PQgetisnull(t, k, 0) &&
			    strcmp(PQgetvalue(r, k, 1), part) == 0) {
				done[k] = 1;
				pgarr_add(&ids, PQgetvalue(r, k, 0));
				pgarr_add(&from, PQgetvalue(r, k, 3));
				pgarr_add(&to, PQgetvalue(t, k, 0));
			}
		const char *p[] = {part, pgarr_str(&ids), pgarr_str(&from), pgarr_str(&to)};
		PGresult *m = ids.b.oom || from.b.oom || to.b.oom
		                  ? NULL
		                  : db_exec(c, err, SQL_STRANDED_MOVE, 4, p);
		rc = m ? 0 : -1;
		for (int k = 0; m && k < PQntuples(m); k++) {
			pgarr_add(&out->ids, PQgetvalue(m, k, 0));
			pgarr_add(&out->groups, PQgetvalue(m, k, 1));
			pgarr_add(&out->shards, PQgetvalue(m, k, 2));
			buf_printf(&out->said, "%s%s (%s, %s to %s)", out->said.len ? ", " : "",
			           PQgetvalue(m, k, 0), PQgetvalue(m, k, 3), PQgetvalue(m, k, 4),
			           PQgetvalue(m, k, 1));
		}
		PQclear(m);
		pgarr_free(&ids);
		pgarr_free(&from);
		pgarr_free(&to);
	}
	free(done);
	return rc;
}

/* One pass over stranded runs (SQL_LIVE_GROUPS to SQL_STRANDED_MOVE);
 * watched: the janitor has run for CAIRN_UNKNOWN_WORKFLOW_TIMEOUT. 0 or -1
 * (logged). */
static int stranded_pass(const maint_env *e, PGconn *c, int watched, buf *err)
{
	char ttl[24], timeout[24];
	db_i64(ttl, e->cfg->runner_ttl_ms);
	db_i64(timeout, e->cfg->unknown_workflow_timeout_ms);
	const char *lp[] = {ttl};
	PGresult *live = db_exec(c, err, SQL_LIVE_GROUPS, 1, lp), *r = NULL, *t = NULL;
	if (live) {
		const char *p[] = {PQgetvalue(live, 0, 0), STRANDED_BATCH, timeout};
		r = db_exec(c, err, SQL_STRANDED, 3, p);
	}
	moved mv = {PGARR_INIT, PGARR_INIT, PGARR_INIT, BUF_INIT};
	int rc = r ? 0 : -1;
	if (r && PQntuples(r) > 0) {
		pgarr w = PGARR_INIT, g = PGARR_INIT, old = PGARR_INIT;
		for (int i = 0; i < PQntuples(r); i++) {
			pgarr_add(&w, PQgetvalue(r, i, 2));
			pgarr_add(&g, PQgetvalue(r, i, 3));
			pgarr_add(&old, PQgetvalue(r, i, 4));
		}
		const char *p[] = {
		    ttl,           timeout,       watched ? "t" : "f", e->cfg->groups[0],
		    pgarr_str(&w), pgarr_str(&g), pgarr_str(&old)};
		t = w.b.oom || g.b.oom || old.b.oom ? NULL
		                                    : db_exec(c, err, SQL_STRANDED_TARGETS, 7, p);
		rc = t ? stranded_move(c, r, t, &mv, err) : -1;
		pgarr_free(&w);
		pgarr_free(&g);
		pgarr_free(&old);
	}
	if (mv.ids.n) {
		wake_each(c, pgarr_str(&mv.groups), pgarr_str(&mv.shards), pgarr_str(&mv.ids));
		char n[24];
		log_kv(e->log, LOG_INFO,
		       "moved due runs of groups without a live runner to a group that serves "
		       "their workflow (or, served by none, to this one, which fails them)",
		       "count", db_i64(n, (int64_t)mv.ids.n), "runs", buf_str(&mv.said), NULL);
	}
	if (rc < 0)
		log_kv(e->log, LOG_WARN, "janitor failed to move stranded runs", "error",
		       buf_str(err), NULL);
	PQclear(live);
	PQclear(r);
	PQclear(t);
	pgarr_free(&mv.groups);
	pgarr_free(&mv.shards);
	pgarr_free(&mv.ids);
	buf_free(&mv.said);
	return rc;
}

/* One part's pass on a database with parts: its runs (SQL_JANITOR_PARTS,
 * parameters p) and their keys (SQL_JANITOR_KEYS), in one transaction. How
 * many runs, or -1 on a database error. */
static int64_t janitor_keyed(PGconn *c, const char *const *p, const db_settings *st, buf *err)
{
	if (db_cmd(c, err, "BEGIN", 0, NULL) < 0)
		return -1;
	PGresult *r = db_exec(c, err, SQL_JANITOR_PARTS, 3, p);
	int64_t n = r ? PQntuples(r) : -1;
	pgarr parts = PGARR_INIT, flows = PGARR_INIT, keys = PGARR_INIT, ids = PGARR_INIT;
	for (int i = 0; i < n; i++) {
		const char *key = PQgetvalue(r, i, 1);
		pgarr_add_i64(&parts, db_part_key(st, hash_shard(key, st->shards)));
		pgarr_add(&flows, PQgetvalue(r, i, 0));
		pgarr_add(&keys, key);
		pgarr_add(&ids, PQgetvalue(r, i, 2));
	}
	PQclear(r);
	const char *k[] = {pgarr_str(&parts), pgarr_str(&flows), pgarr_str(&keys), pgarr_str(&ids)};
	if (n > 0 && (parts.b.oom || flows.b.oom || keys.b.oom || ids.b.oom)) {
		buf_puts(err, "out of memory listing the runs' keys");
		n = -1;
	}
	if (n > 0 && db_cmd(c, err, SQL_JANITOR_KEYS, 4, k) < 0)
		n = -1;
	if (n >= 0 && db_cmd(c, err, "COMMIT", 0, NULL) < 0)
		n = -1;
	if (n < 0)
		db_rollback(c);
	pgarr_free(&parts);
	pgarr_free(&flows);
	pgarr_free(&keys);
	pgarr_free(&ids);
	return n;
}

/* Deletes the finished runs past retention, part by part (SQL_JANITOR):
 * how many, -1 on a database error (logged); *full: some part had more
 * than a batch. */
static int64_t janitor_pass(const maint_env *e, PGconn *c, const db_settings *st, int *full,
                            buf *err)
{
	char ret[24], part[24];
	int64_t n = 0;
	*full = 0;
	db_i64(ret, e->cfg->retention_ms);
	for (int i = 0; i < st->nparts; i++) {
		const char *p[] = {ret, JANITOR_BATCH, db_i64(part, st->part_keys[i])};
		PGresult *r = st->nparts > 1 ? NULL : db_exec(c, err, SQL_JANITOR, 3, p);
		int64_t got = st->nparts > 1 ? janitor_keyed(c, p, st, err)
		              : r            ? atoi(PQcmdTuples(r))
		                             : -1;
		PQclear(r);
		if (got < 0) {
			log_kv(e->log, LOG_WARN, "janitor failed", "error", buf_str(err), NULL);
			return -1;
		}
		n += got;
		*full |= got >= atoi(JANITOR_BATCH);
	}
	if (n > 0) {
		char runs[24];
		log_kv(e->log, LOG_INFO, "janitor deleted finished runs", "runs", db_i64(runs, n),
		       NULL);
	}
	return n;
}

static int janitor_main(cairn_singleton *s, void *arg)
{
	const maint_env *e = arg;
	buf err = BUF_INIT;
	PGconn *c = db_connect(cairn_singleton_conninfo(s), "cairn-worker janitor", &err);
	db_settings st;
	int rc = c && db_read_settings(c, &st, &err) == 0 ? CAIRN_OK : CAIRN_EDB;
	int64_t started = clock_mono_ms(), next_retention = started;
	while (rc == CAIRN_OK && !cairn_singleton_cancelled(s)) {
		int64_t now = clock_mono_ms();
		if (now >= next_retention) {
			int full;
			if (janitor_pass(e, c, &st, &full, &err) < 0) {
				rc = CAIRN_EDB;
				break;
			}
			/* Every minute, or every CAIRN_RETENTION if shorter. */
			int64_t every = e->cfg->retention_ms < JANITOR_INTERVAL_MS
			                    ? e->cfg->retention_ms
			                    : JANITOR_INTERVAL_MS;
			next_retention = full ? now : now + every;
		}
		int watched = now - started >= e->cfg->unknown_workflow_timeout_ms;
		if (stranded_pass(e, c, watched, &err) < 0 && !db_ok(c)) {
			rc = CAIRN_EDB;
			break;
		}
		int64_t wait = next_retention - clock_mono_ms();
		if (wait > 0)
			cairn_singleton_sleep(
			    s, wait < STRANDED_INTERVAL_MS ? wait : STRANDED_INTERVAL_MS);
	}
	PQfinish(c);
	buf_free(&err);
	return rc;
}

/* ------------------------------------------------------------- the relay */

#define RELAY_TIMEOUT_MS 250  /* one POST to a runner: an answer takes well under 1 ms */
#define RELAY_RETRY_MS   2000 /* a runner that did not answer is tried again after this */
#define RELAY_SLICE_MS   100  /* how often the relay looks at its cancel flag */

/* A runner the relay knows: its advertised address, and whether the last
 * POST to it failed (logged once until one succeeds). */
typedef struct relay_runner {
	int64_t id;
	char address[256];
	int failing;
	int64_t retry_at; /* while failing: not tried before this (monotonic ms) */
	int wake;         /* 0 none, 1 wake, 2 wake and look for cancelled runs */
	int all;          /* the wake-up is for every due run, not only for runs[] */
	int nruns;
	int64_t runs[CAIRN_WAKE_RUNS]; /* the runs that got work */
} relay_runner;

typedef struct relay_state {
	const maint_env *env;
	PGconn *conn;
	CURL *h;
	relay_runner *rs;
	int n;
	char members[40]; /* the live runners' fingerprint as last read */
	char told[40];    /* the fingerprint last posted to the runners */
} relay_state;

/* The live runners, and their fingerprint (the heartbeat's). */
static const char SQL_RELAY_LOAD[] =
    "WITH live AS (SELECT r.id, r.address, r.healthy FROM cairn.runners r "
    "              WHERE cairn.runner_live(r, $1)) "
    "SELECT id, address, (SELECT " CAIRN_MEMBERS_FP " FROM live) FROM live ORDER BY id";

/* Reads the live runners' addresses (wake-ups pending for them are kept)
 * and their fingerprint. */
static int relay_load(relay_state *r, buf *err)
{
	char ttl[24];
	const char *p[] = {db_i64(ttl, r->env->cfg->runner_ttl_ms)};
	PGresult *res = db_exec(r->conn, err, SQL_RELAY_LOAD, 1, p);
	if (!res)
		return -CAIRN_EDB;
	int n = PQntuples(res);
	snprintf(r->members, sizeof r->members, "%s", n ? PQgetvalue(res, 0, 2) : "");
	relay_runner *rs = calloc((size_t)n + 1, sizeof *rs);
	for (int i = 0; rs && i < n; i++) {
		int64_t id = db_get_i64(res, i, 0);
		for (int k = 0; k < r->n; k++)
			if (r->rs[k].id == id)
				rs[i] = r->rs[k];
		rs[i].id = id;
		snprintf(rs[i].address, sizeof rs[i].address, "%s", PQgetvalue(res, i, 1));
	}
	PQclear(res);
	if (!rs)
		return -CAIRN_ENOMEM;
	free(r->rs);
	r->rs = rs;
	r->n = n;
	return 0;
}

/* A runner that does not answer (frozen, unreachable) is tried again only
 * every RELAY_RETRY_MS, so it holds up the wake-ups of the others for at
 * most RELAY_TIMEOUT_MS in that time. 1 if the POST was answered. */
static int relay_post(relay_state *r, relay_runner *rr, const char *path)
{
	if (r->env->poke_self && r->env->poke_self(r->env->poke_arg, rr->id, path))
		return 1;
	if (rr->failing && clock_mono_ms() < rr->retry_at)
		return 0;
	char why[CURL_ERROR_SIZE + 32];
	long code = rr->address[0] ? http_call(r->h, r->env->cfg->http_token, rr->address, path, 1,
	                                       RELAY_TIMEOUT_MS, why, sizeof why)
	                           : 0;
	if (code == 204) {
		rr->failing = 0;
		return 1;
	}
	if (!rr->address[0])
		snprintf(why, sizeof why, "it advertises no address");
	if (!rr->failing) {
		char id[24];
		log_kv(
		    r->env->log, LOG_WARN,
		    "cannot wake a runner: its runs wait until it answers again, or for its next "
		    "poll (CAIRN_POLL_INTERVAL); check its CAIRN_ADVERTISE_ADDR and the network",
		    "runner_id", db_i64(id, rr->id), "address", rr->address, "reason", why, NULL);
	}
	rr->failing = 1;
	rr->retry_at = clock_mono_ms() + RELAY_RETRY_MS;
	return 0;
}

/* Pokes every runner: the membership (when fp is set), and a claim. */
static void relay_all(relay_state *r, const char *fp)
{
	char path[64];
	snprintf(path, sizeof path, "/members/%s", fp ? fp : "");
	for (int i = 0; i < r->n; i++) {
		if (fp)
			relay_post(r, &r->rs[i], path);
		r->rs[i].wake = 2;
		r->rs[i].all = 1;
	}
}

/* A wake-up for rr: for run (0: for every due run), and with cancel, to
 * look for cancelled runs in flight. */
static void relay_mark(relay_runner *rr, int cancel, int64_t run)
{
	if (rr->wake < 1 + cancel)
		rr->wake = 1 + cancel;
	if (run <= 0 || wake_runs_add(rr->runs, &rr->nruns, run) < 0)
		rr->all = 1;
}

/* Sends rr its pending wake-up: POST /wake[/cancel][/RUN,RUN,...]. One
 * that is not answered stays pending and is tried again with the relay's
 * next round (every RELAY_SLICE_MS at least). */
static void relay_wake(relay_state *r, relay_runner *rr)
{
	char path[32 + CAIRN_WAKE_RUNS * 21];
	int len = snprintf(path, sizeof path, "/wake%s", rr->wake == 2 ? CAIRN_WAKE_CANCEL : "");
	for (int i = 0; !rr->all && i < rr->nruns; i++)
		len += snprintf(path + len, sizeof path - (size_t)len, "%c%" PRId64, i ? ',' : '/',
		                rr->runs[i]);
	if (relay_post(r, rr, path))
		rr->wake = rr->all = rr->nruns = 0;
	else
		rr->all = 1; /* kept, for every due run, until the runner answers */
}

/*
 * Takes the notifications that came in: wake-ups are marked on their runner
 * (an unknown one reloads the addresses once). Membership changes are
 * relayed once for all that came in together, with the fingerprint read
 * now, and only when it is not the one last posted: a notification's own
 * fingerprint may be stale by the time it is read (a fleet that is starting
 * sends one per runner that joins), and a runner told an old one would
 * rebalance for nothing and, at its next heartbeat, notify the current one
 * again: with many runners the relay never caught up. 0 or -CAIRN_EDB.
 */
static int relay_take(relay_state *r, buf *err)
{
	if (!PQconsumeInput(r->conn)) {
		buf_reset(err);
		buf_puts(err, PQerrorMessage(r->conn));
		return -CAIRN_EDB;
	}
	int reloaded = 0, members = 0;
	PGnotify *nt;
	while ((nt = PQnotifies(r->conn))) {
		if (strcmp(nt->relname, CAIRN_MEMBERS_CHANNEL) == 0) {
			members = 1;
		} else {
			char *end;
			int64_t id = strtoll(nt->extra, &end, 10);
			size_t cl = strlen(CAIRN_WAKE_CANCEL);
			int cancel = strncmp(end, CAIRN_WAKE_CANCEL, cl) == 0;
			end += cancel ? cl : 0;
			char *after = end;
			int64_t run = *end == ' ' ? strtoll(end + 1, &after, 10) : 0;
			/* A run an enqueue handed to its owner (migration 0030:
			 * "OWNER RUN +", or with a claim after the run from a
			 * client of that release): to this worker's own poller
			 * directly. */
			if (!cancel && run > 0 && *after == ' ' && r->env->push_self &&
			    r->env->push_self(r->env->poke_arg, id, run)) {
				PQfreemem(nt);
				continue;
			}
			int k = 0;
			while (k < r->n && r->rs[k].id != id)
				k++;
			if (k == r->n && !reloaded) {
				int rc = relay_load(r, err);
				if (rc) {
					PQfreemem(nt);
					return rc;
				}
				reloaded = 1;
				for (k = 0; k < r->n && r->rs[k].id != id;)
					k++;
			}
			if (k < r->n)
				relay_mark(&r->rs[k], cancel, run);
		}
		PQfreemem(nt);
	}
	if (!members)
		return 0;
	int rc = reloaded ? 0 : relay_load(r, err);
	if (!rc && strcmp(r->members, r->told) != 0) {
		snprintf(r->told, sizeof r->told, "%s", r->members);
		relay_all(r, r->members);
	}
	return rc;
}

/*
 * cairn.relay: the one session that LISTENs for wake-ups. PostgreSQL makes
 * every listening session of a database read every notification (a
 * transaction each), so if every worker listened, a run would cost a
 * transaction per worker. The relay listens on cairn_wake and cairn_members
 * and forwards with an empty HTTP POST to the runners' advertised
 * addresses: /wake (or /wake/cancel), followed by the runs the wake-ups
 * named, to the runner a wake-up names, once however many came in
 * together (to the worker it runs on, without HTTP: poke_self), and /members/FINGERPRINT to every
 * live runner. As it starts it pokes every live runner, so a wake-up sent while no relay listened
 * (it was moving, the database restarted) is not waited out until the next poll.
 */
static int relay_main(cairn_singleton *s, void *arg)
{
	relay_state r = {.env = arg};
	buf err = BUF_INIT;
	r.conn = db_connect(cairn_singleton_conninfo(s), "cairn-worker relay", &err);
	r.h = curl_easy_init();
	int rc = r.conn && r.h ? 0 : -CAIRN_EDB;
	if (!rc && (db_cmd(r.conn, &err, "LISTEN " CAIRN_WAKE_CHANNEL, 0, NULL) < 0 ||
	            db_cmd(r.conn, &err, "LISTEN " CAIRN_MEMBERS_CHANNEL, 0, NULL) < 0))
		rc = -CAIRN_EDB;
	if (!rc && !(rc = relay_load(&r, &err)))
		relay_all(&r, NULL);
	while (!rc && !cairn_singleton_cancelled(s)) {
		for (int i = 0; i < r.n; i++) {
			if (r.rs[i].wake)
				relay_wake(&r, &r.rs[i]);
		}
		struct pollfd pfd = {.fd = PQsocket(r.conn), .events = POLLIN};
		if (poll(&pfd, 1, RELAY_SLICE_MS) < 0 && errno != EINTR)
			rc = -CAIRN_EDB;
		if (!rc)
			rc = relay_take(&r, &err);
	}
	if (rc)
		log_kv(r.env->log, LOG_WARN, "wake relay failed", "error", buf_str(&err), NULL);
	if (r.h)
		curl_easy_cleanup(r.h);
	PQfinish(r.conn);
	free(r.rs);
	buf_free(&err);
	return rc ? CAIRN_EDB : CAIRN_OK;
}

/* ---------------------------------------------------------- scheduler */

#define SCHEDULER_BATCH   100
#define SCHEDULER_IDLE_MS 60000 /* the longest wait with nothing due (a fallback) */
#define STR_(x)           #x
#define STR(x)            STR_(x)

/* The schedules due now, with whether the run of the last fire is still
 * unfinished (SCHEDULE_LAST_RUNS: a join, which Citus plans where a
 * subquery per schedule over the reference table is refused), and the
 * database's clock. */
static const char SQL_SCHEDULES_DUE[] =
    "WITH s AS MATERIALIZED (SELECT * FROM cairn.schedules WHERE NOT paused "
    "                        AND next_at <= now() ORDER BY next_at LIMIT " STR(
        SCHEDULER_BATCH) "), "
                         "l AS (" SCHEDULE_LAST_RUNS(
                             "s") ") "
                                  "SELECT s.name, s.cron, s.tz, s.workflow, s.catchup, s.overlap = "
                                  "'skip', "
                                  "       l.name IS NOT NULL AND l.finished_at IS NULL, "
                                  "       (extract(epoch FROM s.next_at) * 1000)::bigint, "
                                  "       (extract(epoch FROM now()) * 1000)::bigint "
                                  "FROM s LEFT JOIN l ON l.name = s.name ORDER BY s.next_at";

/* One round of one schedule ($1 name, $2 its next_at as read: a copy that
 * moved it since writes nothing): next_at to $3, the runs of the fires
 * ($4 keys, $5 shards, $6 due times, Unix ms, $8 parts) inserted, each key
 * once ever, and counted; the new runs' groups, shards and ids, whose
 * owners the caller wakes after the commit (on Citus, a wake-up in the
 * statement that wrote a reference table and runs over several nodes is
 * refused). */
static const char SQL_SCHEDULE_FIRE[] =
    "WITH s AS (UPDATE cairn.schedules SET next_at = to_timestamp($3::bigint / 1000.0), "
    "    last_at = coalesce(to_timestamp((SELECT max(d) FROM unnest($6::bigint[]) d) / 1000.0), "
    "                       last_at), "
    "    fires = fires + cardinality($4::text[]), skipped = skipped + $7 "
    "  WHERE name = $1 AND next_at = to_timestamp($2::bigint / 1000.0) RETURNING *), "
    "ins AS (INSERT INTO cairn.runs AS r (id, part, workflow, key, shard_group, shard, input, "
    "                                     scheduled_at, start_at) "
    "  SELECT cairn.new_run_id(x.sh), x.p, s.workflow, x.k, s.shard_group, x.sh, s.input, "
    "         to_timestamp(x.d / 1000.0), now() "
    "  FROM s, unnest($4::text[], $5::int[], $6::bigint[], $8::int[]) AS x(k, sh, d, p) "
    "  ON CONFLICT ON CONSTRAINT runs_workflow_key_key DO NOTHING "
    "  RETURNING r.id, r.shard_group, r.shard) "
    "SELECT (SELECT count(*) FROM s), (SELECT count(*) FROM ins), "
    "  (SELECT array_agg(shard_group) FROM ins), (SELECT array_agg(shard) FROM ins), "
    "  (SELECT array_agg(id) FROM ins)";

/* Fires what is due of the schedule in row i of r: 0 or -CAIRN_EDB. */
static int schedule_fire(const maint_env *e, PGconn *c, PGresult *r, int i, const db_settings *st,
                         buf *err)
{
	const char *name = PQgetvalue(r, i, 0), *tz = PQgetvalue(r, i, 2);
	const char *catchup = PQgetvalue(r, i, 4);
	int skip = db_get_bool(r, i, 5), busy = db_get_bool(r, i, 6);
	int64_t from = db_get_i64(r, i, 7), now = db_get_i64(r, i, 8), next;
	int64_t due[SCHEDULE_FIRES_MAX];
	cron cr;
	char why[512];
	int n = 0, rc = 0;
	if (cron_parse(PQgetvalue(r, i, 1), &cr, why, sizeof why) < 0 ||
	    (rc = schedule_due(c, &cr, tz, from, now, strcmp(catchup, "all") != 0, due, &n, &next,
	                       err)) == -CAIRN_EINVAL) {
		/* Validated when it was made: stored by hand since. Left alone. */
		log_kv(e->log, LOG_WARN, "a schedule cannot be computed; it is left paused",
		       "schedule", name, "error", rc ? buf_str(err) : why, NULL);
		const char *p[] = {name};
		rc = db_cmd(c, err, "UPDATE cairn.schedules SET paused = true WHERE name = $1", 1,
		            p);
		return rc < 0 ? -CAIRN_EDB : 0;
	}
	if (rc)
		return rc;
	/* Catch-up "none" fires only a time missed by less than the grace;
	 * overlap "skip" at most one run at a time: the latest due, and none
	 * while the last fire's run is unfinished. */
	int fire = n;
	if (strcmp(catchup, "none") == 0 && n && now - due[n - 1] >= SCHEDULE_GRACE_MS)
		fire = 0;
	if (skip && fire > 1)
		fire = 1;
	if (skip && busy)
		fire = 0;
	int skipped = n - fire;
	pgarr keys = PGARR_INIT, sh = PGARR_INIT, at = PGARR_INIT, parts = PGARR_INIT;
	for (int k = n - fire; k < n; k++) {
		char key[256];
		snprintf(key, sizeof key, SCHEDULE_KEY_PREFIX "%s:%" PRId64, name, due[k]);
		int shard = hash_shard(key, st->shards);
		pgarr_add(&keys, key);
		pgarr_add_i64(&sh, shard);
		pgarr_add_i64(&at, due[k]);
		pgarr_add_i64(&parts, db_part_key(st, shard));
	}
	char f[24], nx[24], sk[24];
	const char *p[] = {name,           db_i64(f, from), db_i64(nx, next),    pgarr_str(&keys),
	                   pgarr_str(&sh), pgarr_str(&at),  db_i64(sk, skipped), pgarr_str(&parts)};
	PGresult *w = keys.b.oom || sh.b.oom || at.b.oom || parts.b.oom
	                  ? NULL
	                  : db_exec(c, err, SQL_SCHEDULE_FIRE, 8, p);
	pgarr_free(&keys);
	pgarr_free(&sh);
	pgarr_free(&at);
	pgarr_free(&parts);
	if (!w)
		return -CAIRN_EDB;
	if (db_get_int(w, 0, 1) > 0) {
		wake_each(c, PQgetvalue(w, 0, 2), PQgetvalue(w, 0, 3), PQgetvalue(w, 0, 4));
		log_kv(e->log, LOG_DEBUG, "fired a schedule", "schedule", name, "runs",
		       PQgetvalue(w, 0, 1), NULL);
		atomic_fetch_add(&e->m->schedule_fires, (uint64_t)db_get_int(w, 0, 1));
	}
	PQclear(w);
	return 0;
}

/* ms until the earliest schedule is due (0 when one is), at most
 * SCHEDULER_IDLE_MS; -1 on a database error. */
static int64_t scheduler_wait_ms(PGconn *c, buf *err)
{
	PGresult *r = db_exec(
	    c, err,
	    "SELECT greatest(0, least(" STR(
	        SCHEDULER_IDLE_MS) ", "
	                           "  (extract(epoch FROM min(next_at) - now()) * 1000)::bigint)) "
	                           "FROM cairn.schedules WHERE NOT paused",
	    0, NULL);
	if (!r)
		return -1;
	int64_t ms = PQgetisnull(r, 0, 0) ? SCHEDULER_IDLE_MS : db_get_i64(r, 0, 0);
	PQclear(r);
	return ms;
}

/* cairn.scheduler: fires the schedules that are due, then sleeps until the
 * next one is, or a schedule changes (SCHEDULE_CHANNEL). */
static int scheduler_main(cairn_singleton *s, void *arg)
{
	const maint_env *e = arg;
	buf err = BUF_INIT;
	PGconn *c = db_connect(cairn_singleton_conninfo(s), "cairn-worker scheduler", &err);
	int rc = c ? 0 : -CAIRN_EDB;
	db_settings st = {0};
	if (!rc && (db_cmd(c, &err, "LISTEN " SCHEDULE_CHANNEL, 0, NULL) < 0 ||
	            db_read_settings(c, &st, &err) < 0))
		rc = -CAIRN_EDB;
	while (!rc && !cairn_singleton_cancelled(s)) {
		PGresult *r = db_exec(c, &err, SQL_SCHEDULES_DUE, 0, NULL);
		if (!r) {
			rc = -CAIRN_EDB;
			break;
		}
		for (int i = 0; i < PQntuples(r) && !rc; i++)
			rc = schedule_fire(e, c, r, i, &st, &err);
		int full = PQntuples(r) == SCHEDULER_BATCH;
		PQclear(r);
		int64_t ms = rc || full ? 0 : scheduler_wait_ms(c, &err);
		if (ms < 0)
			rc = -CAIRN_EDB;
		/* Wait in slices, so that a cancel is seen within one. */
		for (int64_t until = clock_mono_ms() + ms; !rc && !cairn_singleton_cancelled(s);) {
			int64_t left = until - clock_mono_ms();
			if (left <= 0)
				break;
			struct pollfd pfd = {.fd = PQsocket(c), .events = POLLIN};
			int got =
			    poll(&pfd, 1, (int)(left < RELAY_SLICE_MS ? left : RELAY_SLICE_MS));
			if (got > 0) {
				PQconsumeInput(c);
				PGnotify *nt;
				int any = 0;
				while ((nt = PQnotifies(c))) {
					PQfreemem(nt);
					any = 1;
				}
				if (any)
					break;
			}
		}
	}
	if (rc)
		log_kv(e->log, LOG_WARN, "scheduler failed", "error", buf_str(&err), NULL);
	PQfinish(c);
	buf_free(&err);
	return rc ? CAIRN_EDB : CAIRN_OK;
}

int maint_register(registry *reg, const maint_env *env, buf *err)
{
	singleton_def health = {.name = "cairn.health",
	                        .fn = health_main,
	                        .arg = (void *)env,
	                        .backoff_ms = env->cfg->singleton_backoff_ms};
	singleton_def janitor = health;
	snprintf(janitor.name, sizeof janitor.name, "cairn.janitor");
	janitor.fn = janitor_main;
	singleton_def relay = health;
	snprintf(relay.name, sizeof relay.name, "cairn.relay");
	relay.fn = relay_main;
	singleton_def scheduler = health;
	snprintf(scheduler.name, sizeof scheduler.name, "cairn.scheduler");
	scheduler.fn = scheduler_main;
	/* Singletons start in this order: the relay first, since wake-ups
	 * wait for it (a run enqueued before it listens waits for its poke). */
	int rc = registry_add_singleton(reg, &relay, err);
	if (!rc)
		rc = registry_add_singleton(reg, &scheduler, err);
	if (!rc)
		rc = registry_add_singleton(reg, &health, err);
	if (!rc)
		rc = registry_add_singleton(reg, &janitor, err);
	if (!rc && env->backlog) {
		singleton_def bl = health;
		snprintf(bl.name, sizeof bl.name, "cairn.backlog");
		bl.fn = backlog_singleton;
		bl.arg = env->backlog;
		rc = registry_add_singleton(reg, &bl, err);
	}
	return rc;
}
