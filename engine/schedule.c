/*
 * schedule.c - a schedule's due times (schedule.h): the zone's offsets
 * around the instants walked (PostgreSQL holds the tz rules), one statement
 * for the week around the first, one more per 36 days a long walk goes
 * on; the walk from instant to instant is cron.c's. And the client's calls
 * on schedules (cairn.h), each one statement.
 */
#include "schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "client.h"
#include "db.h"
#include "parse.h"

/*
 * A zone's offsets from lo to hi (Unix s, $1 and $2) by PostgreSQL's rules
 * for zone $3 (a tz database name or a POSIX TZ string): the offset at lo,
 * then each change, found hour by hour and then to the second (no zone
 * changes its offset twice within an hour).
 */
static const char SQL_ZONE_OFFSETS[] =
    "WITH h AS ("
    "  SELECT t, extract(epoch FROM to_timestamp(t) AT TIME ZONE $3)::bigint - t AS off "
    "  FROM generate_series($1::bigint, $2::bigint + 3599, 3600) AS t), "
    "c AS (SELECT t, off, lag(t) OVER w AS pt, lag(off) OVER w AS poff "
    "      FROM h WINDOW w AS (ORDER BY t)) "
    "SELECT t, off FROM c WHERE pt IS NULL "
    "UNION ALL "
    "SELECT (SELECT min(s) FROM generate_series(pt + 1, t) AS s "
    "        WHERE extract(epoch FROM to_timestamp(s) AT TIME ZONE $3)::bigint - s <> poff), "
    "       off "
    "FROM c WHERE off <> poff ORDER BY 1";

typedef struct pg_zone {
	PGconn *conn;
	const char *tz;
	buf *err;
} pg_zone;

/* cron_offsets_fn of a zone by name: 0, -CAIRN_EINVAL (err: an unknown
 * zone), or -CAIRN_EDB. */
static int pg_offsets(void *arg, int64_t lo, int64_t hi, cron_offsets *out)
{
	pg_zone *z = arg;
	char a[24], b[24];
	const char *p[] = {db_i64(a, lo), db_i64(b, hi), z->tz};
	PGresult *r = db_exec(z->conn, z->err, SQL_ZONE_OFFSETS, 3, p);
	if (!r) {
		if (strncmp(db_last_sqlstate(), "22", 2) != 0)
			return -CAIRN_EDB;
		buf_reset(z->err);
		buf_printf(z->err,
		           "unknown time zone \"%s\": expected a zone of the tz database like UTC, "
		           "Europe/Berlin or America/New_York, or a POSIX TZ string like "
		           "CET-1CEST,M3.5.0,M10.5.0/3",
		           z->tz);
		return -CAIRN_EINVAL;
	}
	int rows = PQntuples(r);
	if (rows > CRON_ZONE_CHANGES) {
		PQclear(r);
		buf_reset(z->err);
		buf_printf(z->err,
		           "time zone \"%s\" changes its offset more than %d times in %d days",
		           z->tz, CRON_ZONE_CHANGES - 1, (int)((hi - lo) / 86400));
		return -CAIRN_EINVAL;
	}
	out->lo = lo;
	out->hi = hi;
	out->n = rows;
	for (int i = 0; i < rows; i++) {
		out->at[i] = db_get_i64(r, i, 0);
		out->off[i] = (int32_t)db_get_i64(r, i, 1);
	}
	PQclear(r);
	return 0;
}

static int64_t div_floor(int64_t a, int64_t b)
{
	return a / b - (a % b < 0);
}

int schedule_due(PGconn *conn, const cron *c, const char *tz, int64_t from_ms, int64_t now_ms,
                 int only_last, int64_t *due, int *ndue, int64_t *next_ms, buf *err)
{
	pg_zone z = {conn, tz, err};
	int64_t next;
	/* Fires are on whole seconds: from the first one at or after from_ms. */
	int rc = cron_fires(c, pg_offsets, &z, -div_floor(-from_ms, 1000), div_floor(now_ms, 1000),
	                    only_last, due, SCHEDULE_FIRES_MAX, ndue, &next);
	if (rc == CRON_NEVER || rc == CRON_EZONE) {
		buf_reset(err);
		buf_puts(err, rc == CRON_NEVER
		                  ? "the cron expression matches no time within 5 years"
		                  : "the time zone's offsets are out of range");
		return -CAIRN_EINVAL;
	}
	if (rc)
		return rc;
	for (int i = 0; i < *ndue; i++)
		due[i] *= 1000;
	*next_ms = next * 1000;
	return 0;
}

/* ------------------------------------------------------ the client's calls */

static int one_of(const char *v, const char *const *ok)
{
	for (; *ok; ok++)
		if (strcmp(v, *ok) == 0)
			return 1;
	return 0;
}

/* The first fire of a schedule after now, by the database's clock. */
static int first_fire(cairn_client *c, const cron *cr, const char *tz, int64_t *next)
{
	PGresult *r =
	    db_exec(c->conn, &c->err, "SELECT (extract(epoch FROM now()) * 1000)::bigint", 0, NULL);
	if (!r)
		return client_db_fail(c);
	int64_t now = db_get_i64(r, 0, 0), due[1];
	PQclear(r);
	int n;
	int rc = schedule_due(c->conn, cr, tz, now + 1, now + 1, 1, due, &n, next, &c->err);
	if (rc == -CAIRN_EINVAL) {
		c->errfield = "tz";
		return CAIRN_EINVAL;
	}
	return rc ? client_db_fail(c) : CAIRN_OK;
}

int cairn_schedule_create(cairn_client *c, const char *name, const cairn_schedule_opts *o,
                          int64_t *next_unix_ms)
{
	static const char *const overlaps[] = {"skip", "allow", NULL};
	static const char *const catchups[] = {"none", "latest", "all", NULL};
	char err[PARSE_ERR_MAX], cerr[512];
	cron cr;
	const char *tz = o->tz ? o->tz : "UTC", *group = o->group ? o->group : CAIRN_DEFAULT_GROUP;
	if (parse_check_name("schedule name", name, err) < 0)
		return client_invalid(c, "name", "%s", err);
	if (cron_parse(o->cron, &cr, cerr, sizeof cerr) < 0)
		return client_invalid(c, "cron", "%s", cerr);
	if (parse_check_name("workflow", o->workflow, err) < 0)
		return client_invalid(c, "workflow", "%s", err);
	if (parse_check_name("group", group, err) < 0)
		return client_invalid(c, "group", "%s", err);
	if (o->input && parse_check_json("input", o->input, c->max_payload, err) < 0)
		return client_invalid(c, "input", "%s", err);
	if (o->overlap && !one_of(o->overlap, overlaps))
		return client_invalid(
		    c, "overlap",
		    "invalid overlap \"%s\": expected skip (no fire while the last "
		    "run is unfinished) or allow",
		    o->overlap);
	if (o->catchup && !one_of(o->catchup, catchups))
		return client_invalid(c, "catchup",
		                      "invalid catchup \"%s\": expected none, latest or all",
		                      o->catchup);
	if (strlen(tz) > 64)
		return client_invalid(c, "tz", "invalid time zone: longer than 64 bytes");
	int64_t next;
	int rc = first_fire(c, &cr, tz, &next);
	if (rc)
		return rc;
	buf sealed = BUF_INIT;
	if (seal_value(c->keys, SEAL_RUN_INPUT, o->input ? o->input : "null", &sealed) < 0) {
		buf_free(&sealed);
		return client_fail(c, CAIRN_ENOMEM, "out of memory encrypting the input");
	}
	char at[24];
	const char *p[] = {name,
	                   o->cron,
	                   tz,
	                   o->workflow,
	                   group,
	                   buf_str(&sealed),
	                   o->overlap ? o->overlap : "skip",
	                   o->catchup ? o->catchup : "latest",
	                   db_i64(at, next)};
	PGresult *r =
	    db_exec(c->conn, &c->err,
	            "WITH i AS (INSERT INTO cairn.schedules (name, cron, tz, workflow, "
	            "  shard_group, input, overlap, catchup, next_at) "
	            "  VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, "
	            "          to_timestamp($9::bigint / 1000.0)) "
	            "  ON CONFLICT (name) DO NOTHING RETURNING 1) "
	            "SELECT count(*), count(pg_notify('" SCHEDULE_CHANNEL "', $1)) FROM i",
	            9, p);
	buf_free(&sealed);
	if (!r)
		return client_db_fail(c);
	int made = db_get_int(r, 0, 0);
	PQclear(r);
	if (!made)
		return client_fail(
		    c, CAIRN_ESTATE,
		    "schedule \"%s\" exists already: delete it first (`cairn schedule "
		    "delete %s`)",
		    name, name);
	if (next_unix_ms)
		*next_unix_ms = next;
	return CAIRN_OK;
}

/* Each schedule, with the run of its last fire. */
static const char SQL_SCHEDULE_LIST[] =
    "WITH s AS MATERIALIZED (SELECT * FROM cairn.schedules), l AS (" SCHEDULE_LAST_RUNS(
        "s") ") "
             "SELECT s.name, cron, tz, workflow, shard_group, overlap, catchup, paused, "
             "  (extract(epoch FROM next_at) * 1000)::bigint, "
             "  (extract(epoch FROM last_at) * 1000)::bigint, l.id, fires, skipped "
             "FROM s LEFT JOIN l ON l.name = s.name ORDER BY s.name";

int cairn_schedule_list(cairn_client *c, cairn_schedule_info **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	PGresult *r = db_exec(c->conn, &c->err, SQL_SCHEDULE_LIST, 0, NULL);
	if (!r)
		return client_db_fail(c);
	size_t rows = (size_t)PQntuples(r);
	cairn_schedule_info *s = rows ? calloc(rows, sizeof *s) : NULL;
	if (rows && !s) {
		PQclear(r);
		return client_fail(c, CAIRN_ENOMEM, "out of memory listing schedules");
	}
	int oom = 0;
	for (int i = 0; i < (int)rows; i++) {
		char **texts[] = {&s[i].name,  &s[i].cron,    &s[i].tz,     &s[i].workflow,
		                  &s[i].group, &s[i].overlap, &s[i].catchup};
		for (int k = 0; k < 7; k++)
			oom |= !(*texts[k] = db_get_str(r, i, k));
		s[i].paused = db_get_bool(r, i, 7);
		s[i].next_unix_ms = db_get_i64(r, i, 8);
		s[i].last_unix_ms = db_get_i64(r, i, 9);
		s[i].last_run_id = db_get_i64(r, i, 10);
		s[i].fires = db_get_i64(r, i, 11);
		s[i].skipped = db_get_i64(r, i, 12);
	}
	PQclear(r);
	*out = s;
	*n = rows;
	if (oom) {
		cairn_schedule_list_free(s, rows);
		*out = NULL;
		*n = 0;
		return client_fail(c, CAIRN_ENOMEM, "out of memory listing schedules");
	}
	return CAIRN_OK;
}

void cairn_schedule_list_free(cairn_schedule_info *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(s[i].name);
		free(s[i].cron);
		free(s[i].tz);
		free(s[i].workflow);
		free(s[i].group);
		free(s[i].overlap);
		free(s[i].catchup);
	}
	free(s);
}

/* Runs sql, whose first column counts the schedules it changed: CAIRN_OK,
 * or CAIRN_ENOTFOUND when it changed none. */
static int schedule_write(cairn_client *c, const char *name, const char *sql, int n,
                          const char *const *p)
{
	PGresult *r = db_exec(c->conn, &c->err, sql, n, p);
	if (!r)
		return client_db_fail(c);
	int found = db_get_int(r, 0, 0);
	PQclear(r);
	return found ? CAIRN_OK
	             : client_fail(c, CAIRN_ENOTFOUND, "schedule \"%s\" not found", name);
}

int cairn_schedule_pause(cairn_client *c, const char *name, int pause)
{
	char err[PARSE_ERR_MAX];
	if (parse_check_name("schedule name", name, err) < 0)
		return client_invalid(c, "name", "%s", err);
	const char *p[] = {name, pause ? "t" : "f", NULL};
	char at[24];
	if (!pause) {
		/* A resumed schedule fires next at its first time from now. */
		PGresult *r = db_exec(c->conn, &c->err,
		                      "SELECT cron, tz FROM cairn.schedules WHERE name = $1", 1, p);
		if (!r)
			return client_db_fail(c);
		int found = PQntuples(r) == 1;
		cron cr;
		char cerr[512], tz[80] = "";
		int bad = found && cron_parse(PQgetvalue(r, 0, 0), &cr, cerr, sizeof cerr) < 0;
		if (found)
			snprintf(tz, sizeof tz, "%s", PQgetvalue(r, 0, 1));
		PQclear(r);
		if (!found)
			return client_fail(c, CAIRN_ENOTFOUND, "schedule \"%s\" not found", name);
		if (bad)
			return client_fail(c, CAIRN_EDB, "schedule \"%s\": stored %s", name, cerr);
		int64_t next;
		int rc = first_fire(c, &cr, tz, &next);
		if (rc)
			return rc;
		p[2] = db_i64(at, next);
	}
	return schedule_write(c, name,
	                      "WITH u AS (UPDATE cairn.schedules SET paused = $2::bool, "
	                      "  next_at = coalesce(to_timestamp($3::bigint / 1000.0), next_at) "
	                      "  WHERE name = $1 RETURNING 1) "
	                      "SELECT count(*), count(pg_notify('" SCHEDULE_CHANNEL
	                      "', $1)) FROM u",
	                      3, p);
}

int cairn_schedule_delete(cairn_client *c, const char *name)
{
	char err[PARSE_ERR_MAX];
	if (parse_check_name("schedule name", name, err) < 0)
		return client_invalid(c, "name", "%s", err);
	const char *p[] = {name};
	return schedule_write(c, name,
	                      "WITH d AS (DELETE FROM cairn.schedules WHERE name = $1 RETURNING 1) "
	                      "SELECT count(*) FROM d",
	                      1, p);
}
