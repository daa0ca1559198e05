/*
 * console.c - the reads behind the operator console (`cairn ui`): runs per
 * status for a filter, a run's signals and events, the last hour of work
 * minute by minute, and where the built-in singletons run. Each call is one
 * parameterised statement on the client's connection; values stored
 * encrypted are opened with the client's keys or reported as unreadable
 * (locked), as cairn_run_get does. Owns nothing beyond what it returns.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "hash.h"
#include "state.h"

_Static_assert(CAIRN_RUN_STATUSES == RUN_STATUS_COUNT,
               "cairn.h and state.h list the same statuses");

#define COUNTS(where) "SELECT status, count(*) FROM cairn.runs WHERE " where " GROUP BY status"
static const char *const SQL_COUNTS[2] = {COUNTS(CLIENT_LIST_WHERE),
                                          COUNTS(CLIENT_LIST_WHERE_PARTS)}; /* [parts] */

int cairn_run_counts(cairn_client *c, const cairn_list_filter *f,
                     int64_t counts[CAIRN_RUN_STATUSES])
{
	cairn_list_filter any = f ? *f : (cairn_list_filter){0};
	any.status = NULL;
	any.before_id = 0;
	any.limit = 0;
	memset(counts, 0, CAIRN_RUN_STATUSES * sizeof *counts);
	client_list_args a;
	int rc = client_list_params(c, &any, &a);
	if (rc)
		return rc;
	PGresult *r = db_exec(c->conn, &c->err, SQL_COUNTS[a.parts], 6, a.p);
	if (!r)
		return client_db_fail(c);
	for (int i = 0; i < PQntuples(r); i++)
		for (int k = 0; k < CAIRN_RUN_STATUSES; k++)
			if (strcmp(PQgetvalue(r, i, 0), run_status_name((run_status)k)) == 0)
				counts[k] = db_get_i64(r, i, 1);
	PQclear(r);
	return CAIRN_OK;
}

static const char SQL_SIGNALS[] =
    "SELECT id, name, payload::text, (extract(epoch FROM created_at) * 1000)::bigint, "
    "       coalesce(consumed_by_seq, -1) "
    "FROM cairn.signals WHERE run_id = $1 ORDER BY id";

static const char SQL_EVENTS[] =
    "SELECT key, value::text, (extract(epoch FROM updated_at) * 1000)::bigint "
    "FROM cairn.events WHERE run_id = $1 ORDER BY key";

void cairn_signal_list_free(cairn_signal_info *s, size_t n)
{
	for (size_t i = 0; s && i < n; i++) {
		free(s[i].name);
		free(s[i].payload);
	}
	free(s);
}

int cairn_signal_list(cairn_client *c, int64_t run_id, cairn_signal_info **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	char idtxt[24];
	const char *p[] = {db_i64(idtxt, run_id)};
	PGresult *r = db_exec(c->conn, &c->err, SQL_SIGNALS, 1, p);
	if (!r)
		return client_db_fail(c);
	size_t rows = (size_t)PQntuples(r);
	cairn_signal_info *v = rows ? calloc(rows, sizeof *v) : NULL;
	int rc = rows && !v ? client_fail(c, CAIRN_ENOMEM, "out of memory reading signals") : 0;
	for (int i = 0; v && i < (int)rows && !rc; i++) {
		cairn_signal_info *x = &v[i];
		x->id = db_get_i64(r, i, 0);
		x->name = db_get_str(r, i, 1);
		x->payload = db_get_str(r, i, 2);
		x->created_unix_ms = db_get_i64(r, i, 3);
		x->consumed_by_seq = db_get_int(r, i, 4);
		rc = !x->name || !x->payload
		         ? client_fail(c, CAIRN_ENOMEM, "out of memory reading signals")
		         : client_unseal(c, SEAL_SIGNAL_PAYLOAD, &x->payload, CAIRN_LOCKED_INPUT,
		                         CLIENT_LOCK(x), "a signal's payload");
	}
	PQclear(r);
	if (rc) {
		cairn_signal_list_free(v, rows);
		return rc;
	}
	*out = v;
	*n = rows;
	return CAIRN_OK;
}

void cairn_event_list_free(cairn_event_info *e, size_t n)
{
	for (size_t i = 0; e && i < n; i++) {
		free(e[i].key);
		free(e[i].value);
	}
	free(e);
}

int cairn_event_list(cairn_client *c, int64_t run_id, cairn_event_info **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	char idtxt[24];
	const char *p[] = {db_i64(idtxt, run_id)};
	PGresult *r = db_exec(c->conn, &c->err, SQL_EVENTS, 1, p);
	if (!r)
		return client_db_fail(c);
	size_t rows = (size_t)PQntuples(r);
	cairn_event_info *v = rows ? calloc(rows, sizeof *v) : NULL;
	int rc = rows && !v ? client_fail(c, CAIRN_ENOMEM, "out of memory reading events") : 0;
	for (int i = 0; v && i < (int)rows && !rc; i++) {
		cairn_event_info *x = &v[i];
		x->key = db_get_str(r, i, 0);
		x->value = db_get_str(r, i, 1);
		x->updated_unix_ms = db_get_i64(r, i, 2);
		rc = !x->key || !x->value
		         ? client_fail(c, CAIRN_ENOMEM, "out of memory reading events")
		         : client_unseal(c, SEAL_EVENT_VALUE, &x->value, CAIRN_LOCKED_OUTPUT,
		                         CLIENT_LOCK(x), "an event's value");
	}
	PQclear(r);
	if (rc) {
		cairn_event_list_free(v, rows);
		return rc;
	}
	*out = v;
	*n = rows;
	return CAIRN_OK;
}

/* The runs that finished in the last hour come from runs_finished (an index
 * range scan), bucketed by minute; the pending ones from runs_status. */
static const char SQL_STATS[] =
    "WITH m AS (SELECT generate_series(date_trunc('minute', now()) - interval '59 minutes', "
    "                                  date_trunc('minute', now()), interval '1 minute') AS t), "
    "f AS (SELECT date_trunc('minute', finished_at) AS t, status, "
    "             extract(epoch FROM started_at - scheduled_at) * 1000 AS wait_ms "
    "      FROM cairn.runs WHERE finished_at >= date_trunc('minute', now()) - "
    "                                            interval '59 minutes'), "
    "b AS (SELECT (extract(epoch FROM m.t) * 1000)::bigint AS ms, "
    "             count(*) FILTER (WHERE f.status = 'completed') AS done, "
    "             count(*) FILTER (WHERE f.status = 'failed') AS failed "
    "      FROM m LEFT JOIN f ON f.t = m.t GROUP BY m.t) "
    "SELECT (SELECT string_agg(concat_ws(':', ms, done, failed), ',' ORDER BY ms) FROM b), "
    "       (SELECT coalesce(percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP "
    "               (ORDER BY greatest(wait_ms, 0)), ARRAY[0, 0, 0]::float8[])::text "
    "        FROM f WHERE wait_ms IS NOT NULL), "
    "       (SELECT count(*) FROM f WHERE wait_ms IS NOT NULL), "
    "       (SELECT count(*) FROM cairn.runs WHERE status = 'pending')";

int cairn_run_stats_get(cairn_client *c, cairn_run_stats *out)
{
	memset(out, 0, sizeof *out);
	PGresult *r = db_exec(c->conn, &c->err, SQL_STATS, 0, NULL);
	if (!r)
		return client_db_fail(c);
	const char *s = PQgetvalue(r, 0, 0);
	for (int i = 0; i < CAIRN_STATS_MINUTES && s && *s; i++) {
		char *end;
		out->minute_unix_ms[i] = strtoll(s, &end, 10);
		out->completed[i] = strtoll(end + 1, &end, 10);
		out->failed[i] = strtoll(end + 1, &end, 10);
		s = *end == ',' ? end + 1 : NULL;
	}
	sscanf(PQgetvalue(r, 0, 1), "{%lf,%lf,%lf}", &out->latency_p50_ms, &out->latency_p90_ms,
	       &out->latency_p99_ms);
	out->latency_samples = db_get_i64(r, 0, 2);
	out->queue_depth = db_get_i64(r, 0, 3);
	PQclear(r);
	return CAIRN_OK;
}

void cairn_singleton_list_free(cairn_singleton_info *s, size_t n)
{
	for (size_t i = 0; s && i < n; i++)
		free(s[i].owner_name);
	free(s);
}

int cairn_singleton_list(cairn_client *c, cairn_singleton_info **out, size_t *n)
{
	static const char *const names[] = {"cairn.health", "cairn.janitor", "cairn.scheduler",
	                                    "cairn.backlog"};
	enum { N = sizeof names / sizeof names[0] };
	*out = NULL;
	*n = 0;
	int shards;
	int rc = client_shards(c, &shards);
	if (rc)
		return rc;
	cairn_singleton_info *v = calloc(N, sizeof *v);
	if (!v)
		return client_fail(c, CAIRN_ENOMEM, "out of memory listing singletons");
	for (size_t i = 0; i < N && !rc; i++) {
		char shard[24];
		v[i].name = names[i];
		v[i].shard = hash_shard(names[i], shards);
		const char *p[] = {db_i64(shard, v[i].shard)};
		PGresult *r = db_exec(c->conn, &c->err,
		                      "SELECT s.owner, r.name FROM cairn.shard_leases s "
		                      "JOIN cairn.runners r ON r.id = s.owner "
		                      "WHERE s.shard_group = 'default' AND s.shard = $1",
		                      1, p);
		if (!r) {
			rc = client_db_fail(c);
			break;
		}
		if (PQntuples(r)) {
			v[i].owner = db_get_i64(r, 0, 0);
			v[i].owner_name = db_get_str(r, 0, 1);
		}
		PQclear(r);
	}
	if (rc) {
		cairn_singleton_list_free(v, N);
		return rc;
	}
	*out = v;
	*n = N;
	return CAIRN_OK;
}
