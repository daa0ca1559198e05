/* test_visibility.c - `cairn runners` and `cairn shards` run as real processes
 * against a real PostgreSQL. The runners and shard leases are written with
 * SQL, so each case (live, dead backend, stale heartbeat, unowned shard) is
 * set up exactly; a runner is given a real lease backend by using the pid of
 * a connection the test holds open. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

/* A pid no backend can have: above Linux's largest pid_max (2^22). */
#define DEAD_PID "2000000000"

/* Inserts a runner and returns its id. pid is SQL ("pg_backend_pid()" or a number). */
static int64_t add_runner(PGconn *c, const char *name, const char *pid, const char *extra_cols,
                          const char *extra_vals)
{
	char sql[1024];
	snprintf(
	    sql, sizeof sql,
	    "INSERT INTO cairn.runners (name, address, version, groups, weight, lease_pid%s) "
	    "VALUES ('%s', '10.0.0.1:8080', '0.1.0', '{default,billing}', 200, %s%s) RETURNING id",
	    extra_cols, name, pid, extra_vals);
	return tdb_int(c, sql);
}

/* Gives shards [from, to) of group to owner (0: no owner) at epoch. */
static void add_shards(PGconn *c, const char *group, int from, int to, int64_t owner, int epoch)
{
	char sql[512], own[24] = "NULL";
	if (owner)
		snprintf(own, sizeof own, "%lld", (long long)owner);
	snprintf(sql, sizeof sql,
	         "INSERT INTO cairn.shard_leases (shard_group, shard, owner, epoch, acquired_at) "
	         "SELECT '%s', s, %s, %d, now() FROM generate_series(%d, %d) s",
	         group, own, epoch, from, to - 1);
	tdb_exec(c, sql);
}

/* Runs the CLI, expects exit 0 and returns its stdout parsed as JSON. */
static cJSON *cli_json(const char *db, const char *const *argv)
{
	char *out, *err;
	int rc = tcli_argv(db, &out, &err, argv);
	cr_assert_eq(rc, 0, "%s: exit %d: %s", argv[0], rc, err);
	cJSON *j = cJSON_Parse(out);
	cr_assert(j, "%s: not JSON: %s", argv[0], out);
	free(out);
	free(err);
	return j;
}

/* The element of a JSON array whose "name" (or key) equals want. */
static cJSON *find_by(cJSON *arr, const char *key, const char *want)
{
	cJSON *e;
	cJSON_ArrayForEach(e, arr)
	{
		cJSON *v = cJSON_GetObjectItem(e, key);
		if (cJSON_IsString(v) && strcmp(v->valuestring, want) == 0)
			return e;
	}
	return NULL;
}

/* 1 if some line of text, with runs of blanks squeezed to one space and
 * trimmed, equals want. */
static int has_line(const char *text, const char *want)
{
	for (const char *p = text; p && *p;) {
		const char *end = strchr(p, '\n');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		char line[512];
		size_t n = 0;
		for (size_t i = 0; i < len && n + 1 < sizeof line; i++) {
			if (isspace((unsigned char)p[i])) {
				if (n && line[n - 1] != ' ')
					line[n++] = ' ';
			} else {
				line[n++] = p[i];
			}
		}
		while (n && line[n - 1] == ' ')
			n--;
		line[n] = '\0';
		if (strcmp(line, want) == 0)
			return 1;
		p = end ? end + 1 : NULL;
	}
	return 0;
}

static int line_count(const char *text)
{
	int n = 0;
	for (const char *p = text; *p; p++)
		n += *p == '\n';
	return n;
}

/* Three runners: "alive" (this test's own backend, fresh heartbeat), "gone"
 * (a pid no backend has, marked unhealthy) and "stale" (a real backend but a
 * heartbeat an hour old). alive owns 3 default shards and 1 billing shard,
 * gone owns 1 default shard, 2 default shards have no owner. */
typedef struct fixture {
	const char *db;
	PGconn *conn; /* holds the backend whose pid "alive" and "stale" use */
	int64_t alive, gone, stale;
} fixture;

static fixture setup_runners(void)
{
	fixture f = {.db = tdb_new_migrated()};
	f.conn = tdb_connect(f.db);
	f.alive = add_runner(f.conn, "alive", "pg_backend_pid()", "", "");
	f.gone = add_runner(f.conn, "gone", DEAD_PID, ", healthy", ", false");
	f.stale = add_runner(f.conn, "stale", "pg_backend_pid()", ", heartbeat_at",
	                     ", now() - interval '1 hour'");
	add_shards(f.conn, "default", 0, 3, f.alive, 2);
	add_shards(f.conn, "default", 3, 4, f.gone, 5);
	add_shards(f.conn, "default", 4, 6, 0, 1);
	add_shards(f.conn, "billing", 0, 1, f.alive, 7);
	return f;
}

Test(runners, table_shows_health_liveness_heartbeat_and_shards)
{
	fixture f = setup_runners();
	char *out, *err;
	cr_assert_eq(tcli(f.db, &out, &err, "runners", NULL), 0, "%s", err);
	cr_assert(
	    has_line(out, "ID NAME ADDRESS VERSION HEALTHY LIVE HEARTBEAT_AGE SHARDS RUNTIMES"),
	    "%s", out);
	cr_assert_eq(line_count(out), 4, "%s", out);
	/* Every column of each runner, by splitting its line. */
	const struct {
		int64_t id;
		const char *name, *healthy, *live, *age; /* age: NULL = any */
		int shards;
	} want[] = {{f.alive, "alive", "yes", "yes", NULL, 4},
	            {f.gone, "gone", "no", "no", NULL, 1},
	            {f.stale, "stale", "yes", "no", "1h0m", 0}};
	for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
		char needle[64];
		snprintf(needle, sizeof needle, "\n%lld ", (long long)want[i].id);
		const char *line = strstr(out, needle);
		cr_assert(line, "no line for runner %lld: %s", (long long)want[i].id, out);
		char name[64], addr[64], ver[64], healthy[8], live[8], agetxt[32];
		int shards;
		cr_assert_eq(sscanf(line + 1, "%*d %63s %63s %63s %7s %7s %31s %d", name, addr, ver,
		                    healthy, live, agetxt, &shards),
		             7, "%s", line);
		cr_assert_str_eq(name, want[i].name);
		cr_assert_str_eq(addr, "10.0.0.1:8080");
		cr_assert_str_eq(ver, "0.1.0");
		cr_assert_str_eq(healthy, want[i].healthy, "%s", line);
		cr_assert_str_eq(live, want[i].live, "%s", line);
		if (want[i].age)
			cr_assert_str_eq(agetxt, want[i].age, "heartbeat age of %s", name);
		cr_assert_eq(shards, want[i].shards, "%s", line);
	}
	free(out);
	free(err);
	PQfinish(f.conn);
}

Test(runners, json_has_every_field_and_ttl_decides_liveness)
{
	fixture f = setup_runners();
	cJSON *j = cli_json(f.db, (const char *[]){"runners", "--json", NULL});
	cr_assert(cJSON_IsArray(j) && cJSON_GetArraySize(j) == 3);
	cJSON *a = find_by(j, "name", "alive"), *g = find_by(j, "name", "gone"),
	      *s = find_by(j, "name", "stale");
	cr_assert(a && g && s);
	cr_assert_eq((int64_t)cJSON_GetObjectItem(a, "id")->valuedouble, f.alive);
	cr_assert_str_eq(cJSON_GetObjectItem(a, "address")->valuestring, "10.0.0.1:8080");
	cr_assert_str_eq(cJSON_GetObjectItem(a, "version")->valuestring, "0.1.0");
	cJSON *groups = cJSON_GetObjectItem(a, "groups");
	cr_assert(cJSON_IsArray(groups) && cJSON_GetArraySize(groups) == 2);
	cr_assert_str_eq(cJSON_GetArrayItem(groups, 0)->valuestring, "default");
	cr_assert_str_eq(cJSON_GetArrayItem(groups, 1)->valuestring, "billing");
	cr_assert_eq(cJSON_GetObjectItem(a, "weight")->valueint, 200);
	cr_assert(cJSON_IsString(cJSON_GetObjectItem(a, "started_at")));
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(a, "healthy")));
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(a, "live")));
	cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(g, "healthy")));
	cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(g, "live")),
	          "a runner without a backend is live");
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(s, "healthy")));
	cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(s, "live")), "a stale heartbeat is live");
	cr_assert_eq(cJSON_GetObjectItem(a, "shards")->valueint, 4);
	cr_assert_eq(cJSON_GetObjectItem(g, "shards")->valueint, 1);
	cr_assert_eq(cJSON_GetObjectItem(s, "shards")->valueint, 0);
	double age_a = cJSON_GetObjectItem(a, "heartbeat_age_ms")->valuedouble,
	       age_s = cJSON_GetObjectItem(s, "heartbeat_age_ms")->valuedouble;
	cr_assert(age_a >= 0 && age_a < 60000, "alive heartbeat age %f", age_a);
	cr_assert(age_s >= 3600000 && age_s < 3660000, "stale heartbeat age %f", age_s);
	cJSON_Delete(j);

	/* A TTL longer than the stale heartbeat makes it live; a dead backend never is. */
	j = cli_json(f.db, (const char *[]){"runners", "--ttl", "2h", "--json", NULL});
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(find_by(j, "name", "stale"), "live")));
	cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(find_by(j, "name", "gone"), "live")));
	cJSON_Delete(j);
	PQfinish(f.conn);
}

/* The state `cairn runners --json` reports for one runner. */
typedef struct live_probe {
	const char *db, *name;
} live_probe;

static int runner_not_live(void *arg)
{
	live_probe *p = arg;
	cJSON *j = cli_json(p->db, (const char *[]){"runners", "--json", NULL});
	int dead = cJSON_IsFalse(cJSON_GetObjectItem(find_by(j, "name", p->name), "live"));
	cJSON_Delete(j);
	return dead;
}

Test(runners, runner_is_not_live_once_its_lease_connection_closes)
{
	const char *db = tdb_new_migrated();
	PGconn *lease = tdb_connect(db);
	add_runner(lease, "leaver", "pg_backend_pid()", "", "");
	live_probe p = {db, "leaver"};
	cr_assert_not(runner_not_live(&p), "a runner with a connected backend is not live");
	PQfinish(lease);
	/* The backend leaves pg_stat_activity shortly after the socket closes. */
	cr_assert(twait(runner_not_live, &p, 10000), "runner still live after its backend closed");
}

Test(runners, empty_registry_prints_only_the_header)
{
	const char *db = tdb_new_migrated();
	char *out;
	cr_assert_eq(tcli(db, &out, NULL, "runners", NULL), 0);
	cr_assert_eq(line_count(out), 1, "%s", out);
	free(out);
	cJSON *j = cli_json(db, (const char *[]){"runners", "--json", NULL});
	cr_assert(cJSON_IsArray(j) && cJSON_GetArraySize(j) == 0);
	cJSON_Delete(j);
}

static void rejects(const char *db, const char *const *argv, const char *const *expect)
{
	char *out, *err;
	int rc = tcli_argv(db, &out, &err, argv);
	cr_assert_eq(rc, 2, "%s %s: exit %d, stderr: %s", argv[0], argv[1], rc, err);
	for (size_t i = 0; expect[i]; i++)
		cr_assert(strstr(err, expect[i]), "stderr does not mention \"%s\": %s", expect[i],
		          err);
	cr_assert(!out || !*out, "a rejected command printed: %s", out);
	free(out);
	free(err);
}

Test(runners, rejects_bad_ttl_and_arguments)
{
	const char *db = tdb_new_migrated();
	rejects(db, (const char *[]){"runners", "--ttl", "soon", NULL},
	        (const char *[]){"--ttl", "\"soon\"", "expected a duration", NULL});
	rejects(db, (const char *[]){"runners", "--ttl", "0", NULL},
	        (const char *[]){"--ttl", "\"0\"", "from 1ms to 365d", NULL});
	rejects(db, (const char *[]){"runners", "--ttl", "400d", NULL},
	        (const char *[]){"--ttl", "\"400d\"", "from 1ms to 365d", NULL});
	rejects(db, (const char *[]){"runners", "extra", NULL},
	        (const char *[]){"unexpected argument \"extra\"", NULL});
	rejects(db, (const char *[]){"runners", "--group", "x", NULL},
	        (const char *[]){"unknown option \"--group\"", NULL});
}

Test(shards, table_lists_owner_and_epoch_then_a_summary_per_runner)
{
	fixture f = setup_runners();
	char *out, *err, want[128];
	cr_assert_eq(tcli(f.db, &out, &err, "shards", NULL), 0, "%s", err);
	cr_assert(has_line(out, "GROUP SHARD OWNER EPOCH"), "%s", out);
	for (int s = 0; s < 3; s++) {
		snprintf(want, sizeof want, "default %d %lld:alive 2", s, (long long)f.alive);
		cr_assert(has_line(out, want), "no line \"%s\": %s", want, out);
	}
	snprintf(want, sizeof want, "default 3 %lld:gone 5", (long long)f.gone);
	cr_assert(has_line(out, want), "no line \"%s\": %s", want, out);
	cr_assert(has_line(out, "default 4 - 1") && has_line(out, "default 5 - 1"), "%s", out);
	snprintf(want, sizeof want, "billing 0 %lld:alive 7", (long long)f.alive);
	cr_assert(has_line(out, want), "no line \"%s\": %s", want, out);
	/* Groups in name order: billing before default. */
	cr_assert(strstr(out, "billing") < strstr(out, "default"), "%s", out);

	cr_assert(has_line(out, "OWNER SHARDS"), "%s", out);
	snprintf(want, sizeof want, "%lld:alive 4", (long long)f.alive);
	cr_assert(has_line(out, want), "no summary \"%s\": %s", want, out);
	snprintf(want, sizeof want, "%lld:gone 1", (long long)f.gone);
	cr_assert(has_line(out, want), "no summary \"%s\": %s", want, out);
	cr_assert(has_line(out, "unowned 2"), "%s", out);
	/* header + 7 shards + blank + header + 2 owners + unowned */
	cr_assert_eq(line_count(out), 13, "%s", out);
	free(out);
	free(err);
	PQfinish(f.conn);
}

/* The summary entry of owner (0: the unowned one). */
static cJSON *summary_of(cJSON *summary, int64_t owner)
{
	cJSON *e;
	cJSON_ArrayForEach(e, summary)
	{
		cJSON *o = cJSON_GetObjectItem(e, "owner");
		if (owner ? cJSON_IsNumber(o) && (int64_t)o->valuedouble == owner : cJSON_IsNull(o))
			return e;
	}
	return NULL;
}

Test(shards, json_has_shards_and_summary)
{
	fixture f = setup_runners();
	cJSON *j = cli_json(f.db, (const char *[]){"shards", "--json", NULL});
	cJSON *shards = cJSON_GetObjectItem(j, "shards"),
	      *summary = cJSON_GetObjectItem(j, "summary");
	cr_assert(cJSON_IsArray(shards) && cJSON_GetArraySize(shards) == 7);
	cJSON *b0 = cJSON_GetArrayItem(shards, 0);
	cr_assert_str_eq(cJSON_GetObjectItem(b0, "group")->valuestring, "billing");
	cr_assert_eq(cJSON_GetObjectItem(b0, "shard")->valueint, 0);
	cr_assert_eq((int64_t)cJSON_GetObjectItem(b0, "owner")->valuedouble, f.alive);
	cr_assert_str_eq(cJSON_GetObjectItem(b0, "owner_name")->valuestring, "alive");
	cr_assert_eq(cJSON_GetObjectItem(b0, "epoch")->valueint, 7);
	cr_assert(cJSON_IsString(cJSON_GetObjectItem(b0, "acquired_at")));
	cJSON *d4 = cJSON_GetArrayItem(shards, 5); /* billing/0, default/0..3, default/4 */
	cr_assert_eq(cJSON_GetObjectItem(d4, "shard")->valueint, 4);
	cr_assert(cJSON_IsNull(cJSON_GetObjectItem(d4, "owner")));
	cr_assert(cJSON_IsNull(cJSON_GetObjectItem(d4, "owner_name")));

	cr_assert(cJSON_IsArray(summary) && cJSON_GetArraySize(summary) == 3);
	cJSON *sa = summary_of(summary, f.alive), *sg = summary_of(summary, f.gone),
	      *su = summary_of(summary, 0);
	cr_assert(sa && sg && su, "summary lacks an entry");
	cr_assert_eq(cJSON_GetObjectItem(sa, "shards")->valueint, 4);
	cr_assert_str_eq(cJSON_GetObjectItem(sa, "owner_name")->valuestring, "alive");
	cr_assert_eq(cJSON_GetObjectItem(sg, "shards")->valueint, 1);
	cr_assert_eq(cJSON_GetObjectItem(su, "shards")->valueint, 2);
	cr_assert(summary_of(summary, f.stale) == NULL,
	          "a runner without shards is in the summary");
	cJSON_Delete(j);
	PQfinish(f.conn);
}

Test(shards, group_filter_limits_shards_and_summary)
{
	fixture f = setup_runners();
	cJSON *j = cli_json(f.db, (const char *[]){"shards", "--group", "billing", "--json", NULL});
	cJSON *shards = cJSON_GetObjectItem(j, "shards"),
	      *summary = cJSON_GetObjectItem(j, "summary");
	cr_assert_eq(cJSON_GetArraySize(shards), 1);
	cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(shards, 0), "group")->valuestring,
	                 "billing");
	cr_assert_eq(cJSON_GetArraySize(summary), 2);
	cr_assert_eq(cJSON_GetObjectItem(summary_of(summary, f.alive), "shards")->valueint, 1);
	cr_assert_eq(cJSON_GetObjectItem(summary_of(summary, 0), "shards")->valueint, 0);
	cJSON_Delete(j);

	char *out, *err;
	cr_assert_eq(tcli(f.db, &out, &err, "shards", "--group", "default", NULL), 0, "%s", err);
	cr_assert(!strstr(out, "billing"), "%s", out);
	cr_assert(has_line(out, "unowned 2"), "%s", out);
	char want[64];
	snprintf(want, sizeof want, "%lld:alive 3", (long long)f.alive);
	cr_assert(has_line(out, want), "no summary \"%s\": %s", want, out);
	free(out);
	free(err);

	/* A valid group without shards is empty, not an error. */
	cr_assert_eq(tcli(f.db, &out, NULL, "shards", "--group", "nosuch", NULL), 0);
	cr_assert(has_line(out, "unowned 0"), "%s", out);
	cr_assert_eq(line_count(out), 4, "%s", out);
	free(out);
	PQfinish(f.conn);
}

Test(shards, deleted_owner_leaves_the_shard_unowned)
{
	fixture f = setup_runners();
	tdb_exec(f.conn, "DELETE FROM cairn.runners WHERE name = 'gone'");
	cJSON *j = cli_json(f.db, (const char *[]){"shards", "--json", NULL});
	cJSON *summary = cJSON_GetObjectItem(j, "summary");
	cr_assert(summary_of(summary, f.gone) == NULL);
	cr_assert_eq(cJSON_GetObjectItem(summary_of(summary, 0), "shards")->valueint, 3);
	cJSON_Delete(j);
	PQfinish(f.conn);
}

Test(shards, rejects_bad_group_naming_argument_value_and_rule)
{
	const char *db = tdb_new_migrated();
	rejects(db, (const char *[]){"shards", "--group", "bad group", NULL},
	        (const char *[]){"cairn shards: --group", "\"bad group\"",
	                         "letters, digits and _ - . :", NULL});
	rejects(db, (const char *[]){"shards", "--group", "", NULL},
	        (const char *[]){"--group", "group must not be empty", NULL});
	char *long_group = malloc(200);
	memset(long_group, 'g', 199);
	long_group[199] = '\0';
	rejects(db, (const char *[]){"shards", "--group", long_group, NULL},
	        (const char *[]){"--group", "199 bytes long", "at most 128", NULL});
	free(long_group);
	rejects(db, (const char *[]){"shards", "--group", NULL},
	        (const char *[]){"--group needs a value", NULL});
	rejects(db, (const char *[]){"shards", "default", NULL},
	        (const char *[]){"unexpected argument \"default\"", NULL});
}

Test(visibility, before_migrate_says_to_migrate)
{
	const char *db = tdb_new();
	const char *cmds[] = {"runners", "shards"};
	for (size_t i = 0; i < 2; i++) {
		char *err;
		cr_assert_eq(tcli(db, NULL, &err, cmds[i], NULL), 1, "%s", cmds[i]);
		cr_assert(strstr(err, "cairn migrate"), "%s: %s", cmds[i], err);
		free(err);
	}
}

Test(visibility, help_documents_both_commands)
{
	char *out;
	cr_assert_eq(tcli(NULL, &out, NULL, "--help", NULL), 0);
	cr_assert(strstr(out, "runners") && strstr(out, "shards"), "%s", out);
	free(out);
	cr_assert_eq(tcli(NULL, &out, NULL, "runners", "--help", NULL), 0);
	cr_assert(strstr(out, "usage: cairn runners") && strstr(out, "--ttl") &&
	              strstr(out, "--json") && strstr(out, "--db"),
	          "%s", out);
	free(out);
	cr_assert_eq(tcli(NULL, &out, NULL, "shards", "--help", NULL), 0);
	cr_assert(strstr(out, "usage: cairn shards") && strstr(out, "--group") &&
	              strstr(out, "--json") && strstr(out, "--db"),
	          "%s", out);
	free(out);
}

/* The two commands against real workers: both are live, healthy and between
 * them own every shard, and `cairn shards` agrees. */
static int two_own_everything(void *arg)
{
	PGconn *c = arg;
	return tdb_int(c, "SELECT count(DISTINCT owner) FROM cairn.shard_leases") == 2 &&
	       tdb_int(c, "SELECT count(*) FROM cairn.shard_leases WHERE owner IS NOT NULL") == 64;
}

Test(visibility, runners_and_shards_describe_two_real_workers)
{
	const char *db = tdb_new_migrated_shards(64);
	pid_t a = tworker_start(db, NULL, NULL, "CAIRN_REBALANCE_INTERVAL=100ms", NULL);
	pid_t b = tworker_start(db, NULL, NULL, "CAIRN_REBALANCE_INTERVAL=100ms", NULL);
	PGconn *c = tdb_connect(db);
	cr_assert(twait(two_own_everything, c, 30000), "the two workers never split the shards");
	cJSON *rs = cli_json(db, (const char *const[]){"runners", "--json", NULL});
	cr_assert_eq(cJSON_GetArraySize(rs), 2);
	int shards = 0;
	cJSON *r;
	cJSON_ArrayForEach(r, rs)
	{
		cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(r, "live")), "a worker is not live");
		cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(r, "healthy")));
		shards += cJSON_GetObjectItem(r, "shards")->valueint;
	}
	cr_assert_eq(shards, 64);
	cJSON_Delete(rs);
	cJSON *sh = cli_json(db, (const char *const[]){"shards", "--json", NULL});
	cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(sh, "shards")), 64);
	cJSON *unowned = summary_of(cJSON_GetObjectItem(sh, "summary"), 0);
	cr_assert(!unowned || cJSON_GetObjectItem(unowned, "shards")->valueint == 0,
	          "shards left unowned");
	cJSON_Delete(sh);
	PQfinish(c);
	cr_assert_eq(tworker_stop(a, SIGTERM, 30000), 0);
	cr_assert_eq(tworker_stop(b, SIGTERM, 30000), 0);
}
