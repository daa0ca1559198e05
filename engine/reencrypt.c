/*
 * reencrypt.c - cairn_reencrypt(): walks runs, steps, signals, events and
 * schedules in key order, a batch of rows per transaction, and rewrites every value that is
 * plaintext or sealed under an older key with the client's current key
 * (seal.h). Each write compares the row's values with what was read, so a
 * value a worker wrote meanwhile is never overwritten: that row is counted
 * as changed and left for the next pass. Every value is opened, those under
 * the current key too; one that does not open is left as it is and counted
 * by why: its key is missing, or it does not authenticate under a key the
 * client has (with where it is, for the operator).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "pgarr.h"

#define BATCH_DEFAULT 500
#define BATCH_MAX     100000
#define MAX_VALUES    3

/* One table: its key (one or two integer columns) and up to three values.
 * The select takes the key to continue after ($1, or $1 $2) and the batch
 * size, and returns the key columns then the values as text; the update
 * takes the key arrays, then the old and new text of each value, and
 * for each row it rewrote how many of its values changed. */
typedef struct table {
	const char *name;
	const char *first[2]; /* the key before every row's */
	int nkeys, nvalues;
	seal_field fields[MAX_VALUES];
	const char *noun, *names[MAX_VALUES]; /* a row and its values, for messages */
	const char *select, *update;
} table;

static const table TABLES[] = {
    {"runs",
     {"0"},
     1,
     3,
     {SEAL_RUN_INPUT, SEAL_RUN_OUTPUT, SEAL_RUN_ERROR},
     "run",
     {"input", "output", "error"},
     "SELECT id, input::text, output::text, error FROM cairn.runs "
     "WHERE id > $1 ORDER BY id LIMIT $2",
     "UPDATE cairn.runs r SET input = u.ni::jsonb, output = u.no::jsonb, error = u.ne "
     "FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], "
     "            $7::text[]) AS u(id, oi, ni, oo, no, oe, ne) "
     "WHERE r.id = u.id AND r.input::text IS NOT DISTINCT FROM u.oi "
     "  AND r.output::text IS NOT DISTINCT FROM u.oo AND r.error IS NOT DISTINCT FROM u.oe "
     "RETURNING (u.ni IS DISTINCT FROM u.oi)::int + (u.no IS DISTINCT FROM u.oo)::int + "
     "  (u.ne IS DISTINCT FROM u.oe)::int"},
    {"steps",
     {"0", "-1"},
     2,
     2,
     {SEAL_STEP_OUTPUT, SEAL_STEP_ERROR},
     "step",
     {"output", "error"},
     "SELECT run_id, seq, output::text, error FROM cairn.steps "
     "WHERE (run_id, seq) > ($1, $2) ORDER BY run_id, seq LIMIT $3",
     "UPDATE cairn.steps s SET output = u.no::jsonb, error = u.ne "
     "FROM unnest($1::bigint[], $2::int[], $3::text[], $4::text[], $5::text[], $6::text[]) "
     "  AS u(run_id, seq, oo, no, oe, ne) "
     "WHERE s.run_id = u.run_id AND s.seq = u.seq "
     "  AND s.output::text IS NOT DISTINCT FROM u.oo AND s.error IS NOT DISTINCT FROM u.oe "
     "RETURNING (u.no IS DISTINCT FROM u.oo)::int + (u.ne IS DISTINCT FROM u.oe)::int"},
    {"signals",
     {"0"},
     1,
     1,
     {SEAL_SIGNAL_PAYLOAD},
     "signal",
     {"payload"},
     "SELECT id, payload::text FROM cairn.signals WHERE id > $1 ORDER BY id LIMIT $2",
     "UPDATE cairn.signals g SET payload = u.np::jsonb "
     "FROM unnest($1::bigint[], $2::text[], $3::text[]) AS u(id, op, np) "
     "WHERE g.id = u.id AND g.payload::text IS NOT DISTINCT FROM u.op RETURNING 1"},
    {"schedules",
     {""},
     1,
     1,
     {SEAL_RUN_INPUT},
     "schedule",
     {"input"},
     "SELECT name, input::text FROM cairn.schedules WHERE name > $1 ORDER BY name LIMIT $2",
     "UPDATE cairn.schedules s SET input = u.ni::jsonb "
     "FROM unnest($1::text[], $2::text[], $3::text[]) AS u(name, oi, ni) "
     "WHERE s.name = u.name AND s.input::text IS NOT DISTINCT FROM u.oi RETURNING 1"},
    {"events",
     {"0", ""},
     2,
     1,
     {SEAL_EVENT_VALUE},
     "event",
     {"value"},
     "SELECT run_id, key, value::text FROM cairn.events "
     "WHERE (run_id, key) > ($1, $2) ORDER BY run_id, key LIMIT $3",
     "UPDATE cairn.events e SET value = u.nv::jsonb "
     "FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[]) AS u(run_id, key, ov, nv) "
     "WHERE e.run_id = u.run_id AND e.key = u.key AND e.value::text IS NOT DISTINCT FROM u.ov "
     "RETURNING 1"},
};
#define NTABLES (sizeof TABLES / sizeof TABLES[0])

/* The update's parameters for one batch: key arrays, then old/new pairs. */
typedef struct rewrite {
	pgarr keys[2];
	pgarr vals[2 * MAX_VALUES];
	int rows;
} rewrite;

static void rewrite_free(rewrite *w)
{
	for (int i = 0; i < 2; i++)
		pgarr_free(&w->keys[i]);
	for (int i = 0; i < 2 * MAX_VALUES; i++)
		pgarr_free(&w->vals[i]);
	memset(w, 0, sizeof *w);
}

/*
 * What value v (read from a field f) becomes under the current key: 0 with
 * the new text in out, 1 when it stays (NULL, or already current), or the
 * stat it counts toward when it cannot be opened, its key id in id:
 * MISSING when the client lacks the key, UNREADABLE when it has a key of
 * that id but the value does not authenticate under it (or is malformed).
 */
enum { KEEP = 1, MISSING = 2, UNREADABLE = 3 };
static int rewrite_value(const cairn_client *c, seal_field f, const char *v, buf *out,
                         char id[SEAL_ID_MAX + 1])
{
	if (!v)
		return KEEP;
	/* A value under the current key is opened too: one that does not
	 * authenticate (the key id reused for other bytes) is found here. */
	buf plain = BUF_INIT;
	int rc = seal_open(c->keys, f, v, &plain, id);
	if (rc == 0 && strcmp(id, seal_key_id(c->keys, 0)) == 0) {
		buf_free(&plain);
		return KEEP;
	}
	if (rc >= 0) {
		buf_reset(out);
		rc = seal_value(c->keys, f, rc == 0 ? buf_str(&plain) : v, out);
	}
	buf_free(&plain);
	return rc == SEAL_NOKEY ? MISSING : rc == -CAIRN_EINVAL ? UNREADABLE : rc;
}

/* Adds item to the list (CAIRN_REENCRYPT_LIST_MAX bytes, items separated
 * by sep) unless it is there; a list that is full ends with "...". */
static void list_add(char *list, const char *sep, const char *item)
{
	size_t len = strlen(list), n = strlen(item), s = strlen(sep);
	for (const char *p = list; *p;) {
		const char *end = strstr(p, sep);
		size_t m = end ? (size_t)(end - p) : strlen(p);
		if (m == n && strncmp(p, item, n) == 0)
			return;
		p += m + (end ? s : 0);
	}
	if (len >= 3 && strcmp(list + len - 3, "...") == 0)
		return;
	if (len + s + n + s + 3 < CAIRN_REENCRYPT_LIST_MAX)
		snprintf(list + len, CAIRN_REENCRYPT_LIST_MAX - len, "%s%s", len ? sep : "", item);
	else
		snprintf(list + len, CAIRN_REENCRYPT_LIST_MAX - len, "%s...", len ? sep : "");
}

/* Counts a value of row i of r (column v of t) left as it is. */
static void count_left(const table *t, const PGresult *r, int i, int v, int what, const char *id,
                       cairn_reencrypt_stats *s)
{
	if (what == MISSING) {
		s->missing_key++;
		list_add(s->missing_keys, ",", id);
		return;
	}
	s->unreadable++;
	if (*id) /* else malformed, naming no key */
		list_add(s->unreadable_keys, ",", id);
	char at[200];
	snprintf(at, sizeof at, "%s %s%s%s %s", t->noun, PQgetvalue(r, i, 0),
	         t->nkeys == 2 ? "/" : "", t->nkeys == 2 ? PQgetvalue(r, i, 1) : "", t->names[v]);
	list_add(s->unreadable_at, ", ", at);
}

/* Plans the rewrite of the rows of r into w, counting into s: 0 or
 * -CAIRN_ENOMEM. */
static int plan(const cairn_client *c, const table *t, const PGresult *r, rewrite *w,
                cairn_reencrypt_stats *s)
{
	buf next = BUF_INIT;
	int rc = 0;
	for (int i = 0; i < PQntuples(r) && !rc; i++) {
		const char *old[MAX_VALUES], *now[MAX_VALUES];
		char *fresh[MAX_VALUES] = {0};
		int change = 0;
		for (int v = 0; v < t->nvalues && !rc; v++) {
			int col = t->nkeys + v;
			old[v] = now[v] = PQgetisnull(r, i, col) ? NULL : PQgetvalue(r, i, col);
			char id[SEAL_ID_MAX + 1] = "";
			int what = rewrite_value(c, t->fields[v], old[v], &next, id);
			if (what == 0 && !(now[v] = fresh[v] = buf_detach(&next)))
				rc = -CAIRN_ENOMEM;
			change |= what == 0;
			s->current += what == KEEP && old[v];
			if (what == MISSING || what == UNREADABLE)
				count_left(t, r, i, v, what, id, s);
			rc = what < 0 ? what : rc;
		}
		if (change && !rc) {
			for (int k = 0; k < t->nkeys; k++)
				pgarr_add(&w->keys[k], PQgetvalue(r, i, k));
			for (int v = 0; v < t->nvalues; v++) {
				pgarr_add(&w->vals[2 * v], old[v]);
				pgarr_add(&w->vals[2 * v + 1], now[v]);
			}
			w->rows++;
		}
		for (int v = 0; v < t->nvalues; v++)
			free(fresh[v]);
	}
	buf_free(&next);
	for (int k = 0; k < 2 * MAX_VALUES; k++)
		rc = w->vals[k].b.oom || (k < 2 && w->keys[k].b.oom) ? -CAIRN_ENOMEM : rc;
	return rc;
}

/* Writes w: 0 with the values rewritten and the rows that changed since
 * they were read counted into s, or CAIRN_EDB (c's error set). */
static int write_rewrite(cairn_client *c, const table *t, rewrite *w, cairn_reencrypt_stats *s)
{
	const char *p[2 + 2 * MAX_VALUES];
	int n = 0;
	for (int k = 0; k < t->nkeys; k++)
		p[n++] = pgarr_str(&w->keys[k]);
	for (int v = 0; v < 2 * t->nvalues; v++)
		p[n++] = pgarr_str(&w->vals[v]);
	PGresult *r = db_exec(c->conn, &c->err, t->update, n, p);
	if (!r)
		return CAIRN_EDB;
	for (int i = 0; i < PQntuples(r); i++)
		s->rewritten += db_get_int(r, i, 0);
	s->changed += w->rows - PQntuples(r);
	PQclear(r);
	return CAIRN_OK;
}

static int reencrypt_table(cairn_client *c, const table *t, int batch,
                           void (*progress)(const cairn_reencrypt_stats *, void *), void *arg,
                           cairn_reencrypt_stats *s)
{
	char after[2][160], lim[24];
	for (int k = 0; k < t->nkeys; k++)
		snprintf(after[k], sizeof after[k], "%s", t->first[k]);
	snprintf(lim, sizeof lim, "%d", batch);
	for (int rows = batch; rows == batch;) {
		const char *p[] = {after[0], t->nkeys == 2 ? after[1] : lim, lim};
		PGresult *r = db_exec(c->conn, &c->err, t->select, t->nkeys + 1, p);
		if (!r)
			return CAIRN_EDB;
		rewrite w = {0};
		int rc = plan(c, t, r, &w, s);
		rows = PQntuples(r);
		for (int k = 0; rows && k < t->nkeys; k++)
			snprintf(after[k], sizeof after[k], "%s", PQgetvalue(r, rows - 1, k));
		PQclear(r);
		if (rc)
			rc =
			    client_fail(c, CAIRN_ENOMEM, "out of memory re-encrypting %s", t->name);
		else if (w.rows)
			rc = write_rewrite(c, t, &w, s);
		rewrite_free(&w);
		if (rc)
			return rc;
		s->rows_done += rows;
		if (progress)
			progress(s, arg);
	}
	return CAIRN_OK;
}

int cairn_reencrypt(cairn_client *c, int batch,
                    void (*progress)(const cairn_reencrypt_stats *s, void *arg), void *arg,
                    cairn_reencrypt_stats *out)
{
	cairn_reencrypt_stats s = {0};
	if (out)
		*out = s;
	if (!c->keys)
		return client_invalid(c, "keys",
		                      "no encryption keys: set CAIRN_ENCRYPTION_KEYS (or "
		                      "CAIRN_ENCRYPTION_KEYS_FILE), the new key first");
	if (batch < 0 || batch > BATCH_MAX)
		return client_invalid(c, "batch", "invalid batch %d: expected 1 to %d rows", batch,
		                      BATCH_MAX);
	PGresult *r = db_exec(c->conn, &c->err,
	                      "SELECT (SELECT count(*) FROM cairn.runs) + "
	                      "(SELECT count(*) FROM cairn.steps) + "
	                      "(SELECT count(*) FROM cairn.signals) + "
	                      "(SELECT count(*) FROM cairn.events) + "
	                      "(SELECT count(*) FROM cairn.schedules)",
	                      0, NULL);
	if (!r)
		return client_db_fail(c);
	s.rows_total = db_get_i64(r, 0, 0);
	PQclear(r);
	int rc = CAIRN_OK;
	for (size_t i = 0; i < NTABLES && !rc; i++)
		rc = reencrypt_table(c, &TABLES[i], batch ? batch : BATCH_DEFAULT, progress, arg,
		                     &s);
	if (out)
		*out = s;
	return rc == CAIRN_EDB ? client_db_fail(c) : rc;
}
