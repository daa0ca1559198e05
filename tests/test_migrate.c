/* test_migrate.c - `cairn migrate` against a real PostgreSQL. */
#include <criterion/criterion.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support.h"

/* How many migrations the repository ships (sql/migrations/NNNN_*.sql). */
static int shipped(void)
{
	char pat[1024];
	snprintf(pat, sizeof pat, "%s/[0-9][0-9][0-9][0-9]_*.sql", getenv("CAIRN_SQL_DIR"));
	glob_t g;
	int n = glob(pat, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
	globfree(&g);
	return n;
}

Test(migrate, fresh_database_gets_schema_and_records_checksums)
{
	const char *db = tdb_new();
	char *out, *err, want[64];
	cr_assert_eq(tcli(db, &out, &err, "migrate", NULL), 0, "%s", err);
	snprintf(want, sizeof want, "applied %d migration", shipped());
	cr_assert(strstr(out, want), "%s", out);
	PGconn *c = tdb_connect(db);
	cr_assert_eq(
	    tdb_int(c, "SELECT count(*) FROM cairn.schema_migrations WHERE length(checksum) = 64"),
	    shipped());
	const char *tables[] = {"runners",  "shard_leases",      "runs",    "steps", "signals",
	                        "messages", "schema_migrations", "settings"};
	for (size_t i = 0; i < sizeof tables / sizeof *tables; i++) {
		char sql[200];
		snprintf(sql, sizeof sql,
		         "SELECT count(*) FROM pg_tables WHERE schemaname = 'cairn' AND tablename "
		         "= '%s'",
		         tables[i]);
		cr_assert_eq(tdb_int(c, sql), 1, "table cairn.%s missing", tables[i]);
	}
	cr_assert_eq(
	    tdb_int(c, "SELECT value::int FROM cairn.settings WHERE name = 'shards_per_group'"),
	    4096);
	/* The checksum is the SHA-256 of the file. */
	char *sum = tdb_str(c, "SELECT checksum FROM cairn.schema_migrations WHERE version = 1");
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "sha256sum %s/0001_init.sql", getenv("CAIRN_SQL_DIR"));
	FILE *p = popen(cmd, "r");
	char line[256] = "";
	cr_assert(fgets(line, sizeof line, p));
	pclose(p);
	cr_assert(strncmp(line, sum, 64) == 0, "checksum %s, file %s", sum, line);
	free(sum);
	free(out);
	free(err);
	PQfinish(c);
}

Test(migrate, running_again_is_a_noop)
{
	const char *db = tdb_new_migrated();
	char *out;
	cr_assert_eq(tcli(db, &out, NULL, "migrate", NULL), 0);
	cr_assert(strstr(out, "up to date"), "%s", out);
	free(out);
	PGconn *c = tdb_connect(db);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.schema_migrations"), shipped());
	PQfinish(c);
}

Test(migrate, two_concurrent_migrators_both_succeed)
{
	const char *db = tdb_new();
	pid_t pids[4];
	for (int i = 0; i < 4; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			int rc = tcli(db, NULL, NULL, "migrate", NULL);
			_exit(rc);
		}
	}
	for (int i = 0; i < 4; i++) {
		int st;
		waitpid(pids[i], &st, 0);
		cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "migrator %d failed", i);
	}
	PGconn *c = tdb_connect(db);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.schema_migrations"), shipped());
	cr_assert_eq(
	    tdb_int(c, "SELECT count(*) FROM cairn.settings WHERE name = 'shards_per_group'"), 1);
	PQfinish(c);
}

/* Copies sql/migrations to a temporary directory and adds 9999_extra.sql. */
static void make_dir(char *dir, const char *extra_sql)
{
	strcpy(dir, "/tmp/cairn-mig-XXXXXX");
	cr_assert(mkdtemp(dir));
	char cmd[2048];
	snprintf(cmd, sizeof cmd, "cp %s/*.sql %s/", getenv("CAIRN_SQL_DIR"), dir);
	cr_assert_eq(system(cmd), 0);
	snprintf(cmd, sizeof cmd, "%s/9999_extra.sql", dir);
	FILE *f = fopen(cmd, "w");
	fputs(extra_sql, f);
	fclose(f);
}

Test(migrate, tampered_applied_file_is_refused)
{
	const char *db = tdb_new();
	char dir[64], cmd[256];
	make_dir(dir, "CREATE TABLE cairn.extra (id int);\n");
	cr_assert_eq(tcli(db, NULL, NULL, "migrate", "--dir", dir, NULL), 0);
	snprintf(cmd, sizeof cmd, "%s/9999_extra.sql", dir);
	FILE *f = fopen(cmd, "a");
	fputs("-- changed\n", f);
	fclose(f);
	char *out, *err;
	cr_assert_eq(tcli(db, &out, &err, "migrate", "--dir", dir, NULL), 1);
	cr_assert(strstr(err, "9999_extra.sql was changed after it was applied"), "%s", err);
	free(out);
	free(err);
	cr_assert_eq(tcli(db, &out, &err, "migrate", "--status", "--dir", dir, NULL), 0);
	cr_assert(strstr(out, "CHANGED"), "%s", out);
	free(out);
	free(err);
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	system(cmd);
}

Test(migrate, status_lists_applied_and_pending)
{
	const char *db = tdb_new_migrated();
	char dir[64];
	make_dir(dir, "CREATE TABLE cairn.extra (id int);\n");
	char *out;
	cr_assert_eq(tcli(db, &out, NULL, "migrate", "--status", "--dir", dir, NULL), 0);
	cr_assert(strstr(out, "init") && strstr(out, "applied"), "%s", out);
	cr_assert(strstr(out, "extra") && strstr(out, "pending"), "%s", out);
	free(out);
	cr_assert_eq(tcli(db, &out, NULL, "migrate", "--status", "--json", "--dir", dir, NULL), 0);
	cr_assert(strstr(out, "\"applied\":\ttrue") || strstr(out, "\"applied\": true"), "%s", out);
	free(out);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	system(cmd);
}

Test(migrate, failing_migration_leaves_nothing_applied)
{
	const char *db = tdb_new();
	char dir[64];
	make_dir(dir, "CREATE TABLE cairn.half (id int);\nSELECT no_such_function();\n");
	char *err;
	cr_assert_eq(tcli(db, NULL, &err, "migrate", "--dir", dir, NULL), 1);
	cr_assert(strstr(err, "9999_extra.sql failed"), "%s", err);
	free(err);
	PGconn *c = tdb_connect(db);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.schema_migrations"), shipped());
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM pg_tables WHERE tablename = 'half'"), 0);
	PQfinish(c);
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	system(cmd);
}

Test(migrate, shard_count_mismatch_is_refused)
{
	const char *db = tdb_new();
	cr_assert_eq(tcli(db, NULL, NULL, "migrate", "--shards", "64", NULL), 0);
	char *err;
	cr_assert_eq(tcli(db, NULL, &err, "migrate", "--shards", "128", NULL), 1);
	cr_assert(strstr(err, "shards_per_group is 64 in the database, not 128"), "%s", err);
	free(err);
	cr_assert_eq(tcli(db, NULL, &err, "migrate", "--shards", "0", NULL), 2);
	cr_assert(strstr(err, "--shards"), "%s", err);
	free(err);
}

Test(migrate, unreachable_database_exits_1)
{
	char *err;
	cr_assert_eq(tcli("host=/nonexistent port=1 dbname=x", NULL, &err, "migrate", NULL), 1);
	cr_assert(strstr(err, "cannot connect"), "%s", err);
	free(err);
}

/* 0006 moves a run's start from cairn.messages into runs.start_at: a run
 * enqueued before the upgrade still starts after it. */
Test(migrate, starts_waiting_as_messages_become_start_columns)
{
	const char *db = tdb_new();
	char dir[64] = "/tmp/cairn-mig-XXXXXX", cmd[2048];
	cr_assert(mkdtemp(dir));
	snprintf(cmd, sizeof cmd, "cp %s/000[1-5]_*.sql %s/", getenv("CAIRN_SQL_DIR"), dir);
	cr_assert_eq(system(cmd), 0);
	cr_assert_eq(tcli(db, NULL, NULL, "migrate", "--dir", dir, NULL), 0);
	PGconn *c = tdb_connect(db);
	/* Before: 0005's enqueue writes a start message; one run has finished. */
	tdb_int(c, "SELECT id FROM cairn.enqueue_one('noop', 'waiting', 'default', 1, '{}', 3, "
	           "60000, NULL, false)");
	tdb_int(c, "SELECT id FROM cairn.enqueue_one('noop', 'done', 'default', 2, '{}', 3, 0, "
	           "NULL, false)");
	tdb_int(c, "WITH d AS (DELETE FROM cairn.messages m USING cairn.runs r "
	           "  WHERE r.id = m.run_id AND r.key = 'done' RETURNING r.id) "
	           "UPDATE cairn.runs SET status = 'completed', finished_at = now() "
	           "WHERE id IN (SELECT id FROM d) RETURNING id");
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.messages WHERE kind = 'start'"), 1);
	cr_assert_eq(tcli(db, NULL, NULL, "migrate", NULL), 0);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.messages"), 0);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runs WHERE key = 'waiting' "
	                        "AND start_at = scheduled_at AND start_at > now()"),
	             1);
	cr_assert_eq(tdb_int(c, "SELECT count(*) FROM cairn.runs WHERE key = 'done' "
	                        "AND start_at IS NULL"),
	             1);
	PQfinish(c);
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	system(cmd);
}
