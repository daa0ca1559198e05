/*
 * served.c - routing by workflow, read side (migration 0020): what the
 * workers serve, for `cairn workflows` and the console (cairn_workflow_list),
 * and where a run goes that a worker claimed but does not serve
 * (client_placement, for the executor's unknown-workflow path). Enqueue
 * routes in SQL (cairn.route, called by client.c's statements); the
 * runners record what they serve as they register (lease.c).
 *
 * Owns nothing but what it returns; runs on the caller's client.
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "db.h"
#include "parse.h"

/*
 * Where a run of workflow $1 in group $2 goes (TTL $3): a group with a live
 * worker that serves it (cairn.reroute_target), whether a live worker of its
 * own group serves it, how long ago the last live worker serving it anywhere
 * stopped being live (live_until; negative while one is, NULL: never
 * served), and where and when it was last seen, in words.
 */
static const char SQL_PLACEMENT[] =
    "SELECT cairn.reroute_target($1, $2, $3), "
    "       EXISTS (SELECT 1 FROM cairn.runner_workflows rw "
    "               JOIN cairn.runners r ON r.id = rw.runner_id "
    "               WHERE rw.workflow = $1 AND rw.shard_group = $2 "
    "                 AND cairn.runner_live(r, $3)), "
    "       (SELECT (extract(epoch FROM now() - max(live_until)) * 1000)::bigint "
    "        FROM cairn.workflows WHERE workflow = $1), "
    "       (SELECT 'last seen ' || cairn.age_text(now() - w.last_seen) || ' ago in group ' "
    "               || w.shard_group FROM cairn.workflows w WHERE w.workflow = $1 "
    "        ORDER BY w.last_seen DESC LIMIT 1)";

int client_placement(cairn_client *c, const char *workflow, const char *group, int64_t ttl_ms,
                     client_placed *out)
{
	memset(out, 0, sizeof *out);
	char ttl[24];
	const char *p[] = {workflow, group, db_i64(ttl, ttl_ms)};
	PGresult *r = db_exec(c->conn, &c->err, SQL_PLACEMENT, 3, p);
	if (!r)
		return client_db_fail(c);
	snprintf(out->to, sizeof out->to, "%s", PQgetvalue(r, 0, 0));
	out->here = db_get_bool(r, 0, 1);
	out->served = !PQgetisnull(r, 0, 2);
	out->gone_ms = out->served ? db_get_i64(r, 0, 2) : 0;
	snprintf(out->seen, sizeof out->seen, "%s",
	         out->served ? PQgetvalue(r, 0, 3) : "never served");
	PQclear(r);
	return CAIRN_OK;
}

/* ------------------------------------------------------------- the list */

/*
 * Every (workflow, group) ever served, and every (workflow, group) with
 * pending runs: with the stored runtime and times, the live runners of the
 * group that serve it (id, name, runtime, as a JSON array in id order), the
 * group's live runners and its pending runs. Pending runs are counted
 * through runs_status (status, id): as many index entries as runs wait.
 */
#define FIRST_SEEN_MS MS("w.first_seen")
#define LAST_SEEN_MS  MS("w.last_seen")
static const char SQL_WORKFLOW_LIST[] =
    "WITH live AS (SELECT r.id, r.name, r.groups FROM cairn.runners r "
    "              WHERE cairn.runner_live(r, $1)), "
    "waiting AS (SELECT workflow, shard_group, count(*) AS n FROM cairn.runs "
    "            WHERE status = 'pending' GROUP BY workflow, shard_group), "
    "k AS (SELECT workflow, shard_group FROM cairn.workflows "
    "      UNION SELECT workflow, shard_group FROM waiting) "
    "SELECT k.workflow, k.shard_group, w.runtime, " FIRST_SEEN_MS ", " LAST_SEEN_MS ", "
    "       w.workflow IS NOT NULL, "
    "       greatest(0, (extract(epoch FROM now() - w.last_seen) * 1000)::bigint), "
    "       (SELECT json_agg(json_build_object('id', l.id, 'name', l.name, "
    "                          'runtime', rw.runtime) ORDER BY l.id)::text "
    "        FROM cairn.runner_workflows rw JOIN live l ON l.id = rw.runner_id "
    "        WHERE rw.workflow = k.workflow AND rw.shard_group = k.shard_group), "
    "       (SELECT count(*) FROM live l WHERE k.shard_group = ANY (l.groups)), "
    "       coalesce(q.n, 0) "
    "FROM k LEFT JOIN cairn.workflows w "
    "  ON w.workflow = k.workflow AND w.shard_group = k.shard_group "
    "LEFT JOIN waiting q ON q.workflow = k.workflow AND q.shard_group = k.shard_group "
    "ORDER BY k.workflow, k.shard_group";

static void workflow_clear(cairn_workflow_info *w)
{
	free(w->workflow);
	free(w->group);
	free(w->runtime);
	for (size_t i = 0; i < w->nrunners; i++) {
		free(w->runners[i].name);
		free(w->runners[i].runtime);
	}
	free(w->runners);
}

void cairn_workflow_list_free(cairn_workflow_info *w, size_t n)
{
	for (size_t i = 0; w && i < n; i++)
		workflow_clear(&w[i]);
	free(w);
}

/* The runners of a row (a JSON array, or NULL: none) into w: 0 or -1. */
static int read_runners(cairn_workflow_info *w, const char *json)
{
	cJSON *a = json ? cJSON_Parse(json) : NULL;
	int n = cJSON_GetArraySize(a);
	if (json && !a)
		return -1;
	w->runners = n ? calloc((size_t)n, sizeof *w->runners) : NULL;
	int oom = n && !w->runners;
	const cJSON *e;
	cJSON_ArrayForEach(e, a)
	{
		if (oom)
			break;
		cairn_workflow_runner *x = &w->runners[w->nrunners++];
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
		const cJSON *rt = cJSON_GetObjectItemCaseSensitive(e, "runtime");
		x->id = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(e, "id"));
		x->name = strdup(cJSON_IsString(name) ? name->valuestring : "");
		x->runtime = strdup(cJSON_IsString(rt) ? rt->valuestring : "");
		oom = !x->name || !x->runtime;
	}
	cJSON_Delete(a);
	return oom ? -1 : 0;
}

#define TTL_MAX_MS (365 * 86400000LL)

int cairn_workflow_list(cairn_client *c, int64_t ttl_ms, cairn_workflow_info **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	if (ttl_ms <= 0 || ttl_ms > TTL_MAX_MS)
		return client_invalid(
		    c, "ttl_ms", "invalid ttl %" PRId64 "ms: expected a duration from 1ms to 365d",
		    ttl_ms);
	char ttl[24];
	const char *p[] = {db_i64(ttl, ttl_ms)};
	PGresult *r = db_exec(c->conn, &c->err, SQL_WORKFLOW_LIST, 1, p);
	if (!r)
		return client_db_fail(c);
	size_t rows = (size_t)PQntuples(r);
	cairn_workflow_info *v = rows ? calloc(rows, sizeof *v) : NULL;
	int oom = rows && !v;
	for (int i = 0; !oom && i < (int)rows; i++) {
		cairn_workflow_info *x = &v[i];
		x->workflow = db_get_str(r, i, 0);
		x->group = db_get_str(r, i, 1);
		x->runtime = db_get_str(r, i, 2);
		x->first_seen_unix_ms = db_get_i64(r, i, 3);
		x->last_seen_unix_ms = db_get_i64(r, i, 4);
		x->served = db_get_bool(r, i, 5);
		x->last_seen_age_ms = db_get_i64(r, i, 6);
		x->group_live_runners = db_get_int(r, i, 8);
		x->waiting = db_get_i64(r, i, 9);
		oom = !x->workflow || !x->group || (x->served && !x->runtime) ||
		      read_runners(x, PQgetisnull(r, i, 7) ? NULL : PQgetvalue(r, i, 7)) < 0;
	}
	PQclear(r);
	if (oom) {
		cairn_workflow_list_free(v, rows);
		return client_fail(c, CAIRN_ENOMEM, "out of memory listing %zu workflows", rows);
	}
	*out = v;
	*n = rows;
	return CAIRN_OK;
}
