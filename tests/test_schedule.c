/*
 * test_schedule.c - schedules: due times in a time zone across its
 * daylight-saving changes (PostgreSQL's tz rules), `cairn schedule` and its
 * bad input, and a one-second schedule fired by three real workers while
 * the scheduler's worker is killed with -9: one run every second, none
 * twice, none missing.
 */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "cairn.h"
#include "cron.h"
#include "schedule.h"
#include "support.h"

static const char *db;

static void setup(void)
{
	db = tdb_new_migrated_shards(16);
}

TestSuite(schedule, .init = setup);

/* Unix ms of a UTC time text. */
static int64_t utc_ms(PGconn *pg, const char *text)
{
	char sql[160];
	snprintf(sql, sizeof sql, "SELECT (extract(epoch FROM timestamptz '%s+00') * 1000)::bigint",
	         text);
	return tdb_int(pg, sql);
}

/* The fires of expr in tz from a to b (UTC texts), as UTC texts, joined. */
static void fires(PGconn *pg, const char *expr, const char *tz, const char *a, const char *b,
                  buf *out)
{
	cron c;
	char err[512];
	cr_assert_eq(cron_parse(expr, &c, err, sizeof err), 0, "%s", err);
	int64_t due[SCHEDULE_FIRES_MAX], next;
	int n;
	buf e = BUF_INIT;
	cr_assert_eq(schedule_due(pg, &c, tz, utc_ms(pg, a), utc_ms(pg, b), 0, due, &n, &next, &e),
	             0, "%s", buf_str(&e));
	buf_free(&e);
	for (int i = 0; i < n; i++) {
		char sql[160];
		snprintf(sql, sizeof sql,
		         "SELECT to_char(to_timestamp(%" PRId64
		         " / 1000.0) AT TIME ZONE 'UTC', 'MM-DD HH24:MI')",
		         due[i]);
		char *t = tdb_str(pg, sql);
		buf_printf(out, "%s%s", i ? ", " : "", t);
		free(t);
	}
}

Test(schedule, a_daily_time_fires_once_a_day_across_both_daylight_saving_changes)
{
	PGconn *pg = tdb_connect(db);
	buf b = BUF_INIT;
	/* 2026-03-08: New York's clocks jump from 02:00 to 03:00; 02:30 fires
	 * at 03:30 EDT (07:30 UTC), once. */
	fires(pg, "30 2 * * *", "America/New_York", "2026-03-07 00:00:00", "2026-03-10 00:00:00",
	      &b);
	cr_assert_str_eq(buf_str(&b), "03-07 07:30, 03-08 07:30, 03-09 06:30");
	buf_reset(&b);
	/* 2026-11-01: 01:00-02:00 happens twice; 01:30 fires once. */
	fires(pg, "30 1 * * *", "America/New_York", "2026-10-31 00:00:00", "2026-11-03 00:00:00",
	      &b);
	cr_assert_eq(strlen(buf_str(&b)), strlen("10-31 05:30, 11-01 06:30, 11-02 06:30"), "%s",
	             buf_str(&b));
	cr_assert(strncmp(buf_str(&b), "10-31 05:30, 11-01 0", 20) == 0 &&
	              strstr(buf_str(&b), ", 11-02 06:30"),
	          "%s", buf_str(&b));
	buf_reset(&b);
	/* Berlin, every hour across its spring change: 02:00 does not exist. */
	fires(pg, "0 * * * *", "Europe/Berlin", "2026-03-29 00:00:00", "2026-03-29 02:00:00", &b);
	cr_assert_str_eq(buf_str(&b), "03-29 00:00, 03-29 01:00, 03-29 02:00");
	buf_free(&b);
	PQfinish(pg);
}

Test(schedule, the_cli_creates_lists_pauses_resumes_and_deletes_and_names_bad_input)
{
	char *out = NULL, *err = NULL;
	cr_assert_eq(tcli(db, &out, &err, "schedule", "create", "report", "--cron", "0 6 * * MON",
	                  "--tz", "Europe/Berlin", "--workflow", "noop", "--input", "{\"r\": 1}",
	                  "--json", NULL),
	             0, "%s", err);
	cr_assert(strstr(out, "\"next_at\""), "%s", out);
	free(out);
	free(err);
	cr_assert_eq(tcli(db, &out, &err, "schedule", "create", "report", "--cron", "* * * * *",
	                  "--workflow", "noop", NULL),
	             1);
	cr_assert(strstr(err, "exists already"), "%s", err);
	free(out);
	free(err);
	static const char *const bad[][3] = {{"--cron", "* * * *", "--cron: invalid cron"},
	                                     {"--tz", "Mars/Olympus", "--tz: unknown time zone"},
	                                     {"--overlap", "queue", "--overlap: invalid overlap"},
	                                     {"--catchup", "some", "--catchup: invalid catchup"}};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *expr = strcmp(bad[i][0], "--cron") ? "* * * * *" : bad[i][1];
		int rc = strcmp(bad[i][0], "--cron")
		             ? tcli(db, &out, &err, "schedule", "create", "x", "--cron", expr,
		                    "--workflow", "noop", bad[i][0], bad[i][1], NULL)
		             : tcli(db, &out, &err, "schedule", "create", "x", "--cron", expr,
		                    "--workflow", "noop", NULL);
		cr_assert_eq(rc, 2, "%s %s", bad[i][0], bad[i][1]);
		cr_assert(strstr(err, bad[i][2]), "%s", err);
		free(out);
		free(err);
	}
	cr_assert_eq(tcli(db, &out, &err, "schedule", "pause", "report", NULL), 0, "%s", err);
	free(out);
	free(err);
	cr_assert_eq(tcli(db, &out, &err, "schedule", "list", "--json", NULL), 0, "%s", err);
	cr_assert(strstr(out, "\"paused\":\ttrue") && strstr(out, "\"tz\":\t\"Europe/Berlin\""),
	          "%s", out);
	free(out);
	free(err);
	cr_assert_eq(tcli(db, &out, &err, "schedule", "resume", "report", NULL), 0, "%s", err);
	free(out);
	free(err);
	cr_assert_eq(tcli(db, &out, &err, "schedule", "delete", "report", NULL), 0, "%s", err);
	free(out);
	free(err);
	cr_assert_eq(tcli(db, &out, &err, "schedule", "delete", "report", NULL), 3);
	free(out);
	free(err);
}

typedef struct fleet {
	pid_t pid[3];
	char log[3][64];
} fleet;

static pid_t start(fleet *f, int i)
{
	tlog_file(f->log[i]);
	return f->pid[i] = tworker_start(db, NULL, f->log[i], "CAIRN_POLL_INTERVAL=200ms",
	                                 "CAIRN_HEARTBEAT_INTERVAL=200ms", "CAIRN_RUNNER_TTL=2s",
	                                 "CAIRN_REBALANCE_INTERVAL=500ms", NULL);
}

/* Which worker runs the scheduler now (its last word on cairn.scheduler
 * is "singleton started"), or -1. */
static int scheduler_of(fleet *f)
{
	for (int i = 0; i < 3; i++) {
		char *log = f->pid[i] > 0 ? tfile_read(f->log[i]) : NULL;
		int running = 0;
		for (const char *p = log; p && *p;) {
			const char *eol = strchr(p, '\n');
			size_t len = eol ? (size_t)(eol - p) : strlen(p);
			static const char name[] = "singleton=cairn.scheduler",
			                  started[] = "msg=\"singleton started\"";
			if (memmem(p, len, name, sizeof name - 1))
				running = memmem(p, len, started, sizeof started - 1) != NULL;
			p += len + (eol != NULL);
		}
		free(log);
		if (running)
			return i;
	}
	return -1;
}

static int has_scheduler(void *arg)
{
	return scheduler_of(arg) >= 0;
}

Test(schedule, a_one_second_schedule_fires_every_second_once_through_kill_9_of_its_scheduler)
{
	fleet f;
	memset(&f, 0, sizeof f);
	for (int i = 0; i < 3; i++)
		start(&f, i);
	PGconn *pg = tdb_connect(db);
	cr_assert(
	    tdb_wait_at_least(pg, "SELECT count(DISTINCT owner) FROM cairn.shard_leases", 3, 20000),
	    "the shards never spread over three workers");
	char *out = NULL, *err = NULL;
	cr_assert_eq(tcli(db, &out, &err, "schedule", "create", "tick", "--cron", "* * * * * *",
	                  "--workflow", "noop", "--catchup", "all", "--overlap", "allow", NULL),
	             0, "%s", err);
	free(out);
	free(err);
	const char *count =
	    "SELECT count(*) FROM cairn.runs WHERE key LIKE 'cairn.schedule:tick:%'";
	cr_assert(tdb_wait_at_least(pg, count, 3, 20000), "the schedule never fired");
	if (!twait(has_scheduler, &f, 20000)) {
		for (int i = 0; i < 3; i++) {
			char *log = tfile_read(f.log[i]);
			fprintf(stderr, "--- worker %d:\n%s\n", i, log ? log : "");
			free(log);
		}
		cr_assert_fail("no worker runs cairn.scheduler");
	}
	int victim = scheduler_of(&f);
	tworker_stop(f.pid[victim], SIGKILL, 5000);
	f.pid[victim] = 0;
	int64_t at_kill = tdb_int(pg, count);
	cr_assert(tdb_wait_at_least(pg, count, at_kill + 5, 30000),
	          "the schedule did not fire again after its scheduler was killed");
	cr_assert_eq(tcli(db, &out, &err, "schedule", "pause", "tick", NULL), 0, "%s", err);
	free(out);
	free(err);
	/* Every second from the first fire to the last, each once. */
	int64_t n = tdb_int(pg, count);
	int64_t span = tdb_int(pg, "SELECT (max(x) - min(x)) / 1000 + 1 FROM ("
	                           "  SELECT split_part(key, ':', 3)::bigint AS x FROM cairn.runs "
	                           "  WHERE key LIKE 'cairn.schedule:tick:%') k");
	int64_t odd = tdb_int(pg, "SELECT count(*) FROM cairn.runs WHERE key LIKE "
	                          "'cairn.schedule:tick:%' AND split_part(key, ':', 3)::bigint % "
	                          "1000 <> 0");
	fprintf(stderr,
	        "test_schedule: %" PRId64 " fires over %" PRId64 " s, %" PRId64
	        " at the kill of worker %d\n",
	        n, span, at_kill, victim);
	cr_assert_eq(n, span, "%" PRId64 " runs for %" PRId64 " seconds", n, span);
	cr_assert_eq(odd, 0);
	PQfinish(pg);
	for (int i = 0; i < 3; i++)
		if (f.pid[i] > 0)
			cr_assert_eq(tworker_stop(f.pid[i], SIGTERM, 30000), 0);
}
