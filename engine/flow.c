/*
 * flow.c - the client's calls on flow-control limits (cairn.h,
 * `cairn limit`): cairn.limits rows, each change followed by letting go
 * the workflow's held runs that now have a free slot (client_release),
 * whose owners are woken. What the limits mean is the
 * claim's (dispatch.c) and the enqueue's (client.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "client.h"
#include "db.h"
#include "parse.h"

#define MAX_CONCURRENCY 100000
#define MAX_RATE        1000000
#define MAX_PERIOD_MS   86400000

static const char SQL_LIMIT_SET[] =
    "INSERT INTO cairn.limits (workflow, key_concurrency, rate, rate_period_ms, key_rate, "
    "                          key_rate_period_ms, concurrency, updated_at) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7, now()) "
    "ON CONFLICT (workflow) DO UPDATE SET key_concurrency = EXCLUDED.key_concurrency, "
    "  concurrency = EXCLUDED.concurrency, "
    "  rate = EXCLUDED.rate, rate_period_ms = EXCLUDED.rate_period_ms, "
    "  key_rate = EXCLUDED.key_rate, key_rate_period_ms = EXCLUDED.key_rate_period_ms, "
    "  updated_at = EXCLUDED.updated_at";
static const char SQL_LIMIT_DELETE[] = "DELETE FROM cairn.limits WHERE workflow = $1";
static const char SQL_LIMIT_LIST[] =
    "SELECT workflow, coalesce(key_concurrency, 0), coalesce(rate, 0), "
    "  coalesce(rate_period_ms, 0), coalesce(key_rate, 0), coalesce(key_rate_period_ms, 0), "
    "  (extract(epoch FROM updated_at) * 1000)::bigint, coalesce(concurrency, 0) "
    "FROM cairn.limits ORDER BY workflow";
static int check_rate(cairn_client *c, const char *field, int n, int64_t period_ms)
{
	if (n < 0 || n > MAX_RATE || (n && (period_ms < 1 || period_ms > MAX_PERIOD_MS)) ||
	    (!n && period_ms))
		return client_invalid(c, field,
		                      "invalid %s %d per %" PRId64 " ms: expected 1 to %d starts "
		                      "per 1 ms to 1 day, or 0 and 0 for none",
		                      field, n, period_ms, MAX_RATE);
	return CAIRN_OK;
}

/* After a change committed: the workflow's held runs with a free slot go. */
static int release_all(cairn_client *c, const char *workflow)
{
	const char *p[] = {workflow};
	return client_release(c, CLIENT_RELEASE_WORKFLOW, p);
}

int cairn_limit_set(cairn_client *c, const cairn_limit *l)
{
	char err[PARSE_ERR_MAX];
	if (!l || parse_check_name("workflow", l->workflow, err) < 0)
		return client_invalid(c, "workflow", "%s", l ? err : "no limit given");
	if (l->key_concurrency < 0 || l->key_concurrency > MAX_CONCURRENCY)
		return client_invalid(c, "key_concurrency",
		                      "invalid key_concurrency %d: expected 1 to %d, or 0 for none",
		                      l->key_concurrency, MAX_CONCURRENCY);
	if (l->concurrency < 0 || l->concurrency > MAX_CONCURRENCY)
		return client_invalid(c, "concurrency",
		                      "invalid concurrency %d: expected 1 to %d, or 0 for none",
		                      l->concurrency, MAX_CONCURRENCY);
	int rc = check_rate(c, "rate", l->rate, l->rate_period_ms);
	if (!rc)
		rc = check_rate(c, "key_rate", l->key_rate, l->key_rate_period_ms);
	if (rc)
		return rc;
	char kc[24], r[24], rp[24], kr[24], krp[24], gc[24];
	const char *p[] = {l->workflow,
	                   l->key_concurrency ? db_i64(kc, l->key_concurrency) : NULL,
	                   l->rate ? db_i64(r, l->rate) : NULL,
	                   l->rate ? db_i64(rp, l->rate_period_ms) : NULL,
	                   l->key_rate ? db_i64(kr, l->key_rate) : NULL,
	                   l->key_rate ? db_i64(krp, l->key_rate_period_ms) : NULL,
	                   l->concurrency ? db_i64(gc, l->concurrency) : NULL};
	if (db_cmd(c->conn, &c->err, SQL_LIMIT_SET, 7, p) < 0)
		return client_db_fail(c);
	return release_all(c, l->workflow);
}

int cairn_limit_delete(cairn_client *c, const char *workflow)
{
	char err[PARSE_ERR_MAX];
	if (parse_check_name("workflow", workflow, err) < 0)
		return client_invalid(c, "workflow", "%s", err);
	const char *p[] = {workflow};
	PGresult *r = db_exec(c->conn, &c->err, SQL_LIMIT_DELETE, 1, p);
	if (!r)
		return client_db_fail(c);
	int n = atoi(PQcmdTuples(r));
	PQclear(r);
	if (n == 0)
		return client_fail(c, CAIRN_ENOTFOUND, "workflow \"%s\" has no limits", workflow);
	return release_all(c, workflow);
}

int cairn_limit_list(cairn_client *c, cairn_limit **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	PGresult *r = db_exec(c->conn, &c->err, SQL_LIMIT_LIST, 0, NULL);
	if (!r)
		return client_db_fail(c);
	size_t rows = (size_t)PQntuples(r);
	cairn_limit *l = calloc(rows ? rows : 1, sizeof *l);
	if (!l) {
		PQclear(r);
		return client_fail(c, CAIRN_ENOMEM, "out of memory listing limits");
	}
	int oom = 0;
	for (size_t i = 0; i < rows; i++) {
		int k = (int)i;
		l[i].workflow = db_get_str(r, k, 0);
		oom |= !l[i].workflow;
		l[i].key_concurrency = db_get_int(r, k, 1);
		l[i].rate = db_get_int(r, k, 2);
		l[i].rate_period_ms = db_get_i64(r, k, 3);
		l[i].key_rate = db_get_int(r, k, 4);
		l[i].key_rate_period_ms = db_get_i64(r, k, 5);
		l[i].updated_unix_ms = db_get_i64(r, k, 6);
		l[i].concurrency = db_get_int(r, k, 7);
	}
	PQclear(r);
	if (oom) {
		cairn_limit_list_free(l, rows);
		return client_fail(c, CAIRN_ENOMEM, "out of memory listing limits");
	}
	*out = l;
	*n = rows;
	return CAIRN_OK;
}

void cairn_limit_list_free(cairn_limit *l, size_t n)
{
	for (size_t i = 0; l && i < n; i++)
		free(l[i].workflow);
	free(l);
}
