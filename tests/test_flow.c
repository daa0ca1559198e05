/*
 * test_flow.c - flow control (`cairn limit`), proved from the recorded
 * start and end times of real runs on real workers: t.hold writes a line
 * when its step starts and when it ends (CLOCK_MONOTONIC, shared by every
 * process on the machine), and the claim records started_at.
 *   - a run claimed on a shard its worker is handing over gives back the
 *     slot of a fleet-wide limit its claim took, at once;
 *   - a slot given back while a claim finds its limit full wakes the
 *     runners;
 *   - a key limit of 2 holds across three workers while the owner of the
 *     keys is killed with -9 and another takes its shards over;
 *   - a run in a durable sleep holds no slot; held runs show as held and go
 *     when the limit is raised;
 *   - a 5/s rate spreads 50 runs over at least 9 s, fleet-wide;
 *   - high-priority runs enqueued behind a backlog start first, and
 *     overtake a backlog already in the worker's queue;
 *   - a small key starts at once while a big key's backlog drains;
 *   - bad limits and options are refused by name.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cairn.h"
#include "support.h"

static const char *db;

static void setup(void)
{
	db = tdb_new_migrated_shards(16);
}

TestSuite(flow, .init = setup, .timeout = 180);

static char logs[3][64];
static int ports[3];
static void dump(void)
{
	for (int i = 0; i < 3; i++)
		if (logs[i][0]) {
			char *s = tfile_read(logs[i]);
			fprintf(stderr, "--- worker %d\n%s\n", i, s ? s : "");
			free(s);
		}
}

/* Worker i, whose leases last ttl (a lease TTL setting). */
static pid_t start_worker_ttl(int i, int concurrency, const char *ttl)
{
	char plugins[600], conc[40], lease[40];
	snprintf(plugins, sizeof plugins, "CAIRN_PLUGINS=%s", tflows_path());
	snprintf(conc, sizeof conc, "CAIRN_CONCURRENCY=%d", concurrency);
	snprintf(lease, sizeof lease, "CAIRN_LEASE_TTL=%s", ttl);
	tlog_file(logs[i]);
	return tworker_start(db, &ports[i], logs[i], plugins, conc, "CAIRN_POLL_INTERVAL=1s",
	                     lease, NULL);
}

static pid_t start_worker(int i, int concurrency)
{
	return start_worker_ttl(i, concurrency, "2s");
}

/* n workers at concurrency 8, once the shards are spread over all of them. */
static void start_fleet(PGconn *pg, pid_t *w, int n)
{
	for (int i = 0; i < n; i++)
		w[i] = start_worker(i, 8);
	cr_assert(
	    tdb_wait_at_least(pg, "SELECT count(DISTINCT owner) FROM cairn.shard_leases", n, 30000),
	    "the shards never spread over %d workers", n);
}

static int64_t mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Enqueues n runs of t.hold (key prefix p, concurrency key ck or NULL,
 * priority prio) in one batch; input {"ms": ms, "log": log}. */
static void enqueue_holds(cairn_client *c, const char *p, const char *ck, int prio, int n, int ms,
                          const char *log)
{
	cairn_enqueue_opts *o = calloc((size_t)n, sizeof *o);
	cairn_enqueued *out = calloc((size_t)n, sizeof *out);
	char(*keys)[64] = calloc((size_t)n, sizeof *keys);
	char input[256];
	snprintf(input, sizeof input, "{\"ms\": %d, \"log\": \"%s\"}", ms, log ? log : "/dev/null");
	for (int i = 0; i < n; i++) {
		snprintf(keys[i], sizeof keys[i], "%s-%d", p, i);
		o[i] = (cairn_enqueue_opts){
		    .key = keys[i], .input = input, .concurrency_key = ck, .priority = prio};
	}
	int rc = n == 1 ? cairn_enqueue(c, "t.hold", o, out)
	                : cairn_enqueue_batch(c, "t.hold", (size_t)n, o, out);
	cr_assert_eq(rc, 0, "enqueue: %s", cairn_client_errmsg(c));
	for (int i = 0; i < n; i++)
		cairn_enqueued_clear(&out[i]);
	free(o);
	free(out);
	free(keys);
}

/* The most runs of one concurrency key (NULL: of any) whose steps ran at the same moment,
 * from the S/E lines of the hold log; a step whose process was killed
 * (no E line) runs until killed_at_us. */
typedef struct step_span {
	int64_t run, pid, from, to;
} step_span;

static int max_overlap(PGconn *pg, const char *path, const char *ck, int64_t killed_pid,
                       int64_t killed_at_us, int *steps)
{
	char *text = tfile_read(path);
	cr_assert(text, "no hold log");
	step_span sp[4096];
	int n = 0;
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		char k;
		int64_t run, pid, t;
		if (sscanf(line, "%c %" SCNd64 " %" SCNd64 " %" SCNd64, &k, &run, &pid, &t) != 4)
			continue;
		if (k == 'S' && n < 4096) {
			sp[n++] = (step_span){run, pid, t, -1};
			continue;
		}
		for (int i = n - 1; i >= 0; i--)
			if (sp[i].run == run && sp[i].pid == pid && sp[i].to < 0) {
				sp[i].to = t;
				break;
			}
	}
	free(text);
	/* Only the runs of the key. */
	int m = 0;
	for (int i = 0; i < n; i++) {
		char sql[200];
		snprintf(sql, sizeof sql,
		         "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
		         " AND concurrency_key = '%s'",
		         sp[i].run, ck ? ck : "");
		if (ck && tdb_int(pg, sql) != 1)
			continue;
		step_span s = sp[i];
		if (s.to < 0) {
			cr_assert_eq(s.pid, killed_pid,
			             "run %" PRId64 " on pid %" PRId64 " started and never ended",
			             s.run, s.pid);
			s.to = killed_at_us;
		}
		sp[m++] = s;
	}
	*steps = m;
	int most = 0;
	for (int i = 0; i < m; i++) {
		/* At the start of each step: how many others of the key were running. */
		int at = 0;
		for (int j = 0; j < m; j++)
			at += sp[j].from <= sp[i].from && sp[i].from < sp[j].to;
		if (at > most)
			most = at;
	}
	return most;
}

static int all_finished(void *arg)
{
	PGconn *pg = arg;
	return tdb_int(pg, "SELECT count(*) FROM cairn.runs WHERE finished_at IS NULL") == 0;
}

/* A run's slot is given back by its worker's poller just after the run's
 * final commit, so a run may show finished a moment before. */
static int slots_given_back(void *arg)
{
	PGconn *pg = arg;
	return tdb_int(pg, "SELECT count(*) FROM cairn.slots") == 0;
}

Test(flow, a_key_limit_of_two_holds_on_three_workers_while_the_owner_is_killed_and_replaced)
{
	PGconn *pg = tdb_connect(db);
	char hold[64];
	tlog_file(hold);
	cr_assert_eq(tcli(db, NULL, NULL, "limit", "set", "t.hold", "--key-concurrency", "2", NULL),
	             0);
	pid_t w[3];
	start_fleet(pg, w, 3);
	cairn_client *c;
	cr_assert_eq(cairn_client_open(db, &c), 0);
	enqueue_holds(c, "a", "tenant-a", 0, 30, 150, hold);
	enqueue_holds(c, "b", "tenant-b", 0, 30, 150, hold);
	/* Kill the owner of tenant-a's shard once its runs are under way. */
	tcheck(dump,
	       tdb_wait_at_least(pg,
	                         "SELECT count(*) FROM cairn.runs WHERE concurrency_key = "
	                         "'tenant-a' AND finished_at IS NOT NULL",
	                         6, 30000),
	       "tenant-a's runs did not get under way");
	int64_t owner = tdb_int(pg, "SELECT l.owner FROM cairn.shard_leases l JOIN cairn.runs r "
	                            "ON r.part = l.part AND r.shard_group = l.shard_group "
	                            "AND r.shard = l.shard WHERE r.concurrency_key = 'tenant-a' "
	                            "LIMIT 1");
	int64_t victim_pid = tdb_intf(
	    pg, "SELECT split_part(name, ':', 2)::int FROM cairn.runners WHERE id = %" PRId64,
	    owner);
	int victim = -1;
	for (int i = 0; i < 3; i++)
		if (w[i] == victim_pid)
			victim = i;
	cr_assert(victim >= 0, "the owner %" PRId64 " is none of our workers", victim_pid);
	kill(w[victim], SIGKILL);
	tworker_stop(w[victim], SIGKILL, 10000);
	int64_t killed_at = mono_us();
	tcheck(dump, twait(all_finished, pg, 90000), "not every run finished");
	cr_assert_eq(tdb_int(pg, "SELECT count(*) FROM cairn.runs WHERE status <> 'completed' "
	                         "OR held"),
	             0, "a run did not complete");
	int steps_a, steps_b;
	int most_a = max_overlap(pg, hold, "tenant-a", victim_pid, killed_at, &steps_a);
	int most_b = max_overlap(pg, hold, "tenant-b", victim_pid, killed_at, &steps_b);
	fprintf(stderr,
	        "flow: tenant-a %d steps, at most %d at once; tenant-b %d steps, at most %d at "
	        "once; killed worker %d (pid %" PRId64 ")\n",
	        steps_a, most_a, steps_b, most_b, victim, victim_pid);
	cr_assert(steps_a >= 30 && steps_b >= 30, "a run's step did not run");
	cr_assert(most_a <= 2 && most_b <= 2, "more than 2 runs of a key ran at once (%d, %d)",
	          most_a, most_b);
	cr_assert(most_a == 2 || most_b == 2, "the limit was never used in full");
	for (int i = 0; i < 3; i++)
		if (i != victim)
			tworker_stop(w[i], SIGTERM, 30000);
	cairn_client_free(c);
	PQfinish(pg);
}

Test(flow, a_fleet_wide_concurrency_of_3_holds_for_runs_spread_over_three_workers)
{
	PGconn *pg = tdb_connect(db);
	char hold[64];
	tlog_file(hold);
	cr_assert_eq(tcli(db, NULL, NULL, "limit", "set", "t.hold", "--concurrency", "3", NULL), 0);
	pid_t w[3];
	start_fleet(pg, w, 3);
	cairn_client *c;
	cr_assert_eq(cairn_client_open(db, &c), 0);
	int64_t t0 = tnow_ms();
	enqueue_holds(c, "g", NULL, 0, 30, 200, hold);
	tcheck(dump, twait(all_finished, pg, 60000), "not every run finished");
	int64_t took = tnow_ms() - t0;
	int steps;
	int most = max_overlap(pg, hold, NULL, 0, 0, &steps);
	int64_t owners = tdb_int(pg, "SELECT count(DISTINCT l.owner) FROM cairn.runs r JOIN "
	                             "cairn.shard_leases l USING (part, shard_group, shard)");
	fprintf(stderr,
	        "flow: 30 runs of 200 ms at a fleet-wide concurrency of 3 on %" PRId64
	        " workers: at most %d at once, done in %" PRId64 " ms (2000 ms if always full)\n",
	        owners, most, took);
	cr_assert_eq(steps, 30);
	cr_assert(owners >= 2, "the runs did not spread over workers");
	cr_assert(most <= 3, "%d runs ran at once", most);
	cr_assert_eq(most, 3, "the limit was never used in full");
	cr_assert(twait(slots_given_back, pg, 5000), "slots were not given back");
	for (int i = 0; i < 3; i++)
		tworker_stop(w[i], SIGTERM, 30000);
	cairn_client_free(c);
	PQfinish(pg);
}

/* A worker whose role is not a superuser, with the privileges a worker
 * needs, claims a limited workflow's runs and holds its limit: the claim
 * counts the slots of live runners (cairn.flow_slots), which read the
 * lease backends without a catalogue only a superuser may read (on Citus
 * it failed every claim, migration 0037). */
Test(flow, a_worker_whose_role_is_not_a_superuser_holds_a_limit)
{
	PGconn *pg = tdb_connect(db);
	char role[96], sql[1024], url[2300], plugins[600], hold[64];
	snprintf(role, sizeof role, "worker_%s", PQdb(pg));
	snprintf(sql, sizeof sql,
	         "CREATE ROLE %s LOGIN; GRANT CONNECT ON DATABASE %s TO %s; "
	         "GRANT USAGE ON SCHEMA cairn TO %s; "
	         "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA cairn TO %s; "
	         "GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA cairn TO %s; "
	         "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA cairn TO %s",
	         role, PQdb(pg), role, role, role, role, role);
	tdb_exec(pg, sql);
	snprintf(url, sizeof url, "%s user=%s", db, role);
	cr_assert_eq(tcli(db, NULL, NULL, "limit", "set", "t.hold", "--concurrency", "2", NULL), 0);
	snprintf(plugins, sizeof plugins, "CAIRN_PLUGINS=%s", tflows_path());
	tlog_file(logs[0]);
	tlog_file(hold);
	pid_t w = tworker_start(url, &ports[0], logs[0], plugins, "CAIRN_CONCURRENCY=8",
	                        "CAIRN_POLL_INTERVAL=200ms", NULL);
	cairn_client *c;
	cr_assert_eq(cairn_client_open(db, &c), 0);
	enqueue_holds(c, "su", NULL, 0, 10, 100, hold);
	tcheck(dump, twait(all_finished, pg, 60000), "not every run finished");
	int steps;
	int most = max_overlap(pg, hold, NULL, 0, 0, &steps);
	cr_assert_eq(steps, 10);
	cr_assert_eq(most, 2, "%d runs ran at once under a limit of 2", most);
	char *log = tfile_read(logs[0]);
	cr_assert(!strstr(log, "permission denied"), "%s", log);
	free(log);
	cr_assert_eq(tworker_stop(w, SIGTERM, 30000), 0);
	cairn_client_free(c);
	snprintf(sql, sizeof sql,
	         "REVOKE CONNECT ON DATABASE %s FROM %s; DROP OWNED BY %s; DROP ROLE %s", PQdb(pg),
	         role, role, role);
	tdb_exec(pg, sql);
	PQfinish(pg);
}

/* Worker 0 (runner *arg) is handing shards over: its /status counts fewer
 * shards than the database says it owns (a shard being released is not
 * counted, and stays its own until its runs in flight end). */
typedef struct handing {
	PGconn *pg;
	int64_t runner;
} handing;

static int handing_over(void *arg)
{
	const handing *h = arg;
	char *body = NULL;
	if (thttp(ports[0], "GET", "/status", &body, NULL) != 200) {
		free(body);
		return 0;
	}
	cJSON *j = cJSON_Parse(body);
	free(body);
	cJSON *g = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "shards"), 0);
	cJSON *count = cJSON_GetObjectItem(g, "count");
	int counted = cJSON_IsNumber(count) ? count->valueint : -1;
	cJSON_Delete(j);
	return counted >= 0 &&
	       counted < tdb_intf(h->pg,
	                          "SELECT count(*) FROM cairn.shard_leases WHERE owner = %" PRId64,
	                          h->runner);
}

/* The shards worker 0 counts as its own (its /status "owned", ranges
 * like "0-3,7"): not those it is handing over. 1 in kept[s] for each. */
static void kept_shards(int kept[16])
{
	char *body = NULL;
	cr_assert_eq(thttp(ports[0], "GET", "/status", &body, NULL), 200);
	cJSON *j = cJSON_Parse(body);
	free(body);
	cJSON *owned = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "shards"), 0),
	                                   "owned");
	cr_assert(cJSON_IsString(owned), "no owned shards in /status");
	memset(kept, 0, 16 * sizeof *kept);
	for (const char *p = owned->valuestring; *p;) {
		char *end;
		long from = strtol(p, &end, 10), to = from;
		if (*end == '-')
			to = strtol(end + 1, &end, 10);
		for (long k = from; k <= to && k >= 0 && k < 16; k++)
			kept[k] = 1;
		p = *end == ',' ? end + 1 : end;
		if (end == p && *p)
			break;
	}
	cJSON_Delete(j);
}

/*
 * A run claimed on a shard its worker is handing over does not execute
 * there, and gives back the slot of a fleet-wide limit its claim took.
 * Worker 0 owns every shard and runs 24 runs of t.slow (8 s) on most of
 * them; worker 1 joins, and worker 0 hands some of its shards over, keeping
 * each until its t.slow runs end. Runs of t.hold (a limit of 1 at once,
 * fleet-wide) are enqueued meanwhile, half of them on shards worker 0
 * keeps and half on shards it is handing over (their keys chosen by
 * cairn.shard_of once the split is known, so that the test holds whatever
 * the split): worker 0 claims those of the shards it is handing over too
 * (the database names it their owner), and must give their slot back at
 * once, or the one slot stays taken by a run that does not execute, and
 * the runs of the shards it keeps wait behind it until the hand-over ends.
 * They finish before the first t.slow run does; and each run is given back
 * once at most while its shard is going. Leases of 10 s: on a loaded
 * machine a lease of 2 s can lapse, and the split with it.
 */
Test(flow, a_run_claimed_on_a_shard_being_handed_over_gives_its_slot_back_at_once)
{
	PGconn *pg = tdb_connect(db);
	tdb_exec(pg, "CREATE TABLE t_counter (run_id bigint PRIMARY KEY, n integer NOT NULL)");
	cr_assert_eq(tcli(db, NULL, NULL, "limit", "set", "t.hold", "--concurrency", "1", NULL), 0);
	pid_t w[2];
	w[0] = start_worker_ttl(0, 64, "10s");
	cr_assert(tdb_wait_at_least(pg,
	                            "SELECT count(*) FROM cairn.shard_leases WHERE owner IS "
	                            "NOT NULL",
	                            16, 30000),
	          "worker 0 never owned every shard");
	cairn_client *c;
	cr_assert_eq(cairn_client_open(db, &c), 0);
	/* On Citus a claim round is a statement per part (docs/architecture.md,
	 * "On Citus"), and the runs of t.hold go one at a time: half as many
	 * fit in the time the t.slow runs take. */
	enum { SLOW = 24, HALF_MAX = 12 };
	const int half = getenv("CAIRN_TEST_CITUS") ? HALF_MAX / 2 : HALF_MAX;
	cairn_enqueue_opts o[SLOW];
	cairn_enqueued out[SLOW];
	char keys[SLOW][24];
	for (int i = 0; i < SLOW; i++) {
		snprintf(keys[i], sizeof keys[i], "slow-%d", i);
		o[i] = (cairn_enqueue_opts){.key = keys[i], .input = "{\"ms\": 8000}"};
	}
	cr_assert_eq(cairn_enqueue_batch(c, "t.slow", SLOW, o, out), 0, "%s",
	             cairn_client_errmsg(c));
	tcheck(dump, tdb_wait_at_least(pg, "SELECT count(*) FROM t_counter", SLOW, 30000),
	       "the t.slow runs did not all start");
	handing h = {
	    pg, tdb_intf(pg, "SELECT id FROM cairn.runners WHERE name LIKE '%%:%d'", (int)w[0])};
	w[1] = start_worker_ttl(1, 8, "10s");
	tcheck(dump, twait(handing_over, &h, 30000), "worker 0 never began a hand-over");
	/* Keys of half runs on shards worker 0 keeps, and of half on shards it
	 * is handing over (its own in the database, not in its /status). */
	int kept[16];
	kept_shards(kept);
	char hold[64], input[128], list[2][400] = {"{", "{"};
	tlog_file(hold);
	snprintf(input, sizeof input, "{\"ms\": 10, \"log\": \"%s\"}", hold);
	cairn_enqueue_opts ho[2 * HALF_MAX];
	char hkeys[2 * HALF_MAX][24];
	int n[2] = {0, 0};
	for (int i = 0; i < 10000 && n[0] + n[1] < 2 * half; i++) {
		char key[24];
		snprintf(key, sizeof key, "h-%d", i);
		int shard = (int)tdb_intf(pg, "SELECT cairn.shard_of('%s')", key);
		int keeps = kept[shard];
		if (n[keeps] == half ||
		    (!keeps && tdb_intf(pg,
		                        "SELECT count(*) FROM cairn.shard_leases WHERE shard = %d "
		                        "AND owner = %" PRId64,
		                        shard, h.runner) != 1))
			continue;
		int k = n[0] + n[1];
		snprintf(hkeys[k], sizeof hkeys[k], "%s", key);
		ho[k] = (cairn_enqueue_opts){.key = hkeys[k], .input = input};
		snprintf(list[keeps] + strlen(list[keeps]), sizeof list[keeps] - strlen(list[keeps]),
		         "%s%d", n[keeps] ? "," : "", shard);
		n[keeps]++;
	}
	strcat(list[0], "}");
	strcat(list[1], "}");
	tcheck(dump, n[0] == half && n[1] == half,
	       "worker 0 keeps %d and hands over %d shards with keys for runs", n[1], n[0]);
	cairn_enqueued hout[2 * HALF_MAX];
	cr_assert_eq(cairn_enqueue_batch(c, "t.hold", 2 * half, ho, hout), 0, "%s",
	             cairn_client_errmsg(c));
	tcheck(dump, twait(all_finished, pg, 60000), "not every run finished");
	double given_back = tmetric(ports[0], "cairn_claims_given_back_total");
	/* The runs of t.hold of the shards worker 0 kept, and when the first
	 * t.slow run finished. */
#define KEPT " FROM cairn.runs r WHERE r.workflow = 't.hold' AND r.shard = ANY ('%s'::int[])"
#define FIRST_SLOW "(SELECT min(finished_at) FROM cairn.runs WHERE workflow = 't.slow')"
	int64_t late =
	    tdb_intf(pg, "SELECT count(*)" KEPT " AND r.finished_at > " FIRST_SLOW, list[1]);
	int64_t ahead_ms = tdb_intf(pg,
	                            "SELECT (extract(epoch FROM " FIRST_SLOW
	                            " - (SELECT max(r.finished_at)" KEPT ")) * 1000)::bigint",
	                            list[1]);
#undef KEPT
#undef FIRST_SLOW
	fprintf(stderr,
	        "flow: worker 0 gave back %.0f runs claimed on shards it was handing over; %" PRId64
	        " of the %d runs of the shards it kept finished after the first t.slow "
	        "(the last %" PRId64 " ms before it)\n",
	        given_back, late, half, ahead_ms);
	cr_assert_geq(given_back, 1, "no run was claimed on a shard being handed over");
	cr_assert_leq(given_back, 2 * half, "runs were given back again and again");
	cr_assert_eq(late, 0,
	             "runs of the shards worker 0 kept waited for the hand-over: the slot of a run "
	             "it did not execute stayed taken");
	cr_assert(twait(slots_given_back, pg, 5000), "slots were not given back");
	for (int i = 0; i < 2; i++)
		tworker_stop(w[i], SIGTERM, 30000);
	cairn_client_free(c);
	PQfinish(pg);
}

/* c waits for a lock: on Citus (CAIRN_TEST_CITUS), a lock of a reference
 * table's row may be waited for on a node, which citus_lock_waits shows. */
static int waits_for_lock(void *arg)
{
	PGconn **c = arg;
	return tdb_intf(c[0],
	                "SELECT count(*) FROM pg_stat_activity WHERE pid = %d AND "
	                "wait_event_type = 'Lock'",
	                PQbackendPID(c[1])) == 1 ||
	       (tdb_int(c[0], "SELECT count(*) FROM pg_extension WHERE extname = 'citus'") &&
	        tdb_int(c[0], "SELECT count(*) FROM citus_lock_waits") > 0);
}

/*
 * A slot given back while a claim finds its limit full is not lost: the
 * claim (cairn.flow_slots) counts the slot, marks the limit waiting and
 * commits after the give-back began; the give-back (cairn.flow_give_back)
 * waits for the limit's lock, then sees the mark, clears it and wakes the
 * runners. Had it read the mark without the lock, it would have found none,
 * and the free slot would have waited for a poll.
 */
Test(flow, a_slot_given_back_while_a_claim_finds_the_limit_full_wakes_the_runners)
{
	PGconn *claim = tdb_connect(db), *give = tdb_connect(db), *listen = tdb_connect(db);
	cr_assert_eq(tcli(db, NULL, NULL, "limit", "set", "t.hold", "--concurrency", "1", NULL), 0);
	int64_t runner = tdb_intf(listen,
	                          "INSERT INTO cairn.runners (name, address, version, groups, "
	                          "lease_pid) VALUES ('test:1', 'x', 'x', '{default}', %d) "
	                          "RETURNING id",
	                          PQbackendPID(listen));
	tdb_exec(listen, "LISTEN cairn_wake");
	char sql[256], payload[24];
	snprintf(payload, sizeof payload, "%" PRId64, runner);
	snprintf(sql, sizeof sql,
	         "INSERT INTO cairn.slots (run_id, workflow, runner_id) "
	         "VALUES (1, 't.hold', %" PRId64 ")",
	         runner);
	tdb_exec(listen, sql);
	tdb_exec(claim, "BEGIN");
	cr_assert_eq(tdb_int(claim, "SELECT cairn.flow_slots('t.hold', 1, 1)"), 0,
	             "the claim found a free slot");
	snprintf(sql, sizeof sql,
	         "SELECT count(*) FROM cairn.flow_give_back('{1}', '{%" PRId64 "}')", runner);
	cr_assert(PQsendQuery(give, sql));
	PGconn *pair[] = {listen, give};
	cr_assert(twait(waits_for_lock, pair, 10000),
	          "the give-back did not wait for the claim's lock on the limit");
	tdb_exec(claim, "COMMIT");
	PGresult *r = PQgetResult(give);
	cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
	cr_assert_str_eq(PQgetvalue(r, 0, 0), "1", "the slot was not given back");
	PQclear(r);
	while ((r = PQgetResult(give)))
		PQclear(r);
	cr_assert_eq(tdb_int(listen, "SELECT count(*) FROM cairn.limits WHERE waiting"), 0,
	             "the limit still says a claim waits");
	char *note = tdb_next_notification(listen, 10000);
	cr_assert(note && strcmp(note, payload) == 0, "the runners were not woken");
	free(note);
	PQfinish(claim);
	PQfinish(give);
	PQfinish(listen);
}

Test(flow, a_run_in_a_durable_sleep_holds_no_slot_and_held_runs_go_when_the_limit_is_raised)
{
	PGconn *pg = tdb_connect(db);
	cr_assert_eq(tcli(db, NULL, NULL, "limit", "set", "t.hold", "--key-concurrency", "1", NULL),
	             0);
	pid_t w = start_worker(0, 4);
	char *out = NULL, *err = NULL;
	/* s sleeps 3 s between its two steps; n runs while it sleeps. */
	cr_assert_eq(tcli(db, &out, &err, "enqueue", "t.hold", "--key", "s", "--concurrency-key",
	                  "k", "--input", "{\"ms\": 10, \"sleep\": 3000}", NULL),
	             0, "%s", err);
	free(out);
	free(err);
	cr_assert(tdb_wait_at_least(pg, "SELECT count(*) FROM cairn.runs WHERE status = 'sleeping'",
	                            1, 20000),
	          "s never slept");
	cr_assert_eq(tcli(db, &out, &err, "enqueue", "t.hold", "--key", "n", "--concurrency-key",
	                  "k", "--input", "{\"ms\": 10}", "--wait", "--timeout", "10s", NULL),
	             0, "n did not run while s slept: %s", err);
	free(out);
	free(err);
	cr_assert_eq(tdb_int(pg, "SELECT count(*) FROM cairn.runs WHERE key = 's' AND "
	                         "status = 'sleeping'"),
	             1, "s did not sleep through n's run");
	tcheck(dump,
	       tdb_wait_at_least(pg,
	                         "SELECT count(*) FROM cairn.runs WHERE key = 's' AND "
	                         "status = 'completed'",
	                         1, 20000),
	       "s did not finish");

	/* One long run holds the slot; the next one waits, held, in sight. */
	cr_assert_eq(tcli(db, &out, &err, "enqueue", "t.hold", "--key", "long", "--concurrency-key",
	                  "k", "--input", "{\"ms\": 20000}", NULL),
	             0, "%s", err);
	free(out);
	free(err);
	cr_assert(tdb_wait_at_least(pg,
	                            "SELECT count(*) FROM cairn.runs WHERE key = 'long' "
	                            "AND status = 'running'",
	                            1, 20000));
	cr_assert_eq(tcli(db, &out, &err, "enqueue", "t.hold", "--key", "next", "--concurrency-key",
	                  "k", "--input", "{\"ms\": 10}", "--json", NULL),
	             0, "%s", err);
	cr_assert(strstr(out, "\"held\":\ttrue"), "the second run was not held: %s", out);
	free(out);
	free(err);
	cr_assert_eq(tcli(db, &out, &err, "status", "t.hold/next", NULL), 0, "%s", err);
	cr_assert(strstr(out, "pending, held: waiting for a slot of its concurrency key"), "%s",
	          out);
	cr_assert(strstr(out, "conc. key  k"), "%s", out);
	cr_assert(
	    strstr(out,
	           "waiting    for a slot of its concurrency key: 1 of its runs execute at once"),
	    "%s", out);
	free(out);
	free(err);
	/* The worker shows the slot it holds and the run it held back. */
	char *body = NULL;
	cr_assert_eq(thttp(ports[0], "GET", "/status", &body, NULL), 200);
	cr_assert(strstr(body, "\"slots_in_use\":{\"t.hold\":1}"), "%s", body);
	free(body);
	cr_assert_eq(thttp(ports[0], "GET", "/metrics", &body, NULL), 200);
	cr_assert(strstr(body, "cairn_flow_slots_in_use{workflow=\"t.hold\"} 1\n"), "%s", body);
	free(body);
	int64_t t0 = tnow_ms();
	cr_assert_eq(tcli(db, NULL, NULL, "limit", "set", "t.hold", "--key-concurrency", "2", NULL),
	             0);
	cr_assert(tdb_wait_at_least(pg,
	                            "SELECT count(*) FROM cairn.runs WHERE key = 'next' "
	                            "AND status = 'completed'",
	                            1, 5000),
	          "raising the limit did not let the held run go");
	fprintf(stderr, "flow: a held run went %" PRId64 " ms after the limit was raised\n",
	        tnow_ms() - t0);
	tworker_stop(w, SIGTERM, 30000);
	PQfinish(pg);
}

Test(flow, a_rate_of_5_per_second_spreads_50_runs_over_two_workers_across_at_least_9_seconds)
{
	PGconn *pg = tdb_connect(db);
	cr_assert_eq(tcli(db, NULL, NULL, "limit", "set", "t.hold", "--rate", "5/s", NULL), 0);
	pid_t w[2];
	start_fleet(pg, w, 2);
	cairn_client *c;
	cr_assert_eq(cairn_client_open(db, &c), 0);
	enqueue_holds(c, "r", NULL, 0, 50, 1, NULL);
	tcheck(dump, twait(all_finished, pg, 60000), "the 50 runs did not finish");
	int64_t span = tdb_int(pg, "SELECT (extract(epoch FROM max(started_at) - min(started_at)) "
	                           "* 1000)::bigint FROM cairn.runs");
	/* Strict: no second holds more than 5 starts. */
	int64_t crowded = tdb_int(
	    pg, "WITH s AS MATERIALIZED (SELECT started_at FROM cairn.runs) "
	        "SELECT count(*) FROM s a WHERE (SELECT count(*) FROM s b "
	        "WHERE b.started_at >= a.started_at "
	        "AND b.started_at < a.started_at + interval '1 second') > 5");
	int64_t owners = tdb_int(pg, "SELECT count(DISTINCT shard) FROM cairn.runs");
	fprintf(stderr, "flow: 50 runs at 5/s started over %" PRId64 " ms, in %" PRId64 " shards\n",
	        span, owners);
	cr_assert(span >= 9000, "50 runs at 5/s started within %" PRId64 " ms", span);
	cr_assert_eq(crowded, 0, "%" PRId64 " starts had more than 5 in the second after them",
	             crowded);
	for (int i = 0; i < 2; i++)
		tworker_stop(w[i], SIGTERM, 30000);
	cairn_client_free(c);
	PQfinish(pg);
}

Test(flow, high_priority_runs_enqueued_behind_a_backlog_start_first)
{
	PGconn *pg = tdb_connect(db);
	cairn_client *c;
	cr_assert_eq(cairn_client_open(db, &c), 0);
	enqueue_holds(c, "low", NULL, 0, 200, 1, NULL);
	enqueue_holds(c, "high", NULL, 10, 5, 1, NULL);
	enqueue_holds(c, "neg", NULL, -5, 5, 1, NULL);
	pid_t w = start_worker(0, 1);
	tcheck(dump, twait(all_finished, pg, 60000), "the runs did not finish");
	int64_t before = tdb_int(pg, "SELECT count(*) FROM cairn.runs l WHERE l.key LIKE 'low-%' "
	                             "AND l.started_at < (SELECT max(started_at) FROM cairn.runs "
	                             "WHERE key LIKE 'high-%')");
	int64_t after = tdb_int(pg, "SELECT count(*) FROM cairn.runs l WHERE l.key LIKE 'low-%' "
	                            "AND l.started_at > (SELECT min(started_at) FROM cairn.runs "
	                            "WHERE key LIKE 'neg-%')");
	fprintf(stderr,
	        "flow: %" PRId64 " low runs started before the last high one, %" PRId64
	        " after the first negative one\n",
	        before, after);
	cr_assert_eq(before, 0, "%" PRId64 " runs of priority 0 started before priority 10 did",
	             before);
	cr_assert_eq(after, 0, "%" PRId64 " runs of priority 0 started after priority -5 did",
	             after);
	tworker_stop(w, SIGTERM, 30000);
	cairn_client_free(c);
	PQfinish(pg);
}

/* The runs whose step started, in the order they started, from the S lines
 * of the hold log of one executor: their ids in order[], how many. */
static int start_order(const char *path, int64_t *order, int cap)
{
	char *text = tfile_read(path);
	cr_assert(text, "no hold log");
	int n = 0;
	for (char *line = strtok(text, "\n"); line && n < cap; line = strtok(NULL, "\n")) {
		int64_t run, pid, t;
		char k;
		if (sscanf(line, "%c %" SCNd64 " %" SCNd64 " %" SCNd64, &k, &run, &pid, &t) == 4 &&
		    k == 'S')
			order[n++] = run;
	}
	free(text);
	return n;
}

typedef struct hold_log {
	const char *path;
	int want;
} hold_log;

static int started_at_least(void *arg)
{
	const hold_log *h = arg;
	int64_t order[512];
	return start_order(h->path, order, 512) >= h->want;
}

/* Priority orders the worker's queue, not only its claims: runs of
 * priority 10 claimed while a backlog of priority 0 waits in the worker's
 * queue execute next, ahead of it. Told by when each run's first
 * instruction runs (its step's S line), on one executor. And as they
 * overtake, the queued runs' counts stay void (start_queued): the START of
 * a run that overtook must not count the backlog it overtook as started,
 * which a worker's crash would then count against each of them. */
Test(flow, a_high_priority_run_claimed_later_overtakes_the_runs_queued_in_its_worker)
{
	PGconn *pg = tdb_connect(db);
	cairn_client *c;
	cr_assert_eq(cairn_client_open(db, &c), 0);
	char hold[64];
	tlog_file(hold);
	pid_t w = start_worker(0, 1);
	cr_assert(tdb_wait_at_least(pg, "SELECT count(*) FROM cairn.shard_leases", 16, 30000),
	          "the worker did not take the shards");
	enum { LOW = 60, HIGH = 5 };
	enqueue_holds(c, "low", NULL, 0, LOW, 100, hold);
	/* The backlog is claimed: in the worker's queue, one executing. */
	tcheck(dump,
	       tdb_wait_at_least(pg,
	                         "SELECT count(*) FROM cairn.runs WHERE key LIKE 'low-%' "
	                         "AND status <> 'pending'",
	                         LOW, 30000),
	       "the worker did not claim the backlog");
	hold_log h = {hold, 1};
	tcheck(dump, twait(started_at_least, &h, 30000), "no run started");
	int64_t before[512];
	int started = start_order(hold, before, 512);
	cr_assert_lt(started, LOW / 3, "the backlog drained before the test could queue behind it");
	enqueue_holds(c, "high", NULL, 10, HIGH, 1, hold);
	h.want = started + HIGH + LOW / 3;
	tcheck(dump, twait(started_at_least, &h, 60000), "the runs did not start");
	/* Queued lows counted as started although not finished: those a
	 * START covered, at most the window of one executor and the run
	 * executing, never the backlog the highs overtook. */
	int64_t counted = tdb_int(pg, "SELECT count(*) FROM cairn.runs r "
	                              "JOIN cairn.runners w ON w.id = r.queued_by "
	                              "WHERE r.key LIKE 'low-%' AND r.finished_at IS NULL "
	                              "AND r.queued_seq <= w.started_upto");
	tcheck(dump, twait(all_finished, pg, 60000), "the runs did not finish");
	int64_t order[512];
	int n = start_order(hold, order, 512);
	cr_assert_eq(n, LOW + HIGH, "%d step starts", n);
	/* Lows that started after the highs were enqueued and before the last
	 * high did: the one executing and those taken while the highs were
	 * being claimed. Queued first in, first out, all of the backlog. */
	int last_high = -1, lows_between = 0;
	for (int i = started; i < n; i++)
		if (tdb_intf(pg, "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
		             " AND key LIKE 'high-%%'", order[i]) == 1)
			last_high = i;
	for (int i = started; i < last_high; i++)
		lows_between += tdb_intf(pg, "SELECT count(*) FROM cairn.runs WHERE id = %" PRId64
		                         " AND key LIKE 'low-%%'", order[i]) == 1;
	fprintf(stderr,
	        "flow: %d runs had started when the highs came; %d lows started before the "
	        "last high (of %d queued); %" PRId64 " queued lows counted as started\n",
	        started, lows_between, LOW - started, counted);
	cr_assert_lt(lows_between, 10, "%d runs of priority 0 queued before them started first",
	             lows_between);
	cr_assert_leq(counted, 4, "%" PRId64 " queued runs count as started", counted);
	tworker_stop(w, SIGTERM, 30000);
	cairn_client_free(c);
	PQfinish(pg);
}

/* A big key's backlog of 2,000 short runs drains on one worker; 3 runs of a
 * small key enqueued meanwhile must finish within 3 s with most of the
 * backlog still queued: with a key limit, and without one (fair_share_due:
 * the runs a key may have due, checked before the worker starts). */
static void small_key_behind_a_backlog(const char *what, int fair_share_due)
{
	PGconn *pg = tdb_connect(db);
	cairn_client *c;
	cr_assert_eq(cairn_client_open(db, &c), 0);
	enqueue_holds(c, "big", "big", 0, 2000, 5, NULL);
	if (fair_share_due)
		cr_assert_eq(tdb_int(pg, "SELECT count(*) FROM cairn.runs WHERE NOT held"),
		             fair_share_due, "a key's fair share is 64 runs due at once");
	pid_t w = start_worker(0, 4);
	cr_assert(tdb_wait_at_least(
	    pg, "SELECT count(*) FROM cairn.runs WHERE finished_at IS NOT NULL", 10, 30000));
	int64_t t0 = tnow_ms();
	enqueue_holds(c, "small", "small", 0, 3, 5, NULL);
	tcheck(dump,
	       tdb_wait_at_least(pg,
	                         "SELECT count(*) FROM cairn.runs WHERE key LIKE 'small-%' "
	                         "AND status = 'completed'",
	                         3, 10000),
	       "the small key's runs did not finish");
	int64_t waited = tnow_ms() - t0;
	int64_t left = tdb_int(pg, "SELECT count(*) FROM cairn.runs WHERE key LIKE 'big-%' "
	                           "AND finished_at IS NULL");
	fprintf(stderr,
	        "flow: %s: the small key's 3 runs finished %" PRId64
	        " ms after enqueue, with %" PRId64 " of the big key's 2000 still to run\n",
	        what, waited, left);
	cr_assert(left > 1000, "the big key's backlog was nearly gone (%" PRId64 " left)", left);
	cr_assert(waited < 3000, "the small key waited %" PRId64 " ms", waited);
	if (fair_share_due)
		tcheck(dump, twait(all_finished, pg, 60000), "the big key's backlog did not drain");
	tworker_stop(w, SIGTERM, 30000);
	cairn_client_free(c);
	PQfinish(pg);
}

Test(flow, a_small_key_starts_at_once_while_a_big_keys_backlog_drains)
{
	cr_assert_eq(tcli(db, NULL, NULL, "limit", "set", "t.hold", "--key-concurrency", "2", NULL),
	             0);
	small_key_behind_a_backlog("key limit 2", 0);
}

Test(flow, bad_limits_and_options_are_refused_by_name_and_write_nothing)
{
	PGconn *pg = tdb_connect(db);
	const struct {
		const char *args[8];
		const char *says;
	} bad[] = {
	    {{"limit", "set", "w", "--key-concurrency", "0"}, "--key-concurrency"},
	    {{"limit", "set", "w", "--key-concurrency", "lots"}, "invalid number \"lots\""},
	    {{"limit", "set", "w", "--rate", "5"}, "invalid rate \"5\""},
	    {{"limit", "set", "w", "--rate", "0/s"}, "invalid rate \"0/s\""},
	    {{"limit", "set", "w", "--key-rate", "5/2d"}, "from 1ms to 1d"},
	    {{"limit", "set", "w"}, "needs --key-concurrency, --concurrency, --rate or"},
	    {{"limit", "set", "bad name!", "--rate", "1/s"}, "workflow"},
	    {{"limit", "delete", "w"}, "has no limits"},
	    {{"limit", "frob"}, "unknown subcommand \"frob\""},
	    {{"enqueue", "t.hold", "--priority", "5000"}, "--priority"},
	    {{"enqueue", "t.hold", "--concurrency-key", ""}, "--concurrency-key"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *argv[10] = {0};
		for (int k = 0; bad[i].args[k]; k++)
			argv[k] = bad[i].args[k];
		char *out = NULL, *err = NULL;
		int rc = tcli_argv(db, &out, &err, argv);
		cr_assert_neq(rc, 0, "%s %s succeeded", bad[i].args[0], bad[i].args[1]);
		cr_assert(err && strstr(err, bad[i].says), "case %zu: wanted \"%s\" in: %s", i,
		          bad[i].says, err ? err : "");
		free(out);
		free(err);
	}
	cr_assert_eq(tdb_int(pg, "SELECT count(*) FROM cairn.limits"), 0);
	cr_assert_eq(tdb_int(pg, "SELECT count(*) FROM cairn.runs"), 0);
	char *out = NULL, *err = NULL;
	cr_assert_eq(tcli(db, &out, &err, "limit", "set", "w", "--key-concurrency", "3", "--rate",
	                  "600/m", NULL),
	             0, "%s", err);
	free(out);
	free(err);
	cr_assert_eq(tcli(db, &out, &err, "limit", "set", "w", "--rate", "off", "--key-rate",
	                  "2/500ms", "--json", NULL),
	             0, "%s", err);
	cr_assert(strstr(out, "\"key_concurrency\":\t3"), "set forgot the key limit: %s", out);
	cr_assert(strstr(out, "\"rate\":\tnull"), "%s", out);
	cr_assert(strstr(out, "\"period_ms\":\t500"), "%s", out);
	free(out);
	free(err);
	cr_assert_eq(tcli(db, &out, &err, "limit", "list", NULL), 0, "%s", err);
	cr_assert(strstr(out, "2/500ms"), "%s", out);
	free(out);
	free(err);
	cr_assert_eq(tcli(db, NULL, NULL, "limit", "delete", "w", NULL), 0);
	cr_assert_eq(tdb_int(pg, "SELECT count(*) FROM cairn.limits"), 0);
	PQfinish(pg);
}

Test(flow, the_sql_and_http_front_doors_place_hold_and_prioritize_as_the_client_does)
{
	PGconn *pg = tdb_connect(db);
	cr_assert_eq(tcli(db, NULL, NULL, "limit", "set", "t.hold", "--key-concurrency", "1", NULL),
	             0);
	cairn_client *c;
	cr_assert_eq(cairn_client_open(db, &c), 0);
	/* No worker: the first run of k is due and takes k's one slot. */
	enqueue_holds(c, "c", "k", 0, 1, 10, NULL);
	tdb_exec(pg, "SELECT cairn.enqueue('t.hold', '{}', 'sql-1', concurrency_key => 'k', "
	             "priority => 5)");
	cr_assert_eq(tdb_int(pg, "SELECT count(*) FROM cairn.runs WHERE key = 'sql-1' AND held "
	                         "AND priority = 5 AND concurrency_key = 'k' AND shard = "
	                         "(SELECT shard FROM cairn.runs WHERE key = 'c-0')"),
	             1, "cairn.enqueue did not place and hold the run as the client does");
	PGresult *r = PQexec(pg, "SELECT cairn.enqueue('t.hold', priority => 5000)");
	cr_assert_eq(PQresultStatus(r), PGRES_FATAL_ERROR);
	cr_assert(strstr(PQresultErrorMessage(r), "invalid priority 5000"), "%s",
	          PQresultErrorMessage(r));
	PQclear(r);
	r = PQexec(pg, "SELECT cairn.enqueue('t.hold', concurrency_key => '')");
	cr_assert(strstr(PQresultErrorMessage(r), "concurrency_key: key must not be empty"), "%s",
	          PQresultErrorMessage(r));
	PQclear(r);

	char plugins[600];
	snprintf(plugins, sizeof plugins, "CAIRN_PLUGINS=%s", tflows_path());
	tlog_file(logs[0]);
	pid_t w =
	    tworker_start(db, &ports[0], logs[0], plugins, "CAIRN_HTTP_TOKEN=flow-token-0123456789",
	                  "CAIRN_POLL_INTERVAL=200ms", NULL);
	char *body = NULL;
	long st =
	    thttp_send(ports[0], "POST", "/v1/runs", "Bearer flow-token-0123456789",
	               "{\"workflow\": \"t.hold\", \"key\": \"http-1\", \"input\": {\"ms\": 10}, "
	               "\"concurrency_key\": \"k\", \"priority\": -3}",
	               &body, NULL);
	cr_assert_eq(st, 201, "%s", body);
	free(body);
	cr_assert_eq(tdb_int(pg, "SELECT count(*) FROM cairn.runs WHERE key = 'http-1' AND "
	                         "priority = -3 AND concurrency_key = 'k' AND shard = "
	                         "(SELECT shard FROM cairn.runs WHERE key = 'c-0')"),
	             1);
	st = thttp_send(ports[0], "POST", "/v1/runs", "Bearer flow-token-0123456789",
	                "{\"workflow\": \"t.hold\", \"priority\": \"high\"}", &body, NULL);
	cr_assert_eq(st, 400, "%s", body);
	cr_assert(strstr(body, "invalid priority"), "%s", body);
	free(body);
	/* All three of k run, one at a time, the higher priority first. */
	tcheck(dump, twait(all_finished, pg, 30000), "k's runs did not finish");
	cr_assert_eq(tdb_int(pg, "SELECT ((SELECT started_at FROM cairn.runs WHERE key = 'sql-1') "
	                         "< (SELECT started_at FROM cairn.runs WHERE key = 'http-1'))::int"),
	             1, "priority 5 did not start before priority -3");
	tworker_stop(w, SIGTERM, 30000);
	cairn_client_free(c);
	PQfinish(pg);
}

/* Runs t.hold once and waits for it. */
static void run_once(const char *key)
{
	char *out = NULL, *err = NULL;
	cr_assert_eq(tcli(db, &out, &err, "enqueue", "t.hold", "--key", key, "--input",
	                  "{\"ms\": 1}", "--wait", "--timeout", "20s", NULL),
	             0, "%s did not run: %s", key, err);
	free(out);
	free(err);
}

Test(flow, the_poller_claims_with_limits_only_while_some_exist)
{
	pid_t w = start_worker(0, 2);
	run_once("before");
	tcheck(dump, tmetric(ports[0], "cairn_poller_limits") == 0,
	       "with no limit the poller still claims with limits");
	cr_assert_eq(tcli(db, NULL, NULL, "limit", "set", "t.hold", "--key-concurrency", "1", NULL),
	             0);
	run_once("with");
	tcheck(dump, tmetric(ports[0], "cairn_poller_limits") == 1,
	       "a limit was set but the poller does not claim with limits");
	cr_assert_eq(tcli(db, NULL, NULL, "limit", "delete", "t.hold", NULL), 0);
	run_once("after");
	tcheck(dump, tmetric(ports[0], "cairn_poller_limits") == 0,
	       "the limit is gone but the poller still claims with limits");
	tworker_stop(w, SIGTERM, 30000);
}

Test(flow, without_a_key_limit_a_small_key_still_starts_at_once_behind_a_big_keys_backlog)
{
	small_key_behind_a_backlog("no key limit", 64);
}
