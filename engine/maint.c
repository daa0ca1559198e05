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
 *                  small batches, checking for cancellation between them.
 * Each opens its own connection and returns an error (so the singleton
 * supervisor restarts it with backoff) when the database fails.
 */
#include "maint.h"

#include <curl/curl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "db.h"

#define HEALTH_FAILURES     3
#define HEALTH_ROUNDS_EVERY 10 /* heartbeat intervals */
#define JANITOR_BATCH       "500"
#define JANITOR_INTERVAL_MS 60000

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
 * run that `cairn retry` re-drove meanwhile is no longer finished, and stays. */
static const char SQL_JANITOR[] =
    "DELETE FROM cairn.runs WHERE id IN (SELECT id FROM cairn.runs "
    "  WHERE finished_at < now() - $1 * interval '1 millisecond' ORDER BY finished_at LIMIT $2) "
    "AND finished_at < now() - $1 * interval '1 millisecond'";

static size_t discard(char *p, size_t size, size_t n, void *u)
{
	return size * n;
}

typedef enum probe { PROBE_OK, PROBE_ANSWERED_FAIL, PROBE_NO_ANSWER } probe;

/* GETs /healthz at address; why says what failed. */
static probe probe_runner(CURL *h, const char *address, int64_t timeout_ms, char *why, size_t n)
{
	char url[300];
	snprintf(url, sizeof url, "http://%s/healthz", address);
	curl_easy_reset(h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http");
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
	long code = 0;
	CURLcode cc = curl_easy_perform(h);
	if (cc != CURLE_OK) {
		snprintf(why, n, "no answer: %s", curl_easy_strerror(cc));
		return PROBE_NO_ANSWER;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
	snprintf(why, n, "answered %ld", code);
	return code == 200 ? PROBE_OK : PROBE_ANSWERED_FAIL;
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
			cairn_singleton_sleep(s, HEALTH_ROUNDS_EVERY * e->cfg->heartbeat_interval_ms);
	}
	if (h)
		curl_easy_cleanup(h);
	PQfinish(c);
	buf_free(&err);
	return rc;
}

static int janitor_main(cairn_singleton *s, void *arg)
{
	const maint_env *e = arg;
	buf err = BUF_INIT;
	PGconn *c = db_connect(cairn_singleton_conninfo(s), "cairn-worker janitor", &err);
	int rc = c ? CAIRN_OK : CAIRN_EDB;
	char ret[24];
	db_i64(ret, e->cfg->retention_ms);
	const char *p[] = {ret, JANITOR_BATCH};
	while (rc == CAIRN_OK && !cairn_singleton_cancelled(s)) {
		PGresult *r = db_exec(c, &err, SQL_JANITOR, 2, p);
		if (!r) {
			log_kv(e->log, LOG_WARN, "janitor failed", "error", buf_str(&err), NULL);
			rc = CAIRN_EDB;
			break;
		}
		int n = atoi(PQcmdTuples(r));
		if (n > 0)
			log_kv(e->log, LOG_INFO, "janitor deleted finished runs", "runs",
			       PQcmdTuples(r), NULL);
		PQclear(r);
		if (n < atoi(JANITOR_BATCH))
			cairn_singleton_sleep(s, JANITOR_INTERVAL_MS);
	}
	PQfinish(c);
	buf_free(&err);
	return rc;
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
	int rc = registry_add_singleton(reg, &health, err);
	return rc ? rc : registry_add_singleton(reg, &janitor, err);
}
