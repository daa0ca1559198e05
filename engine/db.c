/*
 * db.c - libpq helpers shared by the client, the migrator and the worker.
 * db_connect() is the one place connections are opened, so every connection
 * gets the same TCP keepalives and user timeout; db_session_limits() puts
 * the worker's statement and lock timeouts on a session. db_exec() runs a
 * parameterised statement and turns a failure into the server's message,
 * giving up on a connection that does not answer within the calling
 * thread's wait limit; the worker's hot statements (claim, commit) are
 * prepared by their modules and run with PQexecPrepared.
 */
#include "db.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "backoff.h"
#include "cairn.h"
#include "clock.h"

static _Thread_local char last_sqlstate[6];
static _Thread_local char last_message[512]; /* its primary message, cut */
static _Thread_local int64_t wait_limit_ms;  /* 0: wait as long as libpq does */

/* NOTICEs (e.g. from CREATE ... IF NOT EXISTS) are not errors; keep stderr clean. */
static void notice_ignore(void *arg, const PGresult *res)
{
	(void)arg;
	(void)res;
}

#define STR_(x) #x
#define STR(x)  STR_(x)

/* Adds s[n] = the first len bytes of v unless empty; the new count. */
static int add_one(char **s, int n, int max, const char *v, size_t len)
{
	if (len && n < max && (s[n] = strndup(v, len)))
		n++;
	return n;
}

/* Adds to s the secret that begins at v (a URL's or a query's value up to
 * one of the stop bytes, or a key=value's, quoted or not): as it stands in
 * the text, unescaped, and percent-decoded as far as it decodes (libpq's
 * messages quote each). At most max in all. */
static int add_secret(char **s, int n, int max, const char *v, const char *stop, int quoted)
{
	size_t len = 0;
	buf plain = BUF_INIT;
	if (quoted && *v == '\'') {
		for (v++; v[len] && v[len] != '\''; len++) {
			if (v[len] == '\\' && v[len + 1])
				len++;
			buf_append(&plain, &v[len], 1);
		}
	} else {
		len = strcspn(v, stop);
		buf_append(&plain, v, len);
	}
	int first = n;
	n = add_one(s, n, max, v, len);
	if (!plain.oom && strcmp(buf_str(&plain), n > first ? s[first] : "") != 0)
		n = add_one(s, n, max, buf_str(&plain), plain.len);
	buf dec = BUF_INIT;
	for (const char *p = buf_str(&plain); *p; p++) {
		unsigned x;
		if (*p == '%' && p[1] && p[2] && sscanf(p + 1, "%2x", &x) == 1 && x) {
			char ch = (char)x;
			buf_append(&dec, &ch, 1);
			p += 2;
		} else {
			buf_append(&dec, p, 1);
		}
	}
	if (!dec.oom && strcmp(buf_str(&dec), buf_str(&plain)) != 0)
		n = add_one(s, n, max, buf_str(&dec), dec.len);
	buf_free(&dec);
	buf_free(&plain);
	return n;
}

/* The passwords in conninfo, a URL or key=value pairs however malformed:
 * the URL's userinfo after its ':', and every password= or sslpassword=
 * value (of the URL's query or of a pair). */
static int conninfo_secrets(const char *conninfo, char **s, int max)
{
	int n = 0;
	const char *sep = strstr(conninfo, "://");
	if (sep && (strncmp(conninfo, "postgresql://", 13) == 0 ||
	            strncmp(conninfo, "postgres://", 11) == 0)) {
		const char *auth = sep + 3, *end = auth + strcspn(auth, "/?#");
		const char *at = NULL;
		for (const char *p = auth; p < end; p++)
			if (*p == '@')
				at = p;
		const char *colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
		if (colon) {
			char *pw = strndup(colon + 1, (size_t)(at - colon - 1));
			if (pw)
				n = add_secret(s, n, max, pw, "", 0);
			free(pw);
		}
	}
	static const char *const keys[] = {"password", "sslpassword"};
	for (size_t k = 0; k < 2; k++)
		for (const char *p = conninfo; (p = strstr(p, keys[k]));) {
			int starts = p == conninfo || strchr(" \t?&", p[-1]);
			p += strlen(keys[k]);
			const char *v = p + strspn(p, " \t");
			if (!starts || *v != '=')
				continue;
			v++;
			v += sep ? 0 : strspn(v, " \t");
			n = add_secret(s, n, max, v, sep ? "&#" : " \t", !sep);
		}
	s[n] = NULL;
	return n;
}

void db_scrub(const char *conninfo, const char *msg, buf *out)
{
	char *s[17];
	int n = conninfo ? conninfo_secrets(conninfo, s, 16) : 0;
	buf text = BUF_INIT;
	buf_puts(&text, msg);
	for (int i = 0; i < n; i++) {
		buf next = BUF_INIT;
		const char *t = buf_str(&text), *hit;
		size_t sl = strlen(s[i]);
		while ((hit = strstr(t, s[i]))) {
			buf_append(&next, t, (size_t)(hit - t));
			buf_puts(&next, "****");
			t = hit + sl;
		}
		buf_puts(&next, t);
		buf_free(&text);
		text = next;
		free(s[i]);
	}
	buf_puts(out, buf_str(&text));
	buf_free(&text);
}

PGconn *db_connect(const char *conninfo, const char *app_name, buf *err)
{
	/* Keywords are applied in order and the last one wins: the TCP settings
	 * come before dbname (the URL or conninfo), so a URL may override them;
	 * application_name and connect_timeout come after and always hold. */
	const char *keys[] = {"keepalives",       "keepalives_idle",  "keepalives_interval",
	                      "keepalives_count", "tcp_user_timeout", "dbname",
	                      "application_name", "connect_timeout",  NULL};
	const char *vals[] = {"1",
	                      STR(DB_KEEPALIVES_IDLE_S),
	                      STR(DB_KEEPALIVES_INTERVAL_S),
	                      STR(DB_KEEPALIVES_COUNT),
	                      STR(DB_TCP_USER_TIMEOUT_MS),
	                      conninfo ? conninfo : "",
	                      app_name,
	                      "5",
	                      NULL};
	PGconn *c = PQconnectdbParams(keys, vals, 1);
	if (!c) {
		if (err) {
			buf_reset(err);
			buf_puts(err, "out of memory connecting to the database");
		}
		return NULL;
	}
	if (PQstatus(c) != CONNECTION_OK) {
		if (err) {
			const char *m = PQerrorMessage(c);
			size_t n = strlen(m);
			while (n && (m[n - 1] == '\n' || m[n - 1] == ' '))
				n--;
			buf_reset(err); /* this failure's message, not the ones before it */
			buf_puts(err, "cannot connect to the database: ");
			char *line = strndup(m, n);
			db_scrub(conninfo, line ? line : "out of memory", err);
			free(line);
		}
		PQfinish(c);
		return NULL;
	}
	PQsetNoticeReceiver(c, notice_ignore, NULL);
	return c;
}

static const char SQL_LIMITS[] =
    "SELECT set_config('statement_timeout', $1, false), set_config('lock_timeout', $2, false), "
    "set_config('tcp_keepalives_idle', $3, false), "
    "set_config('tcp_keepalives_interval', $4, false), "
    "set_config('tcp_keepalives_count', $5, false), set_config('tcp_user_timeout', $6, false), "
    "CASE WHEN $7::bool THEN set_config('plan_cache_mode', 'force_generic_plan', false) END, "
    "CASE WHEN $8::bool THEN set_config('synchronous_commit', 'off', false) END";

int db_session_limits(PGconn *c, int64_t statement_ms, int64_t lock_ms, int flags, buf *err)
{
	/* The server side of the connection gets the same keepalives and user
	 * timeout, so it drops the session of a vanished client (and with it
	 * the session's advisory locks) as soon as the client notices. All of
	 * these read 0 and do nothing on a Unix socket. */
	char st[24], lk[24];
	const char *p[] = {db_i64(st, statement_ms),
	                   db_i64(lk, lock_ms),
	                   STR(DB_KEEPALIVES_IDLE_S),
	                   STR(DB_KEEPALIVES_INTERVAL_S),
	                   STR(DB_KEEPALIVES_COUNT),
	                   STR(DB_TCP_USER_TIMEOUT_MS),
	                   flags & DB_SESSION_GENERIC_PLANS ? "t" : "f",
	                   flags & DB_SESSION_NO_DISK_WAIT ? "t" : "f"};
	return db_cmd(c, err, SQL_LIMITS, 8, p);
}

void db_set_wait_limit(int64_t ms)
{
	wait_limit_ms = ms > 0 ? ms : 0;
}

/*
 * PQexecParams with the thread's wait limit: when no answer has come within
 * it, the socket is shut down (the connection is then CONNECTION_BAD, and
 * its session ends on the server once the server notices) and NULL is
 * returned with *gave_up set.
 */
static PGresult *exec_limited(PGconn *c, const char *sql, int n, const char *const *params,
                              int *gave_up)
{
	*gave_up = 0;
	if (!wait_limit_ms)
		return PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
	if (!PQsendQueryParams(c, sql, n, NULL, params, NULL, NULL, 0))
		return NULL;
	int64_t until = clock_mono_ms() + wait_limit_ms;
	while (PQisBusy(c)) {
		int64_t left = until - clock_mono_ms();
		if (left <= 0) {
			*gave_up = 1;
			shutdown(PQsocket(c), SHUT_RDWR);
			PQconsumeInput(c); /* sees the end: the connection is bad now */
			break;
		}
		struct pollfd pfd = {.fd = PQsocket(c), .events = POLLIN};
		if (poll(&pfd, 1, (int)left) < 0 && errno != EINTR)
			break;
		if (!PQconsumeInput(c))
			break;
	}
	/* One statement: keep its result (an error, if any, wins). */
	PGresult *res = NULL, *r;
	while ((r = PQgetResult(c))) {
		if (res && PQresultStatus(res) == PGRES_FATAL_ERROR) {
			PQclear(r);
			continue;
		}
		PQclear(res);
		res = r;
	}
	if (*gave_up) {
		PQclear(res);
		return NULL;
	}
	return res;
}

/* Keeps r if it succeeded; otherwise records its SQLSTATE and message (or
 * the wait limit's) in err, clears it and returns NULL. */
static PGresult *keep_ok(PGconn *c, PGresult *r, int gave_up, buf *err)
{
	ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
		return r;
	if (gave_up) {
		if (err) {
			buf_reset(err);
			buf_printf(err,
			           "database error: no answer within %" PRId64
			           " ms; the connection was closed",
			           wait_limit_ms);
		}
		return NULL;
	}
	const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	if (state)
		snprintf(last_sqlstate, sizeof last_sqlstate, "%s", state);
	const char *primary = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
	snprintf(last_message, sizeof last_message, "%s", primary ? primary : "");
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

PGresult *db_exec(PGconn *c, buf *err, const char *sql, int n, const char *const *params)
{
	last_sqlstate[0] = last_message[0] = '\0';
	int gave_up;
	PGresult *r = exec_limited(c, sql, n, params, &gave_up);
	return keep_ok(c, r, gave_up, err);
}

static int send_stmt(PGconn *c, const db_stmt *s, db_send how, int n, const char *const *params)
{
	if (how == DB_TEXT)
		return PQsendQueryParams(c, s->sql, n, NULL, params, NULL, NULL, 0);
	if (how == DB_PREPARE && !PQsendPrepare(c, s->name, s->sql, 0, NULL))
		return 0;
	return PQsendQueryPrepared(c, s->name, n, params, NULL, NULL, 0);
}

PGresult *db_exec_then(PGconn *c, buf *err, const db_stmt *s, db_send how, int n,
                       const char *const *params, const db_stmt *then, db_send then_how, int tn,
                       const char *const *tparams, int *then_ok)
{
	if (wait_limit_ms || !PQenterPipelineMode(c)) {
		PGresult *r = db_exec(c, err, s->sql, n, params),
		         *t = db_exec(c, NULL, then->sql, tn, tparams);
		*then_ok = t != NULL;
		PQclear(t);
		return r;
	}
	last_sqlstate[0] = last_message[0] = '\0';
	int sent = send_stmt(c, s, how, n, params) && PQpipelineSync(c) &&
	           send_stmt(c, then, then_how, tn, tparams) && PQpipelineSync(c);
	/* The first statement's result (an error, if any, wins; a prepare's
	 * result is followed by its statement's), then its sync; of the
	 * second's results, only whether one failed. */
	PGresult *res = NULL, *r;
	int syncs = 0;
	*then_ok = 1;
	while (sent && syncs < 2) {
		if (!(r = PQgetResult(c))) {
			if (PQstatus(c) != CONNECTION_OK)
				break;
			continue; /* the end of one statement's results */
		}
		ExecStatusType st = PQresultStatus(r);
		if (st == PGRES_PIPELINE_SYNC) {
			syncs++;
		} else if (syncs == 0 && (!res || PQresultStatus(res) != PGRES_FATAL_ERROR)) {
			PQclear(res);
			res = r;
			continue;
		} else if (syncs == 1 && st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
			*then_ok = 0;
		}
		PQclear(r);
	}
	if (syncs < 2)
		*then_ok = 0;
	PQexitPipelineMode(c);
	return keep_ok(c, res, 0, err);
}

/* Each PQprepare is a transaction of its own (its Sync ends it): a worker
 * that prepares its statements as it connects would count one per
 * statement. */
int db_prepare(PGconn *c, const db_stmt *s, int n, buf *err)
{
	last_sqlstate[0] = last_message[0] = '\0';
	int sent = PQenterPipelineMode(c);
	for (int i = 0; sent && i < n; i++)
		sent = PQsendPrepare(c, s[i].name, s[i].sql, 0, NULL);
	int failed = !(sent && PQpipelineSync(c));
	if (failed)
		keep_ok(c, NULL, 0, err);
	/* The first failure's message; the statements after it are skipped. */
	for (int synced = failed; !synced;) {
		PGresult *r = PQgetResult(c);
		if (!r && PQstatus(c) != CONNECTION_OK) {
			if (!failed)
				keep_ok(c, NULL, 0, err);
			failed = 1;
			break;
		}
		if (!r)
			continue; /* the end of one statement's results */
		if (PQresultStatus(r) == PGRES_PIPELINE_SYNC)
			synced = 1;
		else if (!failed && !(r = keep_ok(c, r, 0, err)))
			failed = 1;
		PQclear(r);
	}
	PQexitPipelineMode(c);
	return failed ? -CAIRN_EDB : 0;
}

PGresult *db_exec_prepared(PGconn *c, buf *err, const char *name, int n, const char *const *params)
{
	last_sqlstate[0] = last_message[0] = '\0';
	return keep_ok(c, PQexecPrepared(c, name, n, params, NULL, NULL, 0), 0, err);
}

/* Sends executions from to to (excluded) of db_exec_prepared_each, each
 * followed by a sync, and reads their results into out: 0, or -1 when the
 * connection failed. */
static int exec_pipelined(PGconn *c, const char *name, int from, int to, int n,
                          const char *const *const *params, PGresult **out)
{
	int sent = 1;
	for (int i = from; i < to && sent; i++)
		sent = PQsendQueryPrepared(c, name, n, params[i], NULL, NULL, 0) && PQpipelineSync(c);
	/* Each statement's results, a NULL, then its sync. */
	for (int i = from; sent && i < to;) {
		PGresult *r = PQgetResult(c);
		if (!r) {
			if (PQstatus(c) != CONNECTION_OK)
				return -1;
			continue;
		}
		if (PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
			PQclear(r);
			i++;
		} else if (!out[i]) {
			out[i] = r;
		} else {
			PQclear(r);
		}
	}
	return sent ? 0 : -1;
}

int db_exec_prepared_each(PGconn *c, buf *err, const char *name, int count, int n,
                          const char *const *const *params, PGresult **out)
{
	int rc = 0;
	for (int i = 0; i < count; i++)
		out[i] = NULL;
	if (wait_limit_ms || !PQenterPipelineMode(c)) {
		for (int i = 0; i < count; i++)
			if (!(out[i] = db_exec_prepared(c, rc ? NULL : err, name, n, params[i])))
				rc = -1;
		return rc;
	}
	last_sqlstate[0] = last_message[0] = '\0';
	int lost = 0;
	for (int from = 0; from < count && !lost; from += DB_PIPELINE_MAX)
		lost = exec_pipelined(c, name, from,
		                      count - from < DB_PIPELINE_MAX ? count : from + DB_PIPELINE_MAX, n,
		                      params, out) < 0;
	PQexitPipelineMode(c);
	for (int i = 0; i < count; i++) {
		ExecStatusType st = out[i] ? PQresultStatus(out[i]) : PGRES_FATAL_ERROR;
		if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
			continue;
		if (!rc)
			keep_ok(c, out[i], 0, err); /* clears it */
		else
			PQclear(out[i]);
		out[i] = NULL;
		rc = -1;
	}
	return rc;
}

int db_cmd(PGconn *c, buf *err, const char *sql, int n, const char *const *params)
{
	PGresult *r = db_exec(c, err, sql, n, params);
	if (!r)
		return -CAIRN_EDB;
	PQclear(r);
	return 0;
}

static const char SQL_ANALYZED[] = "SELECT pg_try_advisory_xact_lock($1::bigint), EXISTS ("
                                   "  SELECT 1 FROM pg_stat_user_tables "
                                   "  WHERE relid = ANY (string_to_array($2, ', ')::regclass[]) "
                                   "    AND greatest(last_analyze, last_autoanalyze) > "
                                   "        now() - $3::bigint * interval '1 millisecond')";

int db_analyze_unless_recent(PGconn *c, int64_t lock_key, const char *tables, int64_t within_ms)
{
	buf sql = BUF_INIT;
	buf_printf(&sql, "ANALYZE %s", tables);
	char key[24], ms[24];
	const char *p[] = {db_i64(key, lock_key), tables, db_i64(ms, within_ms)};
	PGresult *r = NULL;
	int rc = -1;
	if (db_cmd(c, NULL, "BEGIN", 0, NULL) == 0 && (r = db_exec(c, NULL, SQL_ANALYZED, 3, p)) &&
	    PQntuples(r) == 1 && db_get_bool(r, 0, 0))
		rc = db_get_bool(r, 0, 1)                           ? 0
		     : db_cmd(c, NULL, buf_str(&sql), 0, NULL) == 0 ? 1
		                                                    : -1;
	PQclear(r);
	if (rc < 0 || db_cmd(c, NULL, "COMMIT", 0, NULL) < 0)
		db_cmd(c, NULL, "ROLLBACK", 0, NULL);
	buf_free(&sql);
	return rc;
}

const char *db_last_sqlstate(void)
{
	return last_sqlstate;
}

const char *db_last_message(void)
{
	return last_message;
}

void db_rollback(PGconn *c)
{
	char state[sizeof last_sqlstate], message[sizeof last_message];
	memcpy(state, last_sqlstate, sizeof state);
	memcpy(message, last_message, sizeof message);
	db_cmd(c, NULL, "ROLLBACK", 0, NULL);
	memcpy(last_sqlstate, state, sizeof state);
	memcpy(last_message, message, sizeof message);
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

/* The keys of cairn.parts, "K0,K1,..." in part_no order, into out (one
 * part, key 0, when there are none or more than DB_PARTS_MAX). */
static void read_part_keys(const char *list, db_settings *out)
{
	out->nparts = 0;
	for (const char *p = list; *p && out->nparts < DB_PARTS_MAX;) {
		char *end;
		long k = strtol(p, &end, 10);
		if (end == p)
			break;
		out->part_keys[out->nparts++] = (int)k;
		p = *end == ',' ? end + 1 : end;
	}
	if (out->nparts == 0) {
		out->nparts = 1;
		out->part_keys[0] = 0;
	}
}

int db_part_key(const db_settings *s, int shard)
{
	return s->nparts > 0 ? s->part_keys[shard % s->nparts] : 0;
}

int db_read_settings(PGconn *c, db_settings *out, buf *err)
{
	*out = (db_settings){.max_pending_signals = DB_DEFAULT_MAX_PENDING_SIGNALS,
	                     .max_journal_bytes = DB_DEFAULT_MAX_JOURNAL_BYTES};
	PGresult *r = db_exec(c, err,
	                      "SELECT name, value FROM cairn.settings WHERE name IN "
	                      "('shards_per_group', 'max_pending_signals', 'max_journal_bytes', "
	                      " 'first_placed_id') "
	                      "UNION ALL SELECT 'backend_pid', pg_backend_pid()::text "
	                      "UNION ALL SELECT 'schema_version', coalesce(max(version), 0)::text "
	                      "FROM cairn.schema_migrations "
	                      "UNION ALL SELECT 'part_keys', string_agg(key::text, ',' "
	                      "  ORDER BY part_no) FROM cairn.parts",
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
		if (strcmp(name, "part_keys") == 0) {
			read_part_keys(PQgetvalue(r, i, 1), out);
			continue;
		}
		int64_t v = db_get_i64(r, i, 1);
		if (strcmp(name, "shards_per_group") == 0)
			out->shards = (int)v;
		else if (strcmp(name, "max_pending_signals") == 0 && v > 0)
			out->max_pending_signals = (int)v;
		else if (strcmp(name, "max_journal_bytes") == 0 && v > 0)
			out->max_journal_bytes = v;
		else if (strcmp(name, "backend_pid") == 0)
			out->pooled = v != PQbackendPID(c); /* as db_behind_pooler */
		else if (strcmp(name, "schema_version") == 0)
			out->schema_version = (int)v;
		else if (strcmp(name, "first_placed_id") == 0)
			out->first_placed_id = v;
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

int64_t db_server_pid(PGconn *c, buf *err)
{
	PGresult *r = db_exec(c, err, "SELECT pg_backend_pid()", 0, NULL);
	if (!r)
		return -1;
	int64_t pid = db_get_i64(r, 0, 0);
	PQclear(r);
	return pid;
}

int db_behind_pooler(PGconn *c, buf *err)
{
	int64_t pid = db_server_pid(c, err);
	if (pid < 0)
		return -CAIRN_EDB;
	return pid != PQbackendPID(c);
}

#define POOL_CHECK_ROUNDS 3
/* What every refusal of the check says the worker needs. */
#define POOL_NEEDS                                                                                 \
	"cairn-worker holds session advisory locks and needs a session-pooled or direct "          \
	"connection: use pool_mode = session in PgBouncer, or connect to PostgreSQL directly"
#define POOL_CHECK_WAIT_MS 5000

/*
 * Two connections to the same URL, a few rounds of: A reads its server pid
 * (p1) and goes idle; B opens a transaction and reads its own (p2); A, while
 * B's transaction is still open, reads again (p3); B commits. A session
 * keeps its server, so always p2 != p1 and p3 == p1. A pooler that hands
 * out servers per transaction (or statement) gives B the server A just
 * released (PgBouncer reuses the most recent first) or A another one, so
 * p2 == p1 or p3 != p1 in at least one round. A's pid changing between
 * rounds says the same.
 */
static int pool_check_rounds(PGconn *a, PGconn *b, int64_t *seen, buf *err)
{
	int64_t first = -1;
	for (int i = 0; i < POOL_CHECK_ROUNDS; i++) {
		int64_t p1 = db_server_pid(a, err);
		if (p1 < 0)
			return -CAIRN_EDB;
		if (first < 0)
			first = p1;
		/* Behind a pooler (the backend key is not the server's pid), a
		 * refused BEGIN is statement pooling (PgBouncer: "transaction
		 * blocks not allowed in statement pooling mode"), and A waiting
		 * behind B's open transaction means A has no server of its own
		 * (transaction pooling with every server taken). */
		int pooler = p1 != PQbackendPID(a);
		if (db_cmd(b, err, "BEGIN", 0, NULL) < 0) {
			if (pooler && db_ok(a)) {
				seen[0] = p1, seen[1] = -1, seen[2] = -1, seen[3] = first;
				return 2;
			}
			return -CAIRN_EDB;
		}
		int64_t p2 = db_server_pid(b, err);
		int64_t p3 = p2 < 0 ? -1 : db_server_pid(a, err);
		if (p3 < 0 && p2 >= 0 && pooler && !db_ok(a) && db_ok(b)) {
			seen[0] = p1, seen[1] = p2, seen[2] = -1, seen[3] = first;
			return 3;
		}
		if (p3 < 0 || db_cmd(b, err, "COMMIT", 0, NULL) < 0)
			return -CAIRN_EDB;
		if (p1 != first || p2 == p1 || p3 != p1) {
			seen[0] = p1, seen[1] = p2, seen[2] = p3, seen[3] = first;
			return 1;
		}
	}
	return 0;
}

int db_check_session_pooling(PGconn *a, const char *conninfo, buf *err)
{
	int64_t saved = wait_limit_ms;
	int key = PQbackendPID(a); /* 0 once a timed-out statement closed a */
	/* A session pooler with no second server to give would make B wait. */
	db_set_wait_limit(POOL_CHECK_WAIT_MS);
	buf e = BUF_INIT;
	int rc = -CAIRN_EDB;
	PGconn *b = db_connect(conninfo, "cairn-worker pool check", &e);
	int64_t seen[4] = {0};
	if (b)
		rc = pool_check_rounds(a, b, seen, &e);
	db_set_wait_limit(saved);
	if (b)
		PQfinish(b);
	buf_reset(err);
	if (rc < 0) {
		buf_printf(err, "cannot check how the database connection is pooled: %s",
		           buf_str(&e));
	} else if (rc == 2) {
		buf_printf(err,
		           "the database connection goes through a pooler in statement pooling "
		           "mode: it refused a transaction block (%s; backend pid %" PRId64
		           ", backend key %d). " POOL_NEEDS,
		           buf_str(&e), seen[0], PQbackendPID(a));
		rc = -CAIRN_ESTATE;
	} else if (rc == 3) {
		buf_printf(err,
		           "the database connection goes through a pooler in transaction pooling "
		           "mode: a statement on it waited behind another connection's open "
		           "transaction (backend pid %" PRId64
		           " before, backend key %d), so it has "
		           "no server session of its own. " POOL_NEEDS,
		           seen[0], key);
		rc = -CAIRN_ESTATE;
	} else if (rc > 0) {
		buf_printf(err,
		           "the database connection goes through a pooler in transaction (or "
		           "statement) pooling mode: one connection's statements ran on different "
		           "server sessions (backend pids %" PRId64 ", then %" PRId64
		           " while another connection's transaction held %" PRId64 "; the client "
		           "was given backend key %d). " POOL_NEEDS,
		           seen[3], seen[2], seen[1], PQbackendPID(a));
		rc = -CAIRN_ESTATE;
	}
	buf_free(&e);
	return rc;
}
