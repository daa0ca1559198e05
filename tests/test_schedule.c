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
#include <time.h>

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

/* Unix ms as "MM-DD HH:MM" (UTC, ":SS" when not 0) after prev (or -1), the
 * date only where it changes: "03-28 23:00 23:30 03-29 00:00". */
static void fire_text(int64_t ms, int64_t prev, buf *out)
{
	time_t s = (time_t)(ms / 1000), p = (time_t)(prev / 1000);
	struct tm t, q;
	gmtime_r(&s, &t);
	gmtime_r(&p, &q);
	if (out->len)
		buf_puts(out, " ");
	if (prev < 0 || t.tm_yday != q.tm_yday)
		buf_printf(out, "%02d-%02d ", t.tm_mon + 1, t.tm_mday);
	buf_printf(out, "%02d:%02d", t.tm_hour, t.tm_min);
	if (t.tm_sec)
		buf_printf(out, ":%02d", t.tm_sec);
}

/*
 * The fires of expr in tz from a to b (UTC texts, included) as the
 * scheduler finds them: it wakes at each next time schedule_due gave and
 * asks what is due then (from that time to a moment later), as fire_text
 * joins them; and into all what one catch-up call over the whole span gives.
 */
static void scheduler_fires(PGconn *pg, const char *expr, const char *tz, const char *a,
                            const char *b, buf *out, buf *all)
{
	cron c;
	char err[512];
	cr_assert_eq(cron_parse(expr, &c, err, sizeof err), 0, "%s", err);
	static int64_t due[SCHEDULE_FIRES_MAX];
	int64_t next = utc_ms(pg, a), end = utc_ms(pg, b), prev = -1;
	int n;
	buf e = BUF_INIT;
	while (next <= end) {
		int64_t woke = next;
		cr_assert_eq(schedule_due(pg, &c, tz, woke, woke + 100, 0, due, &n, &next, &e), 0,
		             "%s", buf_str(&e));
		for (int i = 0; i < n; i++) {
			fire_text(due[i], prev, out);
			prev = due[i];
		}
		cr_assert(next > woke, "%s in %s: the next time %" PRId64 " is not after %" PRId64,
		          expr, tz, next, woke);
	}
	cr_assert_eq(schedule_due(pg, &c, tz, utc_ms(pg, a), end, 0, due, &n, &next, &e), 0, "%s",
	             buf_str(&e));
	for (int i = 0; i < n; i++)
		fire_text(due[i], i ? due[i - 1] : -1, all);
	buf_free(&e);
}

/*
 * Berlin's two changes of 2026, each over its whole local day: on 03-29 the
 * clocks jump from 02:00 CET (01:00 UTC) to 03:00 CEST, on 10-25 they fall
 * back from 03:00 CEST (01:00 UTC) to 02:00 CET. A wall time that does not
 * exist fires once, at the instant it would have had (02:30 at 03:30 CEST,
 * 01:30 UTC), and where that is the instant of a time that exists (02:00 and
 * 03:00 at 01:00 UTC) the two are one fire; one that happens twice fires
 * once, at its first occurrence (CEST), and nothing fires again in the
 * repeated hour.
 */
Test(schedule,
     berlins_2026_changes_fire_each_wall_time_once_skipped_ones_shifted_repeated_ones_first)
{
	static const char *const cases[][3] = {
	    {"30 2 * * *", "spring", "03-29 01:30"},
	    {"*/30 * * * *", "spring",
	     "03-28 23:00 23:30 03-29 00:00 00:30 01:00 01:30 02:00 02:30 03:00 03:30 04:00 04:30 "
	     "05:00 05:30 06:00 06:30 07:00 07:30 08:00 08:30 09:00 09:30 10:00 10:30 11:00 11:30 "
	     "12:00 12:30 13:00 13:30 14:00 14:30 15:00 15:30 16:00 16:30 17:00 17:30 18:00 18:30 "
	     "19:00 19:30 20:00 20:30 21:00 21:30"},
	    {"0 * * * *", "spring",
	     "03-28 23:00 03-29 00:00 01:00 02:00 03:00 04:00 05:00 06:00 07:00 08:00 09:00 10:00 "
	     "11:00 12:00 13:00 14:00 15:00 16:00 17:00 18:00 19:00 20:00 21:00"},
	    {"0 3 * * *", "spring", "03-29 01:00"},
	    {"59 1 * * *", "spring", "03-29 00:59"},
	    {"30 2 * * *", "fall", "10-25 00:30"},
	    {"*/30 * * * *", "fall",
	     "10-24 22:00 22:30 23:00 23:30 10-25 00:00 00:30 02:00 02:30 03:00 03:30 04:00 04:30 "
	     "05:00 05:30 06:00 06:30 07:00 07:30 08:00 08:30 09:00 09:30 10:00 10:30 11:00 11:30 "
	     "12:00 12:30 13:00 13:30 14:00 14:30 15:00 15:30 16:00 16:30 17:00 17:30 18:00 18:30 "
	     "19:00 19:30 20:00 20:30 21:00 21:30 22:00 22:30"},
	    {"0 * * * *", "fall",
	     "10-24 22:00 23:00 10-25 00:00 02:00 03:00 04:00 05:00 06:00 07:00 08:00 09:00 10:00 "
	     "11:00 12:00 13:00 14:00 15:00 16:00 17:00 18:00 19:00 20:00 21:00 22:00"},
	    {"0 3 * * *", "fall", "10-25 02:00"},
	    {"59 1 * * *", "fall", "10-24 23:59"},
	};
	PGconn *pg = tdb_connect(db);
	buf b = BUF_INIT, all = BUF_INIT;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int spring = strcmp(cases[i][1], "spring") == 0;
		/* The local day, 00:00 to 24:00, in UTC. */
		scheduler_fires(pg, cases[i][0], "Europe/Berlin",
		                spring ? "2026-03-28 23:00:00" : "2026-10-24 22:00:00",
		                spring ? "2026-03-29 21:59:59" : "2026-10-25 22:59:59", &b, &all);
		cr_expect_str_eq(buf_str(&b), cases[i][2], "%s on the %s day, fired as due: %s",
		                 cases[i][0], cases[i][1], buf_str(&b));
		cr_expect_str_eq(buf_str(&all), cases[i][2],
		                 "%s on the %s day, in one catch-up: %s", cases[i][0], cases[i][1],
		                 buf_str(&all));
		buf_reset(&b);
		buf_reset(&all);
	}
	buf_free(&b);
	buf_free(&all);
	PQfinish(pg);
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
	/* 2026-11-01: 01:00-02:00 happens twice; 01:30 fires once, at its first
	 * occurrence (EDT, 05:30 UTC). */
	fires(pg, "30 1 * * *", "America/New_York", "2026-10-31 00:00:00", "2026-11-03 00:00:00",
	      &b);
	cr_assert_str_eq(buf_str(&b), "10-31 05:30, 11-01 05:30, 11-02 06:30");
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

/*
 * A POSIX TZ string (std UTC+1, daylight saving UTC+1:00:15) whose clocks
 * change at instant t (Unix s): 15 s forward when spring, else 15 s back. A
 * rule's day is zero-based and counts February 29th; its time is the local
 * time of the offset in force before it. The other change is half a year off.
 */
static void posix_zone(int64_t t, int spring, char out[80])
{
	time_t local = (time_t)(t + (spring ? 3600 : 3615));
	struct tm l;
	gmtime_r(&local, &l);
	char rule[24];
	snprintf(rule, sizeof rule, "%d/%02d:%02d:%02d", l.tm_yday, l.tm_hour, l.tm_min, l.tm_sec);
	int other = (l.tm_yday + 180) % 365;
	if (spring)
		snprintf(out, 80, "AAA-1BBB-1:00:15,%s,%d/02:00:00", rule, other);
	else
		snprintf(out, 80, "AAA-1BBB-1:00:15,%d/02:00:00,%s", other, rule);
}

static const char *e2e_log;

static void e2e_dump(void)
{
	char *log = tfile_read(e2e_log);
	fprintf(stderr, "--- worker:\n%s\n", log ? log : "");
	free(log);
}

/*
 * `*\/10 * * * * *` in two POSIX zones whose clocks change at T, a multiple
 * of 10 s some 25-35 s after the schedules are made, while a real worker
 * fires them. Spring (15 s forward at T): walls T+3600 and T+3610 (UTC+1)
 * do not exist and fire at T and T+10; the walls after the jump fire at T+5,
 * T+15. Fall (15 s back at T): walls T+3600 and T+3610 (UTC+1) happen twice
 * and fire at their first occurrences, T-15 and T-5, not at T and T+10; the
 * next is T+20. Every fire from the first to T+20 is a run, once.
 */
Test(schedule, a_schedule_fires_each_time_once_across_clock_changes_of_a_posix_zone_with_a_worker,
     .timeout = 180)
{
	char log[64];
	e2e_log = tlog_file(log);
	pid_t w = tworker_start(db, NULL, log, "CAIRN_POLL_INTERVAL=200ms", NULL);
	PGconn *pg = tdb_connect(db);
	int64_t made = tdb_int(pg, "SELECT floor(extract(epoch FROM now()))::bigint");
	int64_t t = (made + 25 + 9) / 10 * 10;
	static const char *const names[] = {"spring", "fall"};
	for (int i = 0; i < 2; i++) {
		char zone[80], *out = NULL, *err = NULL;
		posix_zone(t, i == 0, zone);
		cr_assert_eq(tcli(db, &out, &err, "schedule", "create", names[i], "--cron",
		                  "*/10 * * * * *", "--tz", zone, "--workflow", "noop", "--catchup",
		                  "all", "--overlap", "allow", NULL),
		             0, "%s: %s", zone, err);
		free(out);
		free(err);
	}
	/* The last fire each must have by T+20, then every one before it. */
	int64_t last[] = {t + 15, t + 20};
	for (int i = 0; i < 2; i++)
		tcheck(e2e_dump,
		       tdb_wait_at_leastf(pg, 1, (t + 30 - made) * 1000,
		                          "SELECT count(*) FROM cairn.runs WHERE key = "
		                          "'cairn.schedule:%s:%" PRId64 "000'",
		                          names[i], last[i]),
		       "%s: no fire at T%+d", names[i], (int)(last[i] - t));
	for (int i = 0; i < 2; i++) {
		char sql[400];
		snprintf(
		    sql, sizeof sql,
		    "SELECT string_agg((split_part(key, ':', 3)::bigint / 1000 - %" PRId64
		    ")::text, ' ' ORDER BY split_part(key, ':', 3)::bigint) FROM cairn.runs "
		    "WHERE key LIKE 'cairn.schedule:%s:%%' AND split_part(key, ':', 3)::bigint "
		    "<= %" PRId64 "000",
		    t, names[i], t + 20);
		char *got = tdb_str(pg, sql);
		/* From the first fire (by T-10, T-15), each 10 s until the change. */
		int first = got ? atoi(got) : 0;
		cr_assert(first <= (i == 0 ? -10 : -15), "%s: the first fire at T%+d", names[i],
		          first);
		buf want = BUF_INIT;
		int change = i == 0 ? 0 : -15;
		for (int at = first; at < change; at += 10)
			buf_printf(&want, "%d ", at);
		buf_puts(&want, i == 0 ? "0 5 10 15" : "-15 -5 20");
		fprintf(stderr, "test_schedule: %s fired at T%s (T = %" PRId64 ")\n", names[i],
		        got ? got : "(none)", t);
		cr_assert_str_eq(got ? got : "", buf_str(&want), "%s: the fires, in s from T",
		                 names[i]);
		free(got);
		buf_free(&want);
	}
	PQfinish(pg);
	cr_assert_eq(tworker_stop(w, SIGTERM, 30000), 0);
}
