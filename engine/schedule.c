/*
 * schedule.c - a schedule's due times (schedule.h): two statements, one
 * for the wall-clock times of the two instants in the zone, one for the
 * instants of the matching wall-clock times; the walk between is cron.c's.
 * And the client's calls on schedules (cairn.h), each one statement.
 */
#include "schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "client.h"
#include "db.h"
#include "parse.h"
#include "pgarr.h"

/* A wall-clock time as PostgreSQL reads a timestamp. */
static void tm_text(const struct tm *t, char out[80])
{
	snprintf(out, 80, "%04d-%02d-%02d %02d:%02d:%02d", t->tm_year + 1900, t->tm_mon + 1,
	         t->tm_mday, t->tm_hour, t->tm_min, t->tm_sec);
}

static int tm_parse(const char *s, struct tm *t)
{
	memset(t, 0, sizeof *t);
	if (sscanf(s, "%d-%d-%d %d:%d:%d", &t->tm_year, &t->tm_mon, &t->tm_mday, &t->tm_hour,
	           &t->tm_min, &t->tm_sec) != 6)
		return -1;
	t->tm_year -= 1900;
	t->tm_mon -= 1;
	return 0;
}

/* The wall-clock times in tz of the instants a and b (Unix ms). */
static int wall_clock(PGconn *conn, const char *tz, int64_t a, int64_t b, struct tm *ta,
                      struct tm *tb, buf *err)
{
	char at[24], bt[24];
	const char *p[] = {db_i64(at, a), db_i64(bt, b), tz};
	PGresult *r = db_exec(conn, err,
	                      "SELECT to_char(to_timestamp($1::bigint / 1000.0) AT TIME ZONE $3, "
	                      "               'YYYY-MM-DD HH24:MI:SS'), "
	                      "       to_char(to_timestamp($2::bigint / 1000.0) AT TIME ZONE $3, "
	                      "               'YYYY-MM-DD HH24:MI:SS')",
	                      3, p);
	if (!r) {
		const char *st = db_last_sqlstate();
		if (strcmp(st, "22023") == 0 || strncmp(st, "22", 2) == 0) {
			buf_reset(err);
			buf_printf(
			    err,
			    "unknown time zone \"%s\": expected a zone of the tz database like "
			    "UTC, Europe/Berlin or America/New_York",
			    tz);
			return -CAIRN_EINVAL;
		}
		return -CAIRN_EDB;
	}
	int bad = tm_parse(PQgetvalue(r, 0, 0), ta) < 0 || tm_parse(PQgetvalue(r, 0, 1), tb) < 0;
	PQclear(r);
	if (bad) {
		buf_reset(err);
		buf_puts(err, "cannot read the database's wall-clock time");
		return -CAIRN_EDB;
	}
	return 0;
}

static int tm_before_eq(const struct tm *a, const struct tm *b)
{
	struct tm x = *a, y = *b;
	return timegm(&x) <= timegm(&y);
}

int schedule_due(PGconn *conn, const cron *c, const char *tz, int64_t from_ms, int64_t now_ms,
                 int only_last, int64_t *due, int *ndue, int64_t *next_ms, buf *err)
{
	*ndue = 0;
	struct tm from, now, t, hit;
	int rc = wall_clock(conn, tz, from_ms - 1000, now_ms, &from, &now, err);
	if (rc)
		return rc;
	/* The wall-clock times from `from` on that are not after `now`, and
	 * the first one after them. */
	pgarr times = PGARR_INIT;
	int n = 0, capped = 0;
	char text[80], last[80] = "";
	for (t = from;;) {
		if (cron_next(c, &t, &hit) < 0) {
			pgarr_free(&times);
			buf_reset(err);
			buf_puts(err, "the cron expression matches no time within 5 years");
			return -CAIRN_EINVAL;
		}
		t = hit;
		tm_text(&hit, text);
		capped = !only_last && n == SCHEDULE_FIRES_MAX;
		if (capped || !tm_before_eq(&hit, &now))
			break; /* the next one (the rest of a long catch-up: next round) */
		if (only_last)
			snprintf(last, sizeof last, "%s", text);
		else
			pgarr_add(&times, text);
		n++;
	}
	if (only_last && last[0])
		pgarr_add(&times, last);
	pgarr_add(&times, text); /* the next one */
	const char *p[] = {pgarr_str(&times), tz};
	PGresult *r = times.b.oom ? NULL
	                          : db_exec(conn, err,
	                                    "SELECT (extract(epoch FROM (t::timestamp AT TIME ZONE "
	                                    "$2)) * 1000)::bigint FROM unnest($1::text[]) "
	                                    "WITH ORDINALITY AS x(t, i) ORDER BY i",
	                                    2, p);
	pgarr_free(&times);
	if (!r)
		return -CAIRN_EDB;
	int rows = PQntuples(r);
	*next_ms = db_get_i64(r, rows - 1, 0);
	/* Around a change of the clocks a wall-clock time can map before the
	 * instant it followed: only instants in [from, now] are due. */
	for (int i = 0; i < rows - 1; i++) {
		int64_t at = db_get_i64(r, i, 0);
		if (at >= from_ms && at <= now_ms && (*ndue == 0 || at > due[*ndue - 1]))
			due[(*ndue)++] = at;
	}
	PQclear(r);
	if (!capped && *next_ms <= now_ms)
		*next_ms = now_ms + 1000; /* a clock change mapped it back: look again soon */
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
#define LAST_RUN                                                                                   \
	"(SELECT r.id FROM cairn.runs r WHERE r.workflow = s.workflow AND r.key "                  \
	"= " SCHEDULE_KEY_SQL("s") ")"
static const char SQL_SCHEDULE_LIST[] =
    "SELECT name, cron, tz, workflow, shard_group, overlap, catchup, paused, "
    "  (extract(epoch FROM next_at) * 1000)::bigint, "
    "  (extract(epoch FROM last_at) * 1000)::bigint, " LAST_RUN ", fires, skipped "
    "FROM cairn.schedules s ORDER BY name";

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
