/* test_cli.c - the cairn CLI's data-entry and inspection commands, run as
 * real processes against a real PostgreSQL, and the client API calls they
 * are built on, called directly. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cairn.h"
#include "support.h"

static int64_t count(const char *db, const char *sql)
{
	PGconn *c = tdb_connect(db);
	int64_t n = tdb_int(c, sql);
	PQfinish(c);
	return n;
}

static int64_t rows_written(const char *db)
{
	return count(
	    db, "SELECT (SELECT count(*) FROM cairn.runs) + (SELECT count(*) FROM cairn.messages) "
	        "+ (SELECT count(*) FROM cairn.signals)");
}

static int64_t enqueue(const char *db, const char *wf, const char *key)
{
	char *out, *err;
	int rc = tcli(db, &out, &err, "enqueue", wf, "--key", key, NULL);
	cr_assert_eq(rc, 0, "enqueue: %s", err);
	int64_t id = strtoll(out, NULL, 10);
	free(out);
	free(err);
	return id;
}

Test(enqueue, prints_id_and_writes_the_run_due_to_start_in_its_shard)
{
	const char *db = tdb_new_migrated();
	char *out, *err;
	cr_assert_eq(tcli(db, &out, &err, "enqueue", "order", "--key", "o-1", "--input",
	                  "{\"item\": \"book\", \"amount\": 12}", NULL),
	             0, "%s", err);
	int64_t id = strtoll(out, NULL, 10);
	cr_assert_gt(id, 0);
	char sql[512];
	snprintf(
	    sql, sizeof sql,
	    "SELECT count(*) FROM cairn.runs r "
	    "WHERE r.id = %lld AND r.status = 'pending' AND r.start_at = r.scheduled_at "
	    "AND r.start_at <= now() AND r.input->>'item' = 'book' AND r.shard_group = 'default' "
	    "AND NOT EXISTS (SELECT 1 FROM cairn.messages)",
	    (long long)id);
	cr_assert_eq(count(db, sql), 1);
	/* shard = FNV-1a-64("o-1") mod 4096, computed independently here. */
	unsigned long long h = 0xcbf29ce484222325ULL;
	for (const char *p = "o-1"; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
	snprintf(sql, sizeof sql, "SELECT shard FROM cairn.runs WHERE id = %lld", (long long)id);
	cr_assert_eq(count(db, sql), (int64_t)(h % 4096));
	free(out);
	free(err);
}

Test(enqueue, same_workflow_and_key_returns_the_same_run)
{
	const char *db = tdb_new_migrated();
	int64_t a = enqueue(db, "noop", "k1");
	char *out, *err;
	cr_assert_eq(tcli(db, &out, &err, "enqueue", "noop", "--key", "k1", NULL), 0);
	cr_assert_eq(strtoll(out, NULL, 10), a);
	cr_assert(strstr(err, "already existed"), "%s", err);
	free(out);
	free(err);
	cr_assert_eq(count(db, "SELECT count(*) FROM cairn.runs WHERE start_at IS NOT NULL"), 1);
	/* Another workflow with the same key is another run. */
	cr_assert_neq(enqueue(db, "other", "k1"), a);
	cr_assert_eq(tcli(db, &out, NULL, "enqueue", "noop", "--key", "k1", "--json", NULL), 0);
	cJSON *j = cJSON_Parse(out);
	cr_assert(j && cJSON_IsTrue(cJSON_GetObjectItem(j, "existed")), "%s", out);
	cJSON_Delete(j);
	free(out);
}

Test(enqueue, without_key_generates_unique_keys)
{
	const char *db = tdb_new_migrated();
	char *o1, *o2;
	cr_assert_eq(tcli(db, &o1, NULL, "enqueue", "noop", NULL), 0);
	cr_assert_eq(tcli(db, &o2, NULL, "enqueue", "noop", NULL), 0);
	cr_assert_neq(strtoll(o1, NULL, 10), strtoll(o2, NULL, 10));
	free(o1);
	free(o2);
	cr_assert_eq(count(db, "SELECT count(DISTINCT key) FROM cairn.runs"), 2);
}

Test(enqueue, delay_and_at_schedule_the_start)
{
	const char *db = tdb_new_migrated();
	cr_assert_eq(tcli(db, NULL, NULL, "enqueue", "noop", "--key", "d", "--delay", "1h", NULL),
	             0);
	cr_assert_eq(
	    count(db, "SELECT count(*) FROM cairn.runs WHERE start_at "
	              "BETWEEN now() + interval '59 minutes' AND now() + interval '61 minutes'"),
	    1);
	cr_assert_eq(tcli(db, NULL, NULL, "enqueue", "noop", "--key", "a", "--at",
	                  "2030-01-02T03:04:05Z", NULL),
	             0);
	cr_assert_eq(count(db, "SELECT count(*) FROM cairn.runs r "
	                       "WHERE r.key = 'a' AND r.start_at = '2030-01-02T03:04:05Z' "
	                       "AND r.scheduled_at = r.start_at"),
	             1);
}

Test(enqueue, input_from_file_and_max_attempts_and_group)
{
	const char *db = tdb_new_migrated();
	char path[] = "/tmp/cairn-input-XXXXXX";
	int fd = mkstemp(path);
	cr_assert(fd >= 0);
	FILE *f = fdopen(fd, "w");
	fputs("{\"n\": 7}", f);
	fclose(f);
	char arg[64];
	snprintf(arg, sizeof arg, "@%s", path);
	cr_assert_eq(tcli(db, NULL, NULL, "enqueue", "noop", "--key", "f", "--input", arg,
	                  "--max-attempts", "5", "--group", "billing", NULL),
	             0);
	unlink(path);
	cr_assert_eq(count(db, "SELECT count(*) FROM cairn.runs WHERE (input->>'n')::int = 7 "
	                       "AND max_attempts = 5 AND shard_group = 'billing'"),
	             1);
}

/* Each bad input: exit 2, an error naming the argument and the value, nothing written. */
static void rejects(const char *db, const char *expect, const char *const *argv)
{
	char *out, *err;
	int rc = tcli_argv(db, &out, &err, argv);
	cr_assert_eq(rc, 2, "%s %s: exit %d, stderr: %s", argv[0], argv[1], rc, err);
	cr_assert(strstr(err, expect), "stderr does not mention \"%s\": %s", expect, err);
	free(out);
	free(err);
	cr_assert_eq(rows_written(db), 0, "a rejected input wrote rows");
}

Test(enqueue, rejects_bad_input_and_writes_nothing)
{
	const char *db = tdb_new_migrated();
	rejects(db, "byte 10",
	        (const char *[]){"enqueue", "noop", "--input", "{\"item\": }", NULL});
	rejects(db, "unknown option \"--bogus\"",
	        (const char *[]){"enqueue", "noop", "--bogus", NULL});
	rejects(db, "invalid duration \"10parsecs\"",
	        (const char *[]){"enqueue", "noop", "--delay", "10parsecs", NULL});
	rejects(db, "--at: invalid time \"tomorrow\"",
	        (const char *[]){"enqueue", "noop", "--at", "tomorrow", NULL});
	rejects(db, "workflow must not be empty", (const char *[]){"enqueue", "", NULL});
	rejects(db, "key must not be empty",
	        (const char *[]){"enqueue", "noop", "--key", "", NULL});
	rejects(db, "control character",
	        (const char *[]){"enqueue", "noop", "--key", "a\x01", NULL});
	rejects(db, "0x0a", (const char *[]){"enqueue", "no\nop", NULL});
	rejects(db, "--max-attempts",
	        (const char *[]){"enqueue", "noop", "--max-attempts", "0", NULL});
	rejects(db, "cannot be used together",
	        (const char *[]){"enqueue", "noop", "--delay", "1s", "--at", "2030-01-01T00:00:00Z",
	                         NULL});
	rejects(db, "needs a value", (const char *[]){"enqueue", "noop", "--key", NULL});
	rejects(db, "expected exactly one WORKFLOW", (const char *[]){"enqueue", NULL});
}

Test(enqueue, rejects_input_larger_than_the_maximum)
{
	const char *db = tdb_new_migrated();
	size_t n = 1024 * 1024 + 16;
	char *big = malloc(n + 3);
	big[0] = '"';
	memset(big + 1, 'x', n);
	big[n + 1] = '"';
	big[n + 2] = '\0';
	char path[] = "/tmp/cairn-big-XXXXXX";
	int fd = mkstemp(path);
	FILE *f = fdopen(fd, "w");
	fputs(big, f);
	fclose(f);
	free(big);
	char arg[64];
	snprintf(arg, sizeof arg, "@%s", path);
	rejects(db, "larger than the maximum of 1048576 bytes",
	        (const char *[]){"enqueue", "noop", "--input", arg, NULL});
	unlink(path);
	setenv("CAIRN_MAX_PAYLOAD", "10", 1);
	rejects(db, "maximum of 10 bytes",
	        (const char *[]){"enqueue", "noop", "--input", "\"0123456789abc\"", NULL});
	setenv("CAIRN_MAX_PAYLOAD", "lots", 1);
	rejects(db, "CAIRN_MAX_PAYLOAD: invalid size \"lots\"",
	        (const char *[]){"enqueue", "noop", NULL});
	unsetenv("CAIRN_MAX_PAYLOAD");
}

Test(enqueue, before_migrate_says_to_migrate)
{
	const char *db = tdb_new();
	char *err;
	cr_assert_eq(tcli(db, NULL, &err, "enqueue", "noop", NULL), 1);
	cr_assert(strstr(err, "cairn migrate"), "%s", err);
	free(err);
}

Test(signal, is_buffered_with_a_wake_message)
{
	const char *db = tdb_new_migrated();
	int64_t id = enqueue(db, "order", "s1");
	char *out, *err;
	cr_assert_eq(tcli(db, &out, &err, "signal", "order/s1", "approval", "--input",
	                  "{\"ok\": true}", NULL),
	             0, "%s", err);
	free(out);
	free(err);
	char sql[256];
	snprintf(sql, sizeof sql,
	         "SELECT count(*) FROM cairn.signals WHERE run_id = %lld AND name = 'approval' "
	         "AND payload->>'ok' = 'true' AND consumed_by_seq IS NULL",
	         (long long)id);
	cr_assert_eq(count(db, sql), 1);
	cr_assert_eq(count(db, "SELECT count(*) FROM cairn.messages WHERE kind = 'signal'"), 1);
}

Test(signal, rejects_bad_payload_unknown_run_and_finished_run)
{
	const char *db = tdb_new_migrated();
	int64_t id = enqueue(db, "order", "s2");
	char ids[24], *err;
	snprintf(ids, sizeof ids, "%lld", (long long)id);
	cr_assert_eq(tcli(db, NULL, &err, "signal", ids, "approval", "--input", "{nope", NULL), 2);
	cr_assert(strstr(err, "--input") && strstr(err, "not valid JSON"), "%s", err);
	free(err);
	cr_assert_eq(tcli(db, NULL, &err, "signal", ids, "bad name", NULL), 2);
	cr_assert(strstr(err, "signal name"), "%s", err);
	free(err);
	cr_assert_eq(tcli(db, NULL, &err, "signal", "999999", "approval", NULL), 3);
	cr_assert(strstr(err, "not found"), "%s", err);
	free(err);
	cr_assert_eq(count(db, "SELECT count(*) FROM cairn.signals"), 0);
	cr_assert_eq(tcli(db, NULL, NULL, "cancel", ids, NULL), 0);
	cr_assert_eq(tcli(db, NULL, &err, "signal", ids, "approval", NULL), 1);
	cr_assert(strstr(err, "already finished"), "%s", err);
	free(err);
	cr_assert_eq(count(db, "SELECT count(*) FROM cairn.signals"), 0);
}

Test(cancel, pending_run_is_cancelled_at_once)
{
	const char *db = tdb_new_migrated();
	enqueue(db, "noop", "c1");
	char *out;
	cr_assert_eq(tcli(db, &out, NULL, "cancel", "noop/c1", NULL), 0);
	free(out);
	cr_assert_eq(count(db, "SELECT count(*) FROM cairn.runs WHERE status = 'cancelled' AND "
	                       "finished_at IS NOT NULL"),
	             1);
	cr_assert_eq(count(db, "SELECT count(*) FROM cairn.messages"), 0);
	char *err;
	cr_assert_eq(tcli(db, NULL, &err, "cancel", "noop/c1", NULL), 1);
	cr_assert(strstr(err, "already finished"), "%s", err);
	free(err);
}

Test(cancel, started_run_gets_request_and_cancel_message)
{
	const char *db = tdb_new_migrated();
	int64_t id = enqueue(db, "noop", "c2");
	PGconn *c = tdb_connect(db);
	char sql[256];
	snprintf(sql, sizeof sql,
	         "UPDATE cairn.runs SET status = 'sleeping', attempt = 1 WHERE id = %lld",
	         (long long)id);
	tdb_exec(c, sql);
	cr_assert_eq(tcli(db, NULL, NULL, "cancel", "noop/c2", NULL), 0);
	cr_assert_eq(
	    tdb_int(
	        c,
	        "SELECT count(*) FROM cairn.runs WHERE cancel_requested AND status = 'sleeping'"),
	    1);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.messages WHERE kind = 'cancel'"), 1);
	PQfinish(c);
}

Test(status, shows_run_fields_and_journal_in_text_and_json)
{
	const char *db = tdb_new_migrated();
	int64_t id = enqueue(db, "order", "st1");
	PGconn *c = tdb_connect(db);
	char sql[512];
	snprintf(
	    sql, sizeof sql,
	    "INSERT INTO cairn.steps (run_id, part, seq, name, kind, status, output, finished_at) "
	    "VALUES (%lld, %lld, 0, 'charge', 'step', 'completed', '{\"charged\": 12}', now())",
	    (long long)id, (long long)tdb_run_part(c, id));
	tdb_exec(c, sql);
	PQfinish(c);
	char *out, *err;
	cr_assert_eq(tcli(db, &out, &err, "status", "order/st1", NULL), 0, "%s", err);
	cr_assert(strstr(out, "workflow   order") && strstr(out, "pending") &&
	              strstr(out, "charge") && strstr(out, "journal (1 step)"),
	          "%s", out);
	free(out);
	free(err);
	char ids[24];
	snprintf(ids, sizeof ids, "%lld", (long long)id);
	cr_assert_eq(tcli(db, &out, NULL, "status", ids, "--json", NULL), 0);
	cJSON *j = cJSON_Parse(out);
	cr_assert(j, "not JSON: %s", out);
	cr_assert_str_eq(cJSON_GetObjectItem(j, "workflow")->valuestring, "order");
	cr_assert_str_eq(cJSON_GetObjectItem(j, "status")->valuestring, "pending");
	cJSON *journal = cJSON_GetObjectItem(j, "journal");
	cr_assert_eq(cJSON_GetArraySize(journal), 1);
	cJSON *s0 = cJSON_GetArrayItem(journal, 0);
	cr_assert_str_eq(cJSON_GetObjectItem(s0, "name")->valuestring, "charge");
	cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(s0, "output"), "charged")->valueint,
	             12);
	cJSON_Delete(j);
	free(out);
}

Test(status, unknown_run_exits_3_and_bad_ref_exits_2)
{
	const char *db = tdb_new_migrated();
	char *err;
	cr_assert_eq(tcli(db, NULL, &err, "status", "12345", NULL), 3);
	cr_assert(strstr(err, "run \"12345\" not found"), "%s", err);
	free(err);
	cr_assert_eq(tcli(db, NULL, &err, "status", "noop/none", NULL), 3);
	free(err);
	cr_assert_eq(tcli(db, NULL, &err, "status", "abc", NULL), 2);
	cr_assert(strstr(err, "invalid run \"abc\""), "%s", err);
	free(err);
}

Test(list, filters_by_workflow_and_status_with_limit)
{
	const char *db = tdb_new_migrated();
	enqueue(db, "noop", "l1");
	enqueue(db, "noop", "l2");
	enqueue(db, "order", "l3");
	cr_assert_eq(tcli(db, NULL, NULL, "cancel", "noop/l1", NULL), 0);
	char *out;
	cr_assert_eq(tcli(db, &out, NULL, "list", "--json", NULL), 0);
	cJSON *j = cJSON_Parse(out);
	cr_assert(cJSON_IsArray(j) && cJSON_GetArraySize(j) == 3, "%s", out);
	cJSON_Delete(j);
	free(out);
	cr_assert_eq(tcli(db, &out, NULL, "list", "--workflow", "noop", "--status", "pending",
	                  "--json", NULL),
	             0);
	j = cJSON_Parse(out);
	cr_assert_eq(cJSON_GetArraySize(j), 1, "%s", out);
	cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(j, 0), "key")->valuestring, "l2");
	cJSON_Delete(j);
	free(out);
	cr_assert_eq(tcli(db, &out, NULL, "list", "--limit", "1", NULL), 0);
	cr_assert(strstr(out, "l3") && !strstr(out, "l2"), "%s", out);
	free(out);
	char *err;
	cr_assert_eq(tcli(db, NULL, &err, "list", "--status", "done", NULL), 2);
	cr_assert(strstr(err, "invalid status \"done\""), "%s", err);
	free(err);
}

Test(cli, help_describes_every_command_and_exit_codes)
{
	char *out;
	cr_assert_eq(tcli(NULL, &out, NULL, "--help", NULL), 0);
	cr_assert(strstr(out, "Exit codes"), "%s", out);
	free(out);
	const char *cmds[] = {"migrate", "enqueue", "signal", "cancel",
	                      "retry",   "status",  "result", "list"};
	for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
		cr_assert_eq(tcli(NULL, &out, NULL, cmds[i], "--help", NULL), 0, "%s --help",
		             cmds[i]);
		cr_assert(strstr(out, "usage: cairn ") && strstr(out, "--db"), "%s", out);
		free(out);
	}
	char *err;
	cr_assert_eq(tcli(NULL, NULL, &err, "frobnicate", NULL), 2);
	cr_assert(strstr(err, "unknown command \"frobnicate\""), "%s", err);
	free(err);
	/* No database is a usage error too, naming the setting. */
	cr_assert_eq(tcli(NULL, NULL, &err, "list", NULL), 2);
	cr_assert(strstr(err, "DATABASE_URL"), "%s", err);
	free(err);
}

Test(cli, db_flag_overrides_environment)
{
	const char *db = tdb_new_migrated();
	char *out, *err;
	cr_assert_eq(tcli("host=/nonexistent dbname=x", &out, &err, "list", "--db", db, NULL), 0,
	             "%s", err);
	free(out);
	free(err);
}

/* A connection string libpq cannot parse is quoted in its message: the
 * CLI shows it without the password. */
Test(cli, a_malformed_database_url_is_shown_without_its_password)
{
	const char *urls[] = {"postgresql://u:SECRETPW6@[::1:5432/cairn",
	                      "postgresql://u:SECRET%zzPW@h/db",
	                      "host=h password=SECRETKV bogus=1"};
	for (size_t i = 0; i < sizeof urls / sizeof *urls; i++) {
		char *out, *err;
		cr_assert_eq(tcli(NULL, &out, &err, "list", "--db", urls[i], NULL), 1, "%s", err);
		cr_assert(!strstr(err, "SECRET") && !strstr(out, "SECRET"), "%s", err);
		free(out);
		free(err);
	}
}

/* A duration may have decimals, when they make whole milliseconds. */
Test(cli, a_delay_may_have_decimals)
{
	char *out, *err;
	const char *db = tdb_new_migrated();
	cr_assert_eq(
	    tcli(db, &out, &err, "enqueue", "noop", "--key", "later", "--delay", "1.5h", NULL), 0,
	    "%s", err);
	free(out);
	free(err);
	PGconn *c = tdb_connect(db);
	cr_assert_eq(tdb_int(c, "SELECT round(extract(epoch FROM start_at - created_at) / 60) "
	                        "FROM cairn.runs WHERE key = 'later'"),
	             90);
	PQfinish(c);
}

/* ------------------------------------------------ the client API directly */

static cairn_client *client(const char *db)
{
	cairn_client *c;
	int rc = cairn_client_open(db, &c);
	cr_assert_eq(rc, CAIRN_OK, "open: %s", cairn_client_errmsg(c));
	return c;
}

/* Ends the run with status, output and error as a worker would. */
static void finish_run(const char *db, int64_t id, const char *status, const char *output,
                       const char *error)
{
	PGconn *c = tdb_connect(db);
	char id_text[24];
	snprintf(id_text, sizeof id_text, "%lld", (long long)id);
	const char *p[] = {id_text, status, output, error};
	PGresult *r = PQexecParams(c,
	                           "UPDATE cairn.runs SET status = $2, output = $3::jsonb, "
	                           "error = $4, attempt = 1, started_at = now(), "
	                           "finished_at = now(), start_at = NULL, updated_at = now() "
	                           "WHERE id = $1",
	                           4, NULL, p, NULL, NULL, 0);
	cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s", PQerrorMessage(c));
	cr_assert_str_eq(PQcmdTuples(r), "1");
	PQclear(r);
	tdb_exec(c, "DELETE FROM cairn.messages");
	PQfinish(c);
}

Test(client_api, delay_and_at_together_are_rejected_naming_both_and_write_nothing)
{
	const char *db = tdb_new_migrated();
	cairn_client *c = client(db);
	cairn_enqueue_opts o = {.key = "both", .delay_ms = 5000, .at_unix_ms = 1900000000000};
	cairn_enqueued res;
	cr_assert_eq(cairn_enqueue(c, "noop", &o, &res), CAIRN_EINVAL);
	const char *msg = cairn_client_errmsg(c);
	cr_assert(strstr(msg, "delay_ms") && strstr(msg, "at_unix_ms") &&
	              strstr(msg, "cannot be used together"),
	          "%s", msg);
	cr_assert_str_eq(cairn_client_errfield(c), "delay_ms");
	cairn_enqueued_clear(&res);
	/* The batch refuses the whole batch for one such run, and says which. */
	cairn_enqueue_opts batch[2] = {{.key = "fine"}, o};
	cairn_enqueued out[2];
	cr_assert_eq(cairn_enqueue_batch(c, "noop", 2, batch, out), CAIRN_EINVAL);
	cr_assert(strstr(cairn_client_errmsg(c), "opts[1]"), "%s", cairn_client_errmsg(c));
	cr_assert_eq(rows_written(db), 0, "a rejected enqueue wrote rows");
	/* Either one alone is fine. */
	o.at_unix_ms = 0;
	cr_assert_eq(cairn_enqueue(c, "noop", &o, &res), CAIRN_OK, "%s", cairn_client_errmsg(c));
	cairn_client_free(c);
}

Test(client_api, each_rejected_option_names_its_field_in_errfield_and_message)
{
	const char *db = tdb_new_migrated();
	cairn_client *c = client(db);
	cairn_client_set_max_payload(c, 10);
	static const struct {
		const char *workflow;
		cairn_enqueue_opts o;
		const char *field, *says;
	} cases[] = {
	    {"", {0}, "workflow", "workflow must not be empty"},
	    {"no op", {0}, "workflow", "invalid workflow \"no op\""},
	    {"noop", {.key = ""}, "key", "key must not be empty"},
	    {"noop", {.key = "a\x01z"}, "key", "invalid key \"a\\x01z\": byte 2"},
	    {"noop", {.group = "bad group"}, "group", "invalid group \"bad group\""},
	    {"noop", {.input = "{\"a\": }"}, "input", "input is not valid JSON"},
	    {"noop", {.input = "\"0123456789abc\""}, "input", "input is 15 bytes"},
	    {"noop", {.max_attempts = 1001}, "max_attempts", "invalid max_attempts 1001"},
	    {"noop", {.max_attempts = -1}, "max_attempts", "from 1 to 1000"},
	    {"noop", {.delay_ms = -5}, "delay_ms", "invalid delay_ms -5"},
	    {"noop", {.at_unix_ms = -1}, "at_unix_ms", "invalid at_unix_ms -1"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		cairn_enqueued res;
		cr_assert_eq(cairn_enqueue(c, cases[i].workflow, &cases[i].o, &res), CAIRN_EINVAL,
		             "case %zu", i);
		cr_assert_str_eq(cairn_client_errfield(c), cases[i].field, "case %zu", i);
		cr_assert(strstr(cairn_client_errmsg(c), cases[i].says), "case %zu: %s", i,
		          cairn_client_errmsg(c));
	}
	cr_assert_eq(rows_written(db), 0, "a rejected enqueue wrote rows");
	int64_t id;
	cr_assert_eq(cairn_run_resolve(c, "x/", &id), CAIRN_EINVAL);
	cr_assert_str_eq(cairn_client_errfield(c), "run");
	cr_assert_eq(cairn_signal(c, 1, "bad name", NULL), CAIRN_EINVAL);
	cr_assert_str_eq(cairn_client_errfield(c), "signal");
	cr_assert_eq(cairn_signal(c, 1, "ok", "{"), CAIRN_EINVAL);
	cr_assert_str_eq(cairn_client_errfield(c), "payload");
	cairn_run *runs;
	size_t n;
	cr_assert_eq(cairn_run_list(c, &(cairn_list_filter){.limit = 10001}, &runs, &n),
	             CAIRN_EINVAL);
	cr_assert_str_eq(cairn_client_errfield(c), "limit");
	/* Errors that are not about one input carry no field. */
	cr_assert_eq(cairn_run_resolve(c, "999999", &id), CAIRN_ENOTFOUND);
	cr_assert_null(cairn_client_errfield(c));
	cairn_client_free(c);
}

Test(client_api, enqueue_of_an_existing_run_returns_its_status_and_result)
{
	const char *db = tdb_new_migrated();
	cairn_client *c = client(db);
	cairn_enqueued res;
	cairn_enqueue_opts o = {.key = "k1"};
	cr_assert_eq(cairn_enqueue(c, "order", &o, &res), CAIRN_OK);
	cr_assert(!res.existed);
	cr_assert_str_eq(res.status, "pending");
	cr_assert_null(res.output);
	cr_assert_null(res.error);
	int64_t done = res.id;
	/* Existing but not finished: its status, no result yet. */
	cr_assert_eq(cairn_enqueue(c, "order", &o, &res), CAIRN_OK);
	cr_assert(res.existed && res.id == done);
	cr_assert_str_eq(res.status, "pending");
	cr_assert_null(res.output);

	finish_run(db, done, "completed", "{\"total\": 12}", NULL);
	cr_assert_eq(cairn_enqueue(c, "order", &o, &res), CAIRN_OK);
	cr_assert(res.existed && res.id == done);
	cr_assert_str_eq(res.status, "completed");
	cr_assert(res.output, "no output for a completed run");
	cJSON *j = cJSON_Parse(res.output);
	cr_assert_eq(cJSON_GetObjectItem(j, "total")->valueint, 12, "%s", res.output);
	cJSON_Delete(j);
	cr_assert_null(res.error);
	cairn_enqueued_clear(&res);
	cr_assert_null(res.output);
	cr_assert_eq(res.id, done, "clear keeps the id");

	cairn_enqueue_opts f = {.key = "k2"};
	cr_assert_eq(cairn_enqueue(c, "order", &f, &res), CAIRN_OK);
	finish_run(db, res.id, "failed", NULL, "card declined");
	cr_assert_eq(cairn_enqueue(c, "order", &f, &res), CAIRN_OK);
	cr_assert_str_eq(res.status, "failed");
	cr_assert_null(res.output);
	cr_assert_str_eq(res.error, "card declined");
	cairn_enqueued_clear(&res);

	/* The batch reports the status of each run but no results: nothing to free. */
	cairn_enqueue_opts batch[3] = {{.key = "k1"}, {.key = "k2"}, {.key = "k3"}};
	cairn_enqueued out[3];
	cr_assert_eq(cairn_enqueue_batch(c, "order", 3, batch, out), CAIRN_OK);
	cr_assert_str_eq(out[0].status, "completed");
	cr_assert_str_eq(out[1].status, "failed");
	cr_assert_str_eq(out[2].status, "pending");
	cr_assert(out[0].existed && out[1].existed && !out[2].existed);
	for (int i = 0; i < 3; i++)
		cr_assert(!out[i].output && !out[i].error, "batch result %d has a result", i);
	cr_assert_eq(count(db, "SELECT count(*) FROM cairn.runs"), 3);
	cairn_client_free(c);
}

/* Runs of cairn.runs read by sequential scans in this database, once the
 * other sessions in it have ended. */
static int64_t runs_seq_read(PGconn *pg)
{
	int64_t n = tdb_stat_after_sessions(pg, NULL,
	                                    "SELECT seq_tup_read FROM pg_stat_user_tables "
	                                    "WHERE relid = 'cairn.runs'::regclass",
	                                    10000);
	cr_assert(n >= 0, "another session of the test database did not end");
	return n;
}

/* A batch that names existing runs finds each by its key: with 100,000 runs
 * of the workflow, it must not read them all (a join the planner made of the
 * lookup once hashed every one). */
Test(client_api, a_batch_finds_existing_runs_by_key_without_reading_every_run_of_the_workflow)
{
	enum { OLD = 100000, N = 1000 };
	if (tdb_on_citus())
		cr_skip_test(
		    "on Citus the rows of cairn.runs and their statistics are the worker "
		    "nodes': the coordinator's pg_stat_user_tables, which this test reads, "
		    "counts none of them");
	const char *db = tdb_new_migrated();
	PGconn *pg = tdb_connect(db);
	tdb_intf(pg,
	         "WITH i AS (INSERT INTO cairn.runs (id, workflow, key, shard_group, shard, input, "
	         "                                   status, finished_at) "
	         "  SELECT cairn.new_run_id(g %% 64), 'order', 'old-' || g, 'default', g %% 64, "
	         "'{}', 'completed', now() "
	         "  FROM generate_series(1, %d) g RETURNING 1) SELECT count(*) FROM i",
	         OLD);
	tdb_exec(pg, "ANALYZE cairn.runs");
	int64_t before = runs_seq_read(pg);
	static cairn_enqueue_opts o[N];
	static char keys[N][24];
	static cairn_enqueued out[N];
	for (int i = 0; i < N; i++) {
		/* Every other one exists. */
		snprintf(keys[i], sizeof keys[i], i % 2 ? "new-%d" : "old-%d", i + 1);
		o[i] = (cairn_enqueue_opts){.key = keys[i]};
	}
	cairn_client *c = client(db);
	cr_assert_eq(cairn_enqueue_batch(c, "order", N, o, out), CAIRN_OK, "%s",
	             cairn_client_errmsg(c));
	cairn_client_free(c);
	for (int i = 0; i < N; i++) {
		cr_assert_eq(out[i].existed, i % 2 == 0, "%s", keys[i]);
		cr_assert_str_eq(out[i].status, i % 2 ? "pending" : "completed", "%s", keys[i]);
	}
	int64_t read = runs_seq_read(pg) - before;
	cr_assert_lt(read, OLD, "the batch read %" PRId64 " runs in sequential scans", read);
	cr_assert_eq(count(db, "SELECT count(*) FROM cairn.runs"), OLD + N / 2);
	PQfinish(pg);
}

/* A batch of new runs is one plain INSERT (no ON CONFLICT): its runs come
 * back in the order given, whatever order the insert returned them in. A
 * key that exists, or that the batch names twice, makes that insert fail,
 * and the batch is sent again the way that finds existing runs. */
Test(client_api, a_batch_of_new_runs_comes_back_in_its_order_and_a_key_given_twice_is_one_run)
{
	enum { N = 300 };
	const char *db = tdb_new_migrated();
	cairn_client *c = client(db);
	static cairn_enqueue_opts o[N];
	static char keys[N][24];
	static cairn_enqueued out[N], again[N];
	for (int i = 0; i < N; i++) {
		snprintf(keys[i], sizeof keys[i], "n-%d", (i * 7919) % N); /* not sorted */
		o[i] = (cairn_enqueue_opts){.key = keys[i], .input = "{}"};
	}
	cr_assert_eq(cairn_enqueue_batch(c, "order", N, o, out), CAIRN_OK, "%s",
	             cairn_client_errmsg(c));
	/* The runs by key, read once (a read per key was a new session each,
	 * on Citus a statement over every node). */
	PGconn *pg = tdb_connect(db);
	PGresult *r = PQexec(pg, "SELECT key, id FROM cairn.runs");
	cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(pg));
	cr_assert_eq(PQntuples(r), N);
	for (int i = 0; i < N; i++) {
		cr_assert_not(out[i].existed, "%s", keys[i]);
		cr_assert_str_eq(out[i].status, "pending");
		cr_assert(i == 0 || out[i].id > out[i - 1].id, "run %d out of order", i);
		int64_t stored = 0;
		for (int row = 0; row < N; row++)
			if (strcmp(PQgetvalue(r, row, 0), keys[i]) == 0)
				stored = strtoll(PQgetvalue(r, row, 1), NULL, 10);
		cr_assert_eq(stored, out[i].id, "%s has another run", keys[i]);
	}
	PQclear(r);
	PQfinish(pg);
	/* Sent again: each finds its run. */
	cr_assert_eq(cairn_enqueue_batch(c, "order", N, o, again), CAIRN_OK);
	for (int i = 0; i < N; i++)
		cr_assert(again[i].existed && again[i].id == out[i].id, "%s", keys[i]);
	/* One key twice in a batch: one run, named by both. */
	cairn_enqueue_opts twice[3] = {{.key = "t-1"}, {.key = "t-2"}, {.key = "t-1"}};
	cairn_enqueued t[3];
	cr_assert_eq(cairn_enqueue_batch(c, "order", 3, twice, t), CAIRN_OK, "%s",
	             cairn_client_errmsg(c));
	cr_assert_eq(t[0].id, t[2].id);
	cr_assert_neq(t[0].id, t[1].id);
	cr_assert_eq(count(db, "SELECT count(*) FROM cairn.runs"), N + 2);
	cairn_client_free(c);
}

/* ------------------------------------------- idempotent start in the CLI */

Test(enqueue, again_for_a_finished_run_prints_its_status_and_result)
{
	const char *db = tdb_new_migrated();
	int64_t id = enqueue(db, "order", "o-7");
	finish_run(db, id, "completed", "{\"total\": 12}", NULL);
	char *out, *err;
	cr_assert_eq(tcli(db, &out, &err, "enqueue", "order", "--key", "o-7", NULL), 0, "%s", err);
	cr_assert_eq(strtoll(out, NULL, 10), id);
	cr_assert(strstr(err, "already existed") && strstr(err, "status completed") &&
	              strstr(err, "\"total\""),
	          "%s", err);
	free(out);
	free(err);
	cr_assert_eq(tcli(db, &out, NULL, "enqueue", "order", "--key", "o-7", "--json", NULL), 0);
	cJSON *j = cJSON_Parse(out);
	cr_assert(j, "not JSON: %s", out);
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(j, "existed")), "%s", out);
	cr_assert_eq(cJSON_GetObjectItem(j, "id")->valuedouble, (double)id);
	cr_assert_str_eq(cJSON_GetObjectItem(j, "status")->valuestring, "completed");
	cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "output"), "total")->valueint, 12,
	             "%s", out);
	cr_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "error")), "%s", out);
	cJSON_Delete(j);
	free(out);
	/* A new run: pending, no result. */
	cr_assert_eq(tcli(db, &out, NULL, "enqueue", "order", "--key", "o-8", "--json", NULL), 0);
	j = cJSON_Parse(out);
	cr_assert_str_eq(cJSON_GetObjectItem(j, "status")->valuestring, "pending", "%s", out);
	cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(j, "existed")), "%s", out);
	cr_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "output")), "%s", out);
	cJSON_Delete(j);
	free(out);
	cr_assert_eq(count(db, "SELECT count(*) FROM cairn.runs WHERE start_at IS NOT NULL"), 1,
	             "only o-8 is to start");
}

Test(enqueue, wait_on_an_existing_finished_run_returns_its_result_without_a_worker)
{
	const char *db = tdb_new_migrated();
	int64_t ok = enqueue(db, "order", "w-ok"), bad = enqueue(db, "order", "w-bad");
	finish_run(db, ok, "completed", "{\"total\": 12}", NULL);
	finish_run(db, bad, "failed", NULL, "card declined");
	/* No worker runs: only the stored result can answer, and the long
	 * timeout would show if it waited instead. */
	char *out, *err;
	int64_t t0 = tnow_ms();
	cr_assert_eq(tcli(db, &out, &err, "enqueue", "order", "--key", "w-ok", "--wait",
	                  "--timeout", "1h", NULL),
	             0, "%s", err);
	cr_assert(strstr(out, "\"total\"") && strstr(out, "12"), "%s", out);
	cr_assert(strstr(err, "already existed"), "%s", err);
	free(out);
	free(err);
	cr_assert_eq(tcli(db, &out, &err, "enqueue", "order", "--key", "w-bad", "--wait",
	                  "--timeout", "1h", "--json", NULL),
	             1, "%s", err);
	cJSON *j = cJSON_Parse(out);
	cr_assert(j, "not JSON: %s", out);
	cr_assert_str_eq(cJSON_GetObjectItem(j, "status")->valuestring, "failed");
	cr_assert_str_eq(cJSON_GetObjectItem(j, "error")->valuestring, "card declined");
	cJSON_Delete(j);
	cr_assert(strstr(err, "card declined"), "%s", err);
	free(out);
	free(err);
	cr_assert_lt(tnow_ms() - t0, 20000, "--wait waited for a run that had finished");
	/* An existing run that has not finished is still waited for. */
	enqueue(db, "order", "w-open");
	cr_assert_eq(tcli(db, NULL, &err, "enqueue", "order", "--key", "w-open", "--wait",
	                  "--timeout", "100ms", NULL),
	             4, "%s", err);
	cr_assert(strstr(err, "did not finish in time"), "%s", err);
	free(err);
}

Test(enqueue, rejected_values_name_the_flag_value_and_rule_and_exit_2)
{
	const char *db = tdb_new_migrated();
	rejects(db, "WORKFLOW: invalid workflow \"no op\"",
	        (const char *[]){"enqueue", "no op", NULL});
	rejects(db, "--key: invalid key \"a\\x01\": byte 2 is a control character",
	        (const char *[]){"enqueue", "noop", "--key", "a\x01", NULL});
	rejects(db, "--group: invalid group \"bad group\"",
	        (const char *[]){"enqueue", "noop", "--group", "bad group", NULL});
	rejects(db, "--input: input is not valid JSON: syntax error at byte 10",
	        (const char *[]){"enqueue", "noop", "--input", "{\"item\": }", NULL});
	rejects(db, "--max-attempts: invalid max_attempts 1001: expected an integer from 1 to 1000",
	        (const char *[]){"enqueue", "noop", "--max-attempts", "1001", NULL});
	rejects(db, "--max-attempts: invalid number \"0\": expected a positive integer",
	        (const char *[]){"enqueue", "noop", "--max-attempts", "0", NULL});
	rejects(db, "--limit: invalid limit 20000: expected an integer from 1 to 10000",
	        (const char *[]){"list", "--limit", "20000", NULL});
	rejects(db, "--workflow: invalid workflow \"a/b\"",
	        (const char *[]){"list", "--workflow", "a/b", NULL});
	rejects(db, "--status: invalid status \"done\"",
	        (const char *[]){"list", "--status", "done", NULL});
	rejects(db, "RUN: invalid run \"x/\"", (const char *[]){"cancel", "x/", NULL});
}

Test(signal, rejected_name_and_payload_name_their_argument)
{
	const char *db = tdb_new_migrated();
	enqueue(db, "order", "s3");
	char *err;
	cr_assert_eq(tcli(db, NULL, &err, "signal", "order/s3", "bad name", NULL), 2);
	cr_assert(strstr(err, "NAME: invalid signal name \"bad name\""), "%s", err);
	free(err);
	cr_assert_eq(tcli(db, NULL, &err, "signal", "order/s3", "ok", "--input", "{nope", NULL), 2);
	cr_assert(strstr(err, "--input: signal payload is not valid JSON"), "%s", err);
	free(err);
	cr_assert_eq(count(db, "SELECT count(*) FROM cairn.signals"), 0);
}

/* stdout of a --json command, parsed; fails the test unless it is exactly
 * one JSON object. */
static cJSON *json_object(const char *out)
{
	const char *end = NULL;
	cJSON *o = cJSON_ParseWithOpts(out, &end, 0);
	cr_assert(o && cJSON_IsObject(o), "not a JSON object: %s", out);
	while (*end == '\n' || *end == ' ')
		end++;
	cr_assert_eq(*end, '\0', "more than one JSON document: %s", out);
	return o;
}

static double json_num(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	cr_assert(cJSON_IsNumber(v), "\"%s\" is not a number", k);
	return v->valuedouble;
}

static const char *json_str(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	cr_assert(cJSON_IsString(v), "\"%s\" is not a string", k);
	return v->valuestring;
}

Test(migrate, json_reports_the_versions_applied_and_the_schema_before_and_after)
{
	const char *db = tdb_new();
	char *out, *err;
	cr_assert_eq(tcli(db, &out, &err, "migrate", "--json", NULL), 0, "%s", err);
	cJSON *o = json_object(out);
	const cJSON *applied = cJSON_GetObjectItemCaseSensitive(o, "applied");
	cr_assert(cJSON_IsArray(applied), "%s", out);
	int n = cJSON_GetArraySize(applied);
	cr_assert_gt(n, 10, "%s", out);
	/* In order; a number may be missing (one taken by a branch that has not
	 * landed yet). */
	int last = 0;
	for (int i = 0; i < n; i++) {
		int v = cJSON_GetArrayItem(applied, i)->valueint;
		cr_assert_gt(v, last, "%s", out);
		last = v;
	}
	cr_assert_eq(cJSON_GetArrayItem(applied, 0)->valueint, 1, "%s", out);
	cr_assert_eq(json_num(o, "version_before"), 0, "%s", out);
	cr_assert_eq(json_num(o, "version_after"), last, "%s", out);
	cr_assert_eq(count(db, "SELECT max(version) FROM cairn.schema_migrations"), last);
	cJSON_Delete(o);
	free(out);
	free(err);

	/* Again: nothing applied, the same version before and after. */
	cr_assert_eq(tcli(db, &out, &err, "migrate", "--json", NULL), 0, "%s", err);
	o = json_object(out);
	cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(o, "applied")), 0);
	cr_assert_eq(json_num(o, "version_before"), last, "%s", out);
	cr_assert_eq(json_num(o, "version_after"), last, "%s", out);
	cJSON_Delete(o);
	free(out);
	free(err);

	/* An error is the text on stderr with its exit code, nothing on stdout. */
	cr_assert_eq(tcli(db, &out, &err, "migrate", "--json", "--shards", "7", NULL), 1);
	cr_assert_str_empty(out);
	cr_assert(strstr(err, "shards_per_group is 4096"), "%s", err);
	free(out);
	free(err);
}

Test(signal, json_says_whether_the_run_was_waiting_for_it_or_it_is_buffered)
{
	const char *db = tdb_new_migrated();
	int64_t id = enqueue(db, "order", "sj1");
	char *out, *err;
	cr_assert_eq(tcli(db, &out, &err, "signal", "order/sj1", "approval", "--json", NULL), 0,
	             "%s", err);
	cJSON *o = json_object(out);
	cr_assert_eq(json_num(o, "id"), (double)id);
	cr_assert_str_eq(json_str(o, "signal"), "approval");
	cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(o, "delivered")), "%s", out);
	cJSON_Delete(o);
	free(out);
	free(err);

	/* The run awaits "approval" (as a worker leaves it): delivered. */
	PGconn *c = tdb_connect(db);
	char sql[512];
	snprintf(sql, sizeof sql,
	         "UPDATE cairn.runs SET status = 'waiting', attempt = 1 WHERE id = %lld; "
	         "INSERT INTO cairn.steps (run_id, part, seq, name, kind, status) "
	         "VALUES (%lld, %lld, 0, 'approval', 'signal', 'waiting')",
	         (long long)id, (long long)id, (long long)tdb_run_part(c, id));
	tdb_exec(c, sql);
	PQfinish(c);
	cr_assert_eq(tcli(db, &out, &err, "signal", "order/sj1", "other", "--json", NULL), 0, "%s",
	             err);
	o = json_object(out);
	cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(o, "delivered")), "%s", out);
	cJSON_Delete(o);
	free(out);
	free(err);
	cr_assert_eq(
	    tcli(db, &out, &err, "signal", "order/sj1", "approval", "--input", "1", "--json", NULL),
	    0, "%s", err);
	o = json_object(out);
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "delivered")), "%s", out);
	cr_assert_str_eq(json_str(o, "signal"), "approval");
	cJSON_Delete(o);
	free(out);
	free(err);

	cr_assert_eq(tcli(db, &out, &err, "signal", "999999", "approval", "--json", NULL), 3);
	cr_assert_str_empty(out);
	cr_assert(strstr(err, "not found"), "%s", err);
	free(out);
	free(err);
}

Test(cancel, json_gives_the_status_right_after_it)
{
	const char *db = tdb_new_migrated();
	int64_t a = enqueue(db, "noop", "cj1"), b = enqueue(db, "noop", "cj2");
	char *out, *err;
	cr_assert_eq(tcli(db, &out, &err, "cancel", "noop/cj1", "--json", NULL), 0, "%s", err);
	cJSON *o = json_object(out);
	cr_assert_eq(json_num(o, "id"), (double)a);
	cr_assert_str_eq(json_str(o, "status"), "cancelled");
	cJSON_Delete(o);
	free(out);
	free(err);

	/* A started run keeps its status until its next durable call. */
	PGconn *c = tdb_connect(db);
	char sql[256];
	snprintf(sql, sizeof sql,
	         "UPDATE cairn.runs SET status = 'sleeping', attempt = 1 WHERE id = %lld",
	         (long long)b);
	tdb_exec(c, sql);
	PQfinish(c);
	cr_assert_eq(tcli(db, &out, &err, "cancel", "noop/cj2", "--json", NULL), 0, "%s", err);
	o = json_object(out);
	cr_assert_eq(json_num(o, "id"), (double)b);
	cr_assert_str_eq(json_str(o, "status"), "sleeping");
	cJSON_Delete(o);
	free(out);
	free(err);

	cr_assert_eq(tcli(db, &out, &err, "cancel", "noop/cj1", "--json", NULL), 1);
	cr_assert_str_empty(out);
	cr_assert(strstr(err, "already finished"), "%s", err);
	free(out);
	free(err);
}

Test(retry, json_gives_the_status_right_after_it)
{
	const char *db = tdb_new_migrated();
	int64_t id = enqueue(db, "noop", "rj1");
	char *out, *err;
	cr_assert_eq(tcli(db, &out, &err, "retry", "noop/rj1", "--json", NULL), 1);
	cr_assert_str_empty(out);
	cr_assert(strstr(err, "only failed or cancelled runs"), "%s", err);
	free(out);
	free(err);
	cr_assert_eq(tcli(db, NULL, NULL, "cancel", "noop/rj1", NULL), 0);
	cr_assert_eq(tcli(db, &out, &err, "retry", "noop/rj1", "--json", NULL), 0, "%s", err);
	cJSON *o = json_object(out);
	cr_assert_eq(json_num(o, "id"), (double)id);
	cr_assert_str_eq(json_str(o, "status"), "pending");
	cJSON_Delete(o);
	free(out);
	free(err);
	cr_assert_eq(count(db, "SELECT count(*) FROM cairn.runs WHERE status = 'pending'"), 1);
}

/* Runs script in a real bash with $1 the cairn binary; its stdout in *out. */
static int in_bash(const char *script, char **out, char **err)
{
	const char *argv[] = {"/bin/bash", "-c", script, "bash", tbin("cairn"), NULL};
	return trun(argv, NULL, out, err);
}

Test(completion, bash_completes_commands_subcommands_and_options)
{
	static const struct {
		const char *words; /* COMP_WORDS, the last one being completed */
		const char *want;  /* COMPREPLY */
	} cases[] = {
	    {"cairn sig", "signal signal-link"},
	    {"cairn re", "retry result reencrypt"},
	    {"cairn migrate --", "--status --dir --shards --citus --json --db --help"},
	    {"cairn cancel 12 --j", "--json"},
	    {"cairn schedule ''", "create list pause resume delete"},
	    {"cairn schedule create nightly --c", "--cron --catchup"},
	    {"cairn limit s", "set"},
	    {"cairn completion ''", "bash zsh"},
	    {"cairn --v", "--version"},
	    /* after an option that takes a value: the shell's own (files) */
	    {"cairn migrate --dir ''", ""},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char script[512], *out, *err;
		snprintf(script, sizeof script,
		         "source <(\"$1\" completion bash) || exit 9; COMP_WORDS=(%s); "
		         "COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _cairn; echo \"${COMPREPLY[*]}\"",
		         cases[i].words);
		int rc = in_bash(script, &out, &err);
		cr_assert_eq(rc, 0, "%s: exit %d: %s", cases[i].words, rc, err);
		out[strcspn(out, "\n")] = '\0';
		cr_assert_str_eq(out, cases[i].want, "completing \"%s\"", cases[i].words);
		free(out);
		free(err);
	}
}

/* The options completion offers for each command are the ones its --help
 * names (in its usage lines or as an option line), no more, no fewer: the
 * table the parser reads and the help text cannot drift apart unnoticed. */
Test(completion, offers_for_every_command_exactly_the_options_its_help_names)
{
	char *out, *err;
	int rc = in_bash(
	    "source <(\"$1\" completion bash) || exit 9; n=0; rc=0\n"
	    "for cmd in $(\"$1\" --help | sed -n '/Commands:$/,/^$/s/^  \\([a-z-]*\\) .*/\\1/p'); "
	    "do\n"
	    "  n=$((n + 1))\n"
	    "  help=$(\"$1\" \"$cmd\" --help | { sed -n '1,/^$/p' | grep -o -- '--[a-z][a-z-]*';\n"
	    "    \"$1\" \"$cmd\" --help | sed -n 's/^ *\\(-h, "
	    "\\)\\{0,1\\}\\(--[a-z][a-z-]*\\).*/\\2/p'; "
	    "} | sort -u)\n"
	    "  COMP_WORDS=(cairn \"$cmd\" --); COMP_CWORD=2; COMPREPLY=(); _cairn\n"
	    "  comp=$(printf '%s\\n' \"${COMPREPLY[@]}\" | sort -u)\n"
	    "  [ \"$help\" = \"$comp\" ] || { rc=1; echo \"cairn $cmd: --help names\" $help\\;"
	    " \"completion offers\" $comp; }\n"
	    "done\n"
	    "echo \"$n commands\"; exit $rc",
	    &out, &err);
	cr_assert_eq(rc, 0, "exit %d:\n%s%s", rc, out, err);
	cr_assert(strstr(out, "18 commands"), "%s", out);
	free(out);
	free(err);
}

Test(completion, zsh_script_parses_and_registers_its_function)
{
	char *out, *err;
	int rc =
	    in_bash("command -v zsh >/dev/null || { echo 'zsh is not installed (make deps)'; "
	            "exit 1; }; f=$(mktemp) && \"$1\" completion zsh > \"$f\" && zsh -n \"$f\" "
	            "&& head -n 1 \"$f\" && zsh -f -c 'autoload -U compinit && compinit -u -D "
	            "&& source \"$1\" && print -r -- \"${_comps[cairn]}\"' zsh \"$f\"; "
	            "s=$?; rm -f \"$f\"; exit $s",
	            &out, &err);
	cr_assert_eq(rc, 0, "exit %d:\n%s%s", rc, out, err);
	cr_assert_str_eq(out, "#compdef cairn\n_cairn\n", "%s%s", out, err);
	free(out);
	free(err);
	cr_assert_eq(tcli(NULL, &out, &err, "completion", "fish", NULL), 2);
	cr_assert(strstr(err, "unknown shell \"fish\": expected bash or zsh"), "%s", err);
	free(out);
	free(err);
}

/* ------------------------------------- JSON text cairn does not accept */

#define UTF8_KEYS "k1=q8RzO2m0mJbQm2Q0p7Z8pU4cK5tJz6k2lY0vX3wN1aE="

/* `cairn ARGV...` with CAIRN_ENCRYPTION_KEYS=keys (NULL: unset): its exit
 * code, its stderr in *err. */
static int cli_keys(const char *db, const char *keys, char **err, const char *const *argv)
{
	const char *args[16];
	int n = 0;
	args[n++] = tbin("cairn");
	for (int i = 0; argv[i] && n < 15; i++)
		args[n++] = argv[i];
	args[n] = NULL;
	char url[1100], k[128];
	snprintf(url, sizeof url, "DATABASE_URL=%s", db);
	snprintf(k, sizeof k, "CAIRN_ENCRYPTION_KEYS=%s", keys ? keys : "");
	const char *env[] = {url, keys ? k : "CAIRN_ENCRYPTION_KEYS", "CAIRN_ENCRYPTION_KEYS_FILE",
	                     NULL};
	char *out = NULL;
	int rc = trun(args, env, &out, err);
	free(out);
	return rc;
}

/*
 * With encryption on, PostgreSQL never sees a payload, so only cairn's own
 * check stands between such text and the table: before it, "a\u0000b" was
 * stored and came back as "a", and \xff\xfe was stored and printed back by
 * `cairn status --json`. Without encryption PostgreSQL refused them, as a
 * runtime error (exit 1) in its own words.
 */
Test(cli, nul_escapes_and_text_that_is_not_utf8_exit_2_naming_the_argument_with_and_without_keys)
{
	const char *db = tdb_new_migrated();
	int64_t run = enqueue(db, "order", "u1");
	char id[24];
	snprintf(id, sizeof id, "%" PRId64, run);
	int64_t before = rows_written(db);
	const struct {
		const char *argv[12];
		const char *says;
	} cases[] = {
	    {{"enqueue", "noop", "--input", "\"a\\u0000b\"", NULL},
	     "--input: input holds \\u0000 (the NUL character) at byte 3: cairn accepts no NUL "
	     "character in JSON text"},
	    {{"enqueue", "noop", "--input", "\"\xff\xfe\"", NULL},
	     "--input: input is not valid UTF-8 (0xff) at byte 2: JSON text must be UTF-8"},
	    {{"enqueue", "noop", "--input", "{\"items\": [\"ok\", \"\\u0000\"]}", NULL},
	     "--input: input holds \\u0000 (the NUL character) at byte 19, in $.items[1]:"},
	    {{"enqueue", "noop", "--input", "{\"name\": \"caf\xc3\"}", NULL},
	     "--input: input is not valid UTF-8 (0xc3) at byte 14, in $.name:"},
	    {{"signal", id, "go", "--input", "\"\\u0000\"", NULL},
	     "--input: signal payload holds \\u0000"},
	    {{"signal", id, "go", "--input", "[\"\xff\xfe\"]", NULL},
	     "--input: signal payload is not valid UTF-8 (0xff) at byte 3, in $[0]:"},
	    {{"event", id, "k", "--changed-from", "\"\\u0000\"", NULL},
	     "--changed-from: changed_from holds \\u0000"},
	    {{"schedule", "create", "nightly", "--cron", "0 3 * * *", "--workflow", "noop",
	      "--input", "{\"a\": \"\xed\xa0\x80\"}", NULL},
	     "--input: input is not valid UTF-8 (0xed) at byte 8, in $.a:"},
	};
	static const char *const keys[] = {NULL, UTF8_KEYS};
	for (size_t k = 0; k < 2; k++)
		for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
			char *err = NULL;
			int rc = cli_keys(db, keys[k], &err, cases[i].argv);
			cr_assert_eq(rc, 2, "%s case %zu (%s): exit %d: %s", cases[i].argv[0], i,
			             keys[k] ? "keys" : "no keys", rc, err);
			cr_assert(strstr(err, cases[i].says), "case %zu (%s): %s", i,
			          keys[k] ? "keys" : "no keys", err);
			free(err);
		}
	cr_assert_eq(rows_written(db), before, "a refused value wrote rows");
	cr_assert_eq(count(db, "SELECT count(*) FROM cairn.schedules"), 0);
}

Test(client_api, nul_escapes_and_text_that_is_not_utf8_are_einval_naming_the_field)
{
	const char *db = tdb_new_migrated();
	cairn_client *plain = client(db), *sealed = client(db);
	cr_assert_eq(cairn_client_set_keys(sealed, UTF8_KEYS), CAIRN_OK, "%s",
	             cairn_client_errmsg(sealed));
	cairn_enqueued res;
	cairn_enqueue_opts ok = {.key = "target"};
	cr_assert_eq(cairn_enqueue(plain, "order", &ok, &res), CAIRN_OK, "%s",
	             cairn_client_errmsg(plain));
	int64_t run = res.id;
	cairn_enqueued_clear(&res);
	int64_t before = rows_written(db);
	cairn_client *cs[] = {plain, sealed};
	for (size_t k = 0; k < 2; k++) {
		cairn_client *c = cs[k];
		const char *mode = k ? "with keys" : "without keys";
		cairn_enqueue_opts o = {.input = "{\"note\": \"a\\u0000b\"}"};
		cr_assert_eq(cairn_enqueue(c, "noop", &o, &res), CAIRN_EINVAL, "%s", mode);
		cr_assert_str_eq(cairn_client_errfield(c), "input");
		cr_assert(strstr(cairn_client_errmsg(c),
		                 "input holds \\u0000 (the NUL character) at "
		                 "byte 12, in $.note"),
		          "%s: %s", mode, cairn_client_errmsg(c));
		cairn_enqueue_opts batch[2] = {{.key = "fine"}, {.input = "\"\xff\xfe\""}};
		cairn_enqueued out[2];
		cr_assert_eq(cairn_enqueue_batch(c, "noop", 2, batch, out), CAIRN_EINVAL, "%s",
		             mode);
		cr_assert_str_eq(cairn_client_errfield(c), "input");
		cr_assert(strstr(cairn_client_errmsg(c), "input is not valid UTF-8 (0xff)"),
		          "%s: %s", mode, cairn_client_errmsg(c));
		cr_assert_eq(cairn_signal(c, run, "go", "\"\xc0\xaf\""), CAIRN_EINVAL, "%s", mode);
		cr_assert_str_eq(cairn_client_errfield(c), "payload");
		cr_assert(
		    strstr(cairn_client_errmsg(c), "signal payload is not valid UTF-8 (0xc0)"),
		    "%s: %s", mode, cairn_client_errmsg(c));
		cr_assert_eq(cairn_signal(c, run, "go", "[\"\\u0000\"]"), CAIRN_EINVAL, "%s", mode);
		cr_assert(strstr(cairn_client_errmsg(c), "signal payload holds \\u0000"), "%s: %s",
		          mode, cairn_client_errmsg(c));
		char *value = NULL;
		cr_assert_eq(cairn_event_get(c, run, "k", 0, "\"\\u0000\"", &value), CAIRN_EINVAL);
		cr_assert_str_eq(cairn_client_errfield(c), "changed_from");
		cairn_schedule_opts so = {
		    .cron = "0 3 * * *", .workflow = "noop", .input = "\"\xff\""};
		int64_t next;
		cr_assert_eq(cairn_schedule_create(c, "nightly", &so, &next), CAIRN_EINVAL, "%s",
		             mode);
		cr_assert_str_eq(cairn_client_errfield(c), "input");
	}
	cr_assert_eq(rows_written(db), before, "a refused value wrote rows");
	cairn_client_free(plain);
	cairn_client_free(sealed);
}
