/*
 * test_encrypt.c - payloads encrypted at rest (CAIRN_ENCRYPTION_KEYS): a
 * run's input, output, step results and signal payloads are stored sealed
 * (a pg_dump of the database holds none of them); a client without the key,
 * or with other bytes under its id, sees that one field unreadable and
 * why, the rest of the run as usual; a worker without it leaves the run alone until
 * one with it takes over; `cairn reencrypt` moves everything to a new key;
 * bad keys are refused without being shown. Against real workers running
 * the `order` demo, which waits for its approval.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cairn.h"
#include "seal.h"
#include "support.h"

#define K1      "q8RzO2m0mJbQm2Q0p7Z8pU4cK5tJz6k2lY0vX3wN1aE="
#define K2      "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
#define KEYS1   "k1=" K1
#define KEYS21  "k2=" K2 ",k1=" K1
#define SECRET  "SECRET-4242"
#define ORDER   "{\"item\": \"" SECRET "-book\", \"amount\": 12}"
#define APPROVE "{\"approved\": true, \"by\": \"" SECRET "-bob\"}"

static const char *db;
static char worker_log[64];

static void setup(void)
{
	db = tdb_new_migrated_shards(16);
	tlog_file(worker_log);
}

TestSuite(encryption, .init = setup);

static cairn_client *client_with(const char *keys)
{
	cairn_client *c;
	cr_assert_eq(cairn_client_open(db, &c), CAIRN_OK, "%s", cairn_client_errmsg(c));
	cr_assert_eq(cairn_client_set_keys(c, keys), CAIRN_OK, "%s", cairn_client_errmsg(c));
	return c;
}

static int port;

static pid_t worker_with(const char *keys_setting)
{
	return tworker_start(db, &port, worker_log, keys_setting, "CAIRN_POLL_INTERVAL=100ms",
	                     NULL);
}

static int64_t enqueue_order(cairn_client *c)
{
	cairn_enqueue_opts o = {.input = ORDER};
	cairn_enqueued e;
	cr_assert_eq(cairn_enqueue(c, "order", &o, &e), CAIRN_OK, "%s", cairn_client_errmsg(c));
	return e.id;
}

static void wait_sql(const char *what, const char *fmt, int64_t id)
{
	PGconn *pg = tdb_connect(db);
	char *log = NULL;
	int ok = tdb_wait_at_leastf(pg, 1, 30000, fmt, id);
	if (!ok)
		log = tfile_read(worker_log);
	PQfinish(pg);
	cr_assert(ok, "%s never happened; worker log:\n%s", what, log ? log : "");
}

/* An order run of c's, approved and completed by the worker running now. */
static int64_t completed_order(cairn_client *c)
{
	int64_t id = enqueue_order(c);
	wait_sql("the order's wait for its approval",
	         "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64 " AND status = 'waiting'",
	         id);
	cr_assert_eq(cairn_signal(c, id, "approval", APPROVE), CAIRN_OK, "%s",
	             cairn_client_errmsg(c));
	cr_assert_eq(cairn_run_wait(c, id, 30000), CAIRN_OK, "%s", cairn_client_errmsg(c));
	return id;
}

/* `cairn ARGS...` with CAIRN_ENCRYPTION_KEYS=keys (NULL: unset): exit code. */
static int cli_keys(const char *keys, char **out, char **err, const char *a, const char *b,
                    const char *c)
{
	char dburl[2200], k[256];
	snprintf(dburl, sizeof dburl, "DATABASE_URL=%s", db);
	snprintf(k, sizeof k, "CAIRN_ENCRYPTION_KEYS=%s", keys ? keys : "");
	const char *argv[] = {tbin("cairn"), a, b, c, NULL};
	const char *env[] = {dburl, keys ? k : "CAIRN_ENCRYPTION_KEYS",
	                     "CAIRN_ENCRYPTION_KEYS_FILE", NULL};
	return trun(argv, env, out, err);
}

/* The whole test database as pg_dump writes it (caller frees). */
static char *dump(void)
{
	static const char *const bins[] = {"/usr/lib/postgresql/15/bin/pg_dump", "pg_dump"};
	const char *bin = access(bins[0], X_OK) == 0 ? bins[0] : bins[1];
	const char *argv[] = {bin, "--data-only", "--schema=cairn", "--dbname", db, NULL};
	char *out = NULL, *err = NULL;
	int rc = trun(argv, NULL, &out, &err);
	cr_assert_eq(rc, 0, "pg_dump failed: %s", err ? err : "");
	free(err);
	return out;
}

Test(encryption, a_dump_of_the_database_holds_no_plaintext_of_an_encrypted_run)
{
	pid_t w = worker_with("CAIRN_ENCRYPTION_KEYS=" KEYS1);
	cairn_client *c = client_with(KEYS1);
	int64_t id = completed_order(c);
	cairn_run *r;
	cr_assert_eq(cairn_run_get(c, id, &r), CAIRN_OK, "%s", cairn_client_errmsg(c));
	cr_assert_str_eq(r->status, "completed", "%s", r->error ? r->error : "");
	cr_assert(strstr(r->output, SECRET "-bob"), "the client decrypts: %s", r->output);
	cr_assert_eq(r->locked, 0);
	cr_assert_geq(r->nsteps, 3);
	cairn_run_free(r);
	/* Children tell their parent their outcome in a signal, and the
	 * parent publishes an event: both sealed too. */
	cairn_enqueue_opts fo = {.input = "{\"n\": 3}"};
	cairn_enqueued fe;
	cr_assert_eq(cairn_enqueue(c, "fanout", &fo, &fe), CAIRN_OK);
	cr_assert_eq(cairn_run_wait(c, fe.id, 30000), CAIRN_OK, "%s", cairn_client_errmsg(c));
	char *progress;
	cr_assert_eq(cairn_event_get(c, fe.id, "progress", 0, NULL, &progress), CAIRN_OK, "%s",
	             cairn_client_errmsg(c));
	cr_assert(strstr(progress, "\"done\""), "%s", progress);
	free(progress);
	char *all = dump();
	cr_assert(strstr(all, "cairn:enc:k1:"), "the values are in the dump, sealed:\n%s", all);
	cr_assert_null(strstr(all, SECRET), "plaintext in the dump:\n%s", strstr(all, SECRET));
	cr_assert_null(strstr(all, "charge_id"), "a step result in plaintext");
	cr_assert_null(strstr(all, "\"done\""), "an event in plaintext");
	cr_assert_null(strstr(all, "\"status\": \"completed\""), "a child's outcome in plaintext");
	free(all);

	/* Without the key: the fields are locked and say which key. */
	cairn_client *blind = client_with(NULL);
	cr_assert_eq(cairn_run_get(blind, id, &r), CAIRN_OK, "%s", cairn_client_errmsg(blind));
	cr_assert_eq(r->locked, CAIRN_LOCKED_INPUT | CAIRN_LOCKED_OUTPUT);
	cr_assert_eq(r->unauthentic, 0);
	cr_assert_str_eq(r->locked_key, "k1");
	cr_assert_null(r->input);
	cr_assert_null(r->output);
	cr_assert_eq(r->steps[0].locked, CAIRN_LOCKED_OUTPUT);
	cairn_run_free(r);
	char ref[32], *out = NULL, *err = NULL;
	snprintf(ref, sizeof ref, "%" PRId64, id);
	cr_assert_eq(cli_keys(NULL, &out, &err, "status", ref, NULL), 0, "%s", err);
	cr_assert(strstr(out, "input      unreadable: it is encrypted with key \"k1\", which is "
	                      "not configured") &&
	              !strstr(out, SECRET),
	          "%s", out);
	free(out);
	free(err);
	cr_assert_eq(cli_keys(NULL, &out, &err, "result", ref, NULL), 1);
	cr_assert(strstr(err, "encrypted with key \"k1\""), "%s", err);
	free(out);
	free(err);
	cr_assert_eq(cli_keys(KEYS1, &out, &err, "result", ref, NULL), 0, "%s", err);
	cr_assert(strstr(out, SECRET "-book"), "%s", out);
	free(out);
	free(err);
	cairn_client_free(blind);
	cairn_client_free(c);
	tworker_stop(w, SIGTERM, 30000);
}

Test(encryption, a_worker_without_the_key_leaves_the_run_alone_until_one_with_it_takes_over)
{
	pid_t blind = worker_with("CAIRN_ENCRYPTION_KEYS=");
	cairn_client *c = client_with(KEYS1);
	int64_t id = enqueue_order(c);
	wait_sql("the keyless worker's deferral",
	         "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
	         " AND status = 'pending' AND error LIKE 'waiting for a worker that has "
	         "encryption key \"k1\"%%'",
	         id);
	cr_assert(tfile_wait(worker_log, "left a run alone", 10000));
	cr_assert_geq(tmetric(port, "cairn_runs_locked_total"), 1);
	cr_assert_eq(tworker_stop(blind, SIGTERM, 30000), 0);
	pid_t w = worker_with("CAIRN_ENCRYPTION_KEYS=" KEYS1);
	/* The approval is due at once: the worker with the key claims the run
	 * with it, before the deferred start comes round again. */
	cr_assert_eq(cairn_signal(c, id, "approval", APPROVE), CAIRN_OK, "%s",
	             cairn_client_errmsg(c));
	cr_assert_eq(cairn_run_wait(c, id, 30000), CAIRN_OK, "%s", cairn_client_errmsg(c));
	cairn_run *r;
	cr_assert_eq(cairn_run_get(c, id, &r), CAIRN_OK);
	cr_assert_str_eq(r->status, "completed", "%s", r->error ? r->error : "");
	cr_assert_eq(r->attempt, 1, "leaving it alone cost no attempt");
	cairn_run_free(r);
	cairn_client_free(c);
	tworker_stop(w, SIGTERM, 30000);
}

/* Values of the database not sealed under key id (plaintext included). */
static int64_t not_under(PGconn *pg, const char *id)
{
	char sql[1024];
	snprintf(sql, sizeof sql,
	         "SELECT (SELECT count(*) FROM cairn.runs r, LATERAL (VALUES (r.input::text), "
	         "  (r.output::text), ('\"' || r.error || '\"')) v(t) "
	         "  WHERE t IS NOT NULL AND t NOT LIKE '\"cairn:enc:%s:%%') + "
	         "(SELECT count(*) FROM cairn.steps s, LATERAL (VALUES (s.output::text), "
	         "  ('\"' || s.error || '\"')) v(t) "
	         "  WHERE t IS NOT NULL AND t NOT LIKE '\"cairn:enc:%s:%%') + "
	         "(SELECT count(*) FROM cairn.signals WHERE payload::text NOT LIKE "
	         "  '\"cairn:enc:%s:%%')",
	         id, id, id);
	return tdb_int(pg, sql);
}

Test(encryption, reencrypt_moves_every_value_to_the_current_key_and_old_values_read_meanwhile)
{
	pid_t w = worker_with("CAIRN_ENCRYPTION_KEYS=" KEYS1);
	cairn_client *c1 = client_with(KEYS1);
	int64_t done = completed_order(c1);
	tworker_stop(w, SIGTERM, 30000);
	for (int i = 0; i < 4; i++)
		enqueue_order(c1);
	cairn_client *plain = client_with(NULL);
	cairn_enqueue_opts o = {.input = "{\"plain\": true}"};
	cairn_enqueued e;
	cr_assert_eq(cairn_enqueue(plain, "order", &o, &e), CAIRN_OK);
	char *out = NULL, *err = NULL;
	cr_assert_eq(cli_keys(KEYS1, &out, &err, "schedule", "create", "nightly"), 2,
	             "no --cron: %s", err);
	free(out);
	free(err);
	char dburl[2200];
	snprintf(dburl, sizeof dburl, "DATABASE_URL=%s", db);
	const char *mk[] = {
	    tbin("cairn"), "schedule",   "create", "nightly", "--cron",
	    "@daily",      "--workflow", "noop",   "--input", "{\"s\": \"" SECRET "\"}",
	    NULL};
	const char *mkenv[] = {dburl, "CAIRN_ENCRYPTION_KEYS=" KEYS1, NULL};
	cr_assert_eq(trun(mk, mkenv, &out, &err), 0, "%s", err);
	free(out);
	free(err);
	PGconn *pg = tdb_connect(db);
	cr_assert_eq(tdb_int(pg, "SELECT count(*) FROM cairn.schedules WHERE input::text LIKE "
	                         "'\"cairn:enc:k1:%'"),
	             1, "the schedule's input is sealed");
	int64_t before = not_under(pg, "k2");
	cr_assert_gt(before, 10);

	/* With only the new key, old values stay (and are counted); the
	 * plaintext one moves. */
	cr_assert_eq(cli_keys("k2=" K2, &out, &err, "reencrypt", "--json", NULL), 1, "%s", err);
	cr_assert(strstr(out, "\"rewritten\":\t1,") && strstr(err, "left as they are"), "%s\n%s",
	          out, err);
	free(out);
	free(err);
	cr_assert_eq(not_under(pg, "k2"), before - 1);

	/* The current key first, the old one after: everything moves, in
	 * batches of two rows; a second pass finds nothing to do. */
	cr_assert_eq(cli_keys(KEYS21, &out, &err, "reencrypt", "--batch", "2"), 0, "%s", err);
	cr_assert(strstr(out, "0 under keys not configured"), "%s", out);
	free(out);
	free(err);
	cr_assert_eq(not_under(pg, "k2"), 0);
	cr_assert_eq(tdb_int(pg, "SELECT count(*) FROM cairn.schedules WHERE input::text NOT LIKE "
	                         "'\"cairn:enc:k2:%'"),
	             0, "the schedule's input moved too");
	cr_assert_eq(cli_keys(KEYS21, &out, &err, "reencrypt", "--json", NULL), 0, "%s", err);
	cr_assert(strstr(out, "\"rewritten\":\t0,"), "%s", out);
	free(out);
	free(err);
	/* On a terminal (script(1) gives it one) it draws a progress bar. */
	char cmd[512];
	snprintf(cmd, sizeof cmd, "%s reencrypt --batch 3", tbin("cairn"));
	const char *tty[] = {"/usr/bin/script", "-qec", cmd, "/dev/null", NULL};
	const char *env[] = {dburl, "CAIRN_ENCRYPTION_KEYS=" KEYS21, NULL};
	cr_assert_eq(trun(tty, env, &out, &err), 0, "%s%s", out, err);
	cr_assert(strstr(out, "\r[") && strstr(out, "] 100% "), "%s", out);
	free(out);
	free(err);

	/* The old key is no longer needed; it no longer opens anything. */
	cairn_client *c2 = client_with("k2=" K2);
	cairn_run *r;
	cr_assert_eq(cairn_run_get(c2, done, &r), CAIRN_OK, "%s", cairn_client_errmsg(c2));
	cr_assert_eq(r->locked, 0);
	cr_assert(strstr(r->output, SECRET "-bob"), "%s", r->output);
	for (size_t i = 0; i < r->nsteps; i++)
		cr_assert_eq(r->steps[i].locked, 0, "step %zu", i);
	cairn_run_free(r);
	cr_assert_eq(cairn_run_get(c1, done, &r), CAIRN_OK);
	cr_assert_str_eq(r->locked_key, "k2");
	cairn_run_free(r);
	PQfinish(pg);
	cairn_client_free(c2);
	cairn_client_free(plain);
	cairn_client_free(c1);
}

Test(encryption, bad_keys_are_refused_by_name_and_never_shown)
{
	char *out = NULL, *err = NULL;
	cr_assert_eq(cli_keys("k1=" K1 ",k1=" K2, &out, &err, "list", NULL, NULL), 2);
	cr_assert(strstr(err, "CAIRN_ENCRYPTION_KEYS") && strstr(err, "appears twice") &&
	              !strstr(err, "q8RzO2m0"),
	          "%s", err);
	free(out);
	free(err);
	cr_assert_eq(cli_keys(NULL, &out, &err, "reencrypt", NULL, NULL), 2);
	cr_assert(strstr(err, "CAIRN_ENCRYPTION_KEYS"), "%s", err);
	free(out);
	free(err);
	cr_assert_eq(
	    cli_keys(KEYS1, &out, &err, "enqueue", "order", "--input=\"cairn:enc:k1:AAAA\""), 2);
	cr_assert(strstr(err, "--input") && strstr(err, "reserved for encrypted values"), "%s",
	          err);
	free(out);
	free(err);

	char dburl[2200];
	snprintf(dburl, sizeof dburl, "DATABASE_URL=%s", db);
	const char *check[] = {tbin("cairn-worker"), "--check-config", NULL};
	const char *bad_env[] = {dburl, "CAIRN_ENCRYPTION_KEYS=k1=c2hvcnQ=", NULL};
	cr_assert_neq(trun(check, bad_env, &out, &err), 0);
	cr_assert(strstr(err, "CAIRN_ENCRYPTION_KEYS") && strstr(err, "\"k1\"") &&
	              !strstr(err, "c2hvcnQ"),
	          "%s", err);
	free(out);
	free(err);
	const char *flag[] = {tbin("cairn-worker"), "--encryption-keys", KEYS1, "--check-config",
	                      NULL};
	const char *env[] = {dburl, NULL};
	cr_assert_neq(trun(flag, env, &out, &err), 0);
	cr_assert(strstr(err, "command line"), "%s", err);
	free(out);
	free(err);
	const char *good_env[] = {dburl, "CAIRN_ENCRYPTION_KEYS=" KEYS21, NULL};
	cr_assert_eq(trun(check, good_env, &out, &err), 0, "%s", err);
	cr_assert(strstr(out, "CAIRN_ENCRYPTION_KEYS=k2,k1 (keys not shown)") &&
	              !strstr(out, "q8RzO2m0"),
	          "%s", out);
	free(out);
	free(err);
}

/* ------------------------------------------------ values that do not open */

/* K2's bytes under the id k1: the right id, the wrong key. */
#define WRONG1 "k1=" K2

/* `cairn ARGS...` (up to four) with CAIRN_ENCRYPTION_KEYS=keys: exit code. */
static int cli4(const char *keys, char **out, char **err, const char *a, const char *b,
                const char *c, const char *d)
{
	char dburl[2200], k[256];
	snprintf(dburl, sizeof dburl, "DATABASE_URL=%s", db);
	snprintf(k, sizeof k, "CAIRN_ENCRYPTION_KEYS=%s", keys);
	const char *argv[] = {tbin("cairn"), a, b, c, d, NULL};
	const char *env[] = {dburl, k, "CAIRN_ENCRYPTION_KEYS_FILE", NULL};
	return trun(argv, env, out, err);
}

/* The line of text that holds needle (caller frees), failing the test if none. */
static char *line_of(const char *text, const char *needle)
{
	const char *p = strstr(text, needle);
	cr_assert(p, "no \"%s\" in %s", needle, text);
	while (p > text && p[-1] != '\n')
		p--;
	return strndup(p, strcspn(p, "\n"));
}

/* The object of --json output (caller deletes), failing the test if none. */
static cJSON *parsed(const char *out)
{
	cJSON *j = cJSON_Parse(out);
	cr_assert(j, "not JSON: %s", out);
	return j;
}

/* o.unreadable.field: its cause, checked to come with key and a reason. */
static const char *unreadable_cause(const cJSON *o, const char *field, const char *key)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(o, "unreadable"), field);
	char *text = cJSON_PrintUnformatted(o);
	cr_assert(cJSON_IsObject(f), "no unreadable.%s in %s", field, text);
	const cJSON *k = cJSON_GetObjectItemCaseSensitive(f, "key");
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(f, "cause");
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(f, "reason");
	cr_assert(cJSON_IsString(k) && strcmp(k->valuestring, key) == 0, "%s", text);
	cr_assert(cJSON_IsString(r) && strstr(r->valuestring, key), "%s", text);
	cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, field)), "%s", text);
	free(text);
	return cJSON_IsString(c) ? c->valuestring : "";
}

/* The run of a `cairn list --json` whose id is id. */
static const cJSON *listed(const cJSON *list, int64_t id)
{
	const cJSON *r;
	cJSON_ArrayForEach(r, list)
	{
		const cJSON *i = cJSON_GetObjectItemCaseSensitive(r, "id");
		if (cJSON_IsNumber(i) && (int64_t)i->valuedouble == id)
			return r;
	}
	cr_assert_fail("run %" PRId64 " is not in the list", id);
	return NULL;
}

Test(encryption, a_run_whose_input_does_not_open_is_shown_with_that_field_unreadable_and_why)
{
	cairn_client *c = client_with(KEYS1);
	int64_t id = enqueue_order(c);
	cairn_client_free(c);
	char ref[32], *out = NULL, *err = NULL;
	snprintf(ref, sizeof ref, "%" PRId64, id);

	/* The right id, other bytes: the run is there, its input is not. */
	cr_assert_eq(cli4(WRONG1, &out, &err, "status", ref, NULL, NULL), 0, "%s", err);
	cr_assert(strstr(out, "workflow   order") && strstr(out, "status     pending"), "%s", out);
	cr_assert(strstr(out, "input      unreadable: it does not authenticate under key \"k1\""),
	          "%s", out);
	cr_assert(!strstr(out, "not configured") && !strstr(out, SECRET), "%s", out);
	free(out);
	free(err);
	cr_assert_eq(cli4(WRONG1, &out, &err, "status", ref, "--json", NULL), 0, "%s", err);
	cJSON *j = parsed(out);
	cr_assert_str_eq(unreadable_cause(j, "input", "k1"), "not_authentic");
	cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "status")->valuestring, "pending");
	cJSON_Delete(j);
	free(out);
	free(err);
	cr_assert_eq(cli4(WRONG1, &out, &err, "list", "--json", NULL, NULL), 0, "%s", err);
	j = parsed(out);
	cr_assert_str_eq(unreadable_cause(listed(j, id), "input", "k1"), "not_authentic");
	cJSON_Delete(j);
	free(out);
	free(err);

	/* The right key, the stored value altered: the same. */
	PGconn *pg = tdb_connect(db);
	char sql[512];
	snprintf(sql, sizeof sql,
	         "UPDATE cairn.runs SET input = to_jsonb(overlay(input #>> '{}' placing "
	         "CASE WHEN substr(input #>> '{}', 30, 1) = 'A' THEN 'B' ELSE 'A' END "
	         "FROM 30 FOR 1)) WHERE id = %" PRId64,
	         id);
	tdb_exec(pg, sql);
	PQfinish(pg);
	cr_assert_eq(cli4(KEYS1, &out, &err, "status", ref, "--json", NULL), 0, "%s", err);
	j = parsed(out);
	cr_assert_str_eq(unreadable_cause(j, "input", "k1"), "not_authentic");
	cJSON_Delete(j);
	free(out);
	free(err);

	/* Without the key at all: the same shape, another cause. */
	cr_assert_eq(cli4("k2=" K2, &out, &err, "status", ref, NULL, NULL), 0, "%s", err);
	cr_assert(strstr(out, "input      unreadable: it is encrypted with key \"k1\", which is "
	                      "not configured"),
	          "%s", out);
	free(out);
	free(err);
	cr_assert_eq(cli4("k2=" K2, &out, &err, "list", "--json", NULL, NULL), 0, "%s", err);
	j = parsed(out);
	cr_assert_str_eq(unreadable_cause(listed(j, id), "input", "k1"), "missing_key");
	cJSON_Delete(j);
	free(out);
	free(err);
}

/* The token of the worker's HTTP API (/v1/). */
#define API_TOKEN "encrypt-test-token-0123456789"

Test(encryption, each_field_that_does_not_open_says_why_in_status_and_the_http_api)
{
	/* The client writes the input and the approval under k1, the worker
	 * the output and the step results under k2. */
	pid_t w = worker_with("CAIRN_ENCRYPTION_KEYS=" KEYS21);
	cairn_client *c = client_with(KEYS1);
	int64_t id = completed_order(c);
	cairn_client_free(c);
	tworker_stop(w, SIGTERM, 30000);

	/* Read with k2's id on K1's bytes and no k1: the input's key is
	 * missing, the output and the steps' results do not authenticate. */
	const char *keys = "k2=" K1;
	char ref[32], *out = NULL, *err = NULL;
	snprintf(ref, sizeof ref, "%" PRId64, id);
	cr_assert_eq(cli4(keys, &out, &err, "status", ref, "--json", NULL), 0, "%s", err);
	cJSON *j = parsed(out);
	cr_assert_str_eq(unreadable_cause(j, "input", "k1"), "missing_key");
	cr_assert_str_eq(unreadable_cause(j, "output", "k2"), "not_authentic");
	cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "status")->valuestring, "completed");
	const cJSON *steps = cJSON_GetObjectItemCaseSensitive(j, "journal");
	cr_assert_geq(cJSON_GetArraySize(steps), 3);
	cr_assert_str_eq(unreadable_cause(cJSON_GetArrayItem(steps, 0), "output", "k2"),
	                 "not_authentic");
	cJSON_Delete(j);
	free(out);
	free(err);
	cr_assert_eq(cli4(keys, &out, &err, "status", ref, NULL, NULL), 0, "%s", err);
	cr_assert(strstr(out, "input      unreadable: it is encrypted with key \"k1\", which is "
	                      "not configured") &&
	              strstr(out, "output     unreadable: it does not authenticate under key "
	                          "\"k2\"") &&
	              strstr(out, "charge") && !strstr(out, SECRET),
	          "%s", out);
	free(out);
	free(err);

	/* GET /v1/runs/ID of a worker with those keys: the same document. */
	w = tworker_start(db, &port, worker_log, "CAIRN_ENCRYPTION_KEYS=k2=" K1,
	                  "CAIRN_HTTP_TOKEN=" API_TOKEN, "CAIRN_POLL_INTERVAL=100ms", NULL);
	char path[64];
	snprintf(path, sizeof path, "/v1/runs/%" PRId64, id);
	char *body = NULL;
	long st = thttp_auth(port, "GET", path, "Bearer " API_TOKEN, &body, NULL);
	cr_assert_eq(st, 200, "GET %s: %ld %s", path, st, body);
	j = parsed(body);
	cr_assert_str_eq(unreadable_cause(j, "input", "k1"), "missing_key");
	cr_assert_str_eq(unreadable_cause(j, "output", "k2"), "not_authentic");
	cr_assert(!strstr(body, SECRET), "%s", body);
	cJSON_Delete(j);
	free(body);
	tworker_stop(w, SIGTERM, 30000);
}

Test(encryption, reencrypt_tells_values_under_a_missing_key_from_values_that_do_not_authenticate)
{
	/* One run under k1, one under k3; reencrypt holds k1 with other bytes
	 * and no k3. */
	cairn_client *c1 = client_with(KEYS1);
	int64_t wrong = enqueue_order(c1);
	cairn_client_free(c1);
	cairn_client *c3 = client_with("k3=" K1);
	enqueue_order(c3);
	cairn_client_free(c3);
	const char *keys = "k2=" K2 ",k1=" K2;
	char *out = NULL, *err = NULL;
	cr_assert_eq(cli4(keys, &out, &err, "reencrypt", NULL, NULL, NULL), 1, "%s", err);
	cr_assert(strstr(out, "1 under keys not configured (k3)") &&
	              strstr(out, "1 that do not authenticate (under k1)"),
	          "%s", out);
	/* Each gets its own advice: add k3; k1 is there, so check its bytes. */
	char want[128];
	snprintf(want, sizeof want, "run %" PRId64 " input", wrong);
	cr_assert(strstr(err, "1 value is under keys that are not configured (k3): add them"), "%s",
	          err);
	cr_assert(strstr(err, "1 value does not authenticate under keys that are configured "
	                      "(k1)") &&
	              strstr(err, want) && strstr(err, "same bytes"),
	          "%s", err);
	char *line = line_of(err, "does not authenticate");
	cr_assert(!strstr(line, "add"), "adding a key that is there does not help: %s", line);
	free(line);
	free(out);
	free(err);
	cr_assert_eq(cli4(keys, &out, &err, "reencrypt", "--json", NULL, NULL), 1, "%s", err);
	cJSON *j = parsed(out);
	cr_assert_eq(cJSON_GetObjectItemCaseSensitive(j, "missing_key")->valuedouble, 1);
	cr_assert_eq(cJSON_GetObjectItemCaseSensitive(j, "unreadable")->valuedouble, 1);
	char *text = cJSON_PrintUnformatted(j);
	cr_assert(strstr(text, "\"missing_keys\":[\"k3\"]") &&
	              strstr(text, "\"unreadable_keys\":[\"k1\"]") && strstr(text, want),
	          "%s", text);
	free(text);
	cJSON_Delete(j);
	free(out);
	free(err);
}

/*
 * Before the client refused \u0000, one with keys sealed "a\u0000b" as
 * given, and the worker read it as "a": a noop run completed with "a".
 * Such a value, written before, now fails its run saying why, and nothing
 * is cut short.
 */
Test(encryption, an_input_sealed_with_a_nul_escape_fails_its_run_instead_of_being_cut_short)
{
	cairn_client *c = client_with(KEYS1);
	cairn_enqueue_opts o = {.input = "\"a\\u0000b\""};
	cairn_enqueued e;
	cr_assert_eq(cairn_enqueue(c, "noop", &o, &e), CAIRN_EINVAL, "the client sealed it");
	cr_assert(strstr(cairn_client_errmsg(c), "input holds \\u0000"), "%s",
	          cairn_client_errmsg(c));
	o.input = "null";
	cr_assert_eq(cairn_enqueue(c, "noop", &o, &e), CAIRN_OK, "%s", cairn_client_errmsg(c));
	/* What a client of before wrote: the same value, sealed. */
	seal_keys *k;
	char why[256];
	cr_assert_eq(seal_keys_parse(KEYS1, &k, why, sizeof why), 0, "%s", why);
	buf sealed = BUF_INIT;
	cr_assert_eq(seal_value(k, SEAL_RUN_INPUT, "\"a\\u0000b\"", &sealed), 0);
	seal_keys_free(k);
	PGconn *pg = tdb_connect(db);
	char id[24];
	snprintf(id, sizeof id, "%" PRId64, e.id);
	const char *p[] = {buf_str(&sealed), id};
	PGresult *r = PQexecParams(pg, "UPDATE cairn.runs SET input = $1::jsonb WHERE id = $2", 2,
	                           NULL, p, NULL, NULL, 0);
	cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s", PQerrorMessage(pg));
	PQclear(r);
	PQfinish(pg);
	buf_free(&sealed);
	pid_t w = worker_with("CAIRN_ENCRYPTION_KEYS=" KEYS1);
	cr_assert_eq(cairn_run_wait(c, e.id, 30000), CAIRN_OK, "%s", cairn_client_errmsg(c));
	cairn_run *run;
	cr_assert_eq(cairn_run_get(c, e.id, &run), CAIRN_OK, "%s", cairn_client_errmsg(c));
	cr_assert_str_eq(run->status, "failed", "output %s", run->output ? run->output : "null");
	cr_assert(run->error && strstr(run->error, "cannot load the run: the input holds \\u0000 "
	                                           "(the NUL character) at byte 3"),
	          "%s", run->error ? run->error : "(no error)");
	cr_assert_null(run->output);
	cairn_run_free(run);
	cairn_enqueued_clear(&e);
	tworker_stop(w, SIGTERM, 30000);
	cairn_client_free(c);
}
