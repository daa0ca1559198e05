/*
 * db.c - libpq helpers shared by the client, the migrator and the worker.
 * db_exec() runs a parameterised statement and turns a failure into the
 * server's message; the worker's hot statements (claim, commit) are
 * prepared by their modules and run with PQexecPrepared.
 */
#include "db.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backoff.h"
#include "cairn.h"

static _Thread_local char last_sqlstate[6];

/* NOTICEs (e.g. from CREATE ... IF NOT EXISTS) are not errors; keep stderr clean. */
static void notice_ignore(void *arg, const PGresult *res)
{
	(void)arg;
	(void)res;
}

PGconn *db_connect(const char *conninfo, const char *app_name, buf *err)
{
	const char *keys[] = {"dbname", "application_name", "connect_timeout", NULL};
	const char *vals[] = {conninfo ? conninfo : "", app_name, "5", NULL};
	PGconn *c = PQconnectdbParams(keys, vals, 1);
	if (!c) {
		if (err)
			buf_puts(err, "out of memory connecting to the database");
		return NULL;
	}
	if (PQstatus(c) != CONNECTION_OK) {
		if (err) {
			const char *m = PQerrorMessage(c);
			size_t n = strlen(m);
			while (n && (m[n - 1] == '\n' || m[n - 1] == ' '))
				n--;
			buf_puts(err, "cannot connect to the database: ");
			buf_append(err, m, n);
		}
		PQfinish(c);
		return NULL;
	}
	PQsetNoticeReceiver(c, notice_ignore, NULL);
	return c;
}

PGresult *db_exec(PGconn *c, buf *err, const char *sql, int n, const char *const *params)
{
	last_sqlstate[0] = '\0';
	PGresult *r = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
	ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
		return r;
	const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	if (state)
		snprintf(last_sqlstate, sizeof last_sqlstate, "%s", state);
	if (err) {
		const char *m = r ? PQresultErrorMessage(r) : "";
		if (!*m)
			m = PQerrorMessage(c);
		size_t len = strlen(m);
		while (len && (m[len - 1] == '\n' || m[len - 1] == ' '))
			len--;
		buf_reset(err);
		buf_puts(err, "database error: ");
		buf_append(err, m, len);
	}
	PQclear(r);
	return NULL;
}

int db_cmd(PGconn *c, buf *err, const char *sql, int n, const char *const *params)
{
	PGresult *r = db_exec(c, err, sql, n, params);
	if (!r)
		return -CAIRN_EDB;
	PQclear(r);
	return 0;
}

const char *db_last_sqlstate(void)
{
	return last_sqlstate;
}

int db_ok(PGconn *c)
{
	return c && PQstatus(c) == CONNECTION_OK;
}

int64_t db_get_i64(const PGresult *r, int row, int col)
{
	if (PQgetisnull(r, row, col))
		return 0;
	return strtoll(PQgetvalue(r, row, col), NULL, 10);
}

int db_get_int(const PGresult *r, int row, int col)
{
	return (int)db_get_i64(r, row, col);
}

int db_get_bool(const PGresult *r, int row, int col)
{
	return PQgetvalue(r, row, col)[0] == 't';
}

char *db_get_str(const PGresult *r, int row, int col)
{
	if (PQgetisnull(r, row, col))
		return NULL;
	return strdup(PQgetvalue(r, row, col));
}

char *db_i64(char out[24], int64_t v)
{
	snprintf(out, 24, "%" PRId64, v);
	return out;
}

int db_read_settings(PGconn *c, db_settings *out, buf *err)
{
	*out = (db_settings){.max_pending_signals = DB_DEFAULT_MAX_PENDING_SIGNALS,
	                     .max_journal_bytes = DB_DEFAULT_MAX_JOURNAL_BYTES};
	PGresult *r = db_exec(c, err,
	                      "SELECT name, value FROM cairn.settings WHERE name IN "
	                      "('shards_per_group', 'max_pending_signals', 'max_journal_bytes')",
	                      0, NULL);
	if (!r) {
		const char *st = db_last_sqlstate();
		if (!db_ok(c) || (strcmp(st, "3F000") != 0 && strcmp(st, "42P01") != 0))
			return -CAIRN_EDB;
		buf_reset(err);
		buf_puts(err, "the database has no cairn schema: run `cairn migrate` first");
		return -CAIRN_ESCHEMA;
	}
	for (int i = 0; i < PQntuples(r); i++) {
		const char *name = PQgetvalue(r, i, 0);
		int64_t v = db_get_i64(r, i, 1);
		if (strcmp(name, "shards_per_group") == 0)
			out->shards = (int)v;
		else if (strcmp(name, "max_pending_signals") == 0 && v > 0)
			out->max_pending_signals = (int)v;
		else if (strcmp(name, "max_journal_bytes") == 0 && v > 0)
			out->max_journal_bytes = v;
	}
	PQclear(r);
	if (out->shards <= 0) {
		buf_reset(err);
		buf_puts(err,
		         "shards_per_group is not recorded in the database: run `cairn migrate`");
		return -CAIRN_ESCHEMA;
	}
	return 0;
}

int64_t db_backoff_ms(int failures)
{
	return backoff_reconnect_ms(failures, 15000, randombytes_uniform(1000000) / 1e6);
}
