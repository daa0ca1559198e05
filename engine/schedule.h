/*
 * schedule.h - when a schedule fires (cairn.schedules, `cairn schedule`):
 * the instants its cron expression fires in its zone (cron_fires, cron.h),
 * with the zone's offsets by PostgreSQL's time zone rules (a tz database
 * name or a POSIX TZ string). So a 02:30 on a day whose clocks jump from
 * 02:00 to 03:00 fires once, at 03:30, a 02:30 that happens twice fires
 * once, at the first, and a time is due from the instant it fires, whatever
 * wall time that instant reads. Used by the client, which records a
 * schedule's first time, and by the cairn.scheduler singleton (maint.c),
 * which fires what is due.
 *
 * Also the client's calls on schedules (cairn_schedule_create and the
 * rest). Owns nothing; each call runs its statements on the caller's
 * connection.
 */
#ifndef CAIRN_SCHEDULE_H
#define CAIRN_SCHEDULE_H
#include <libpq-fe.h>
#include <stdint.h>

#include "buf.h"
#include "cron.h"

/* At most this many fires of one schedule at once (catch-up "all"). */
#define SCHEDULE_FIRES_MAX 1000
/* Catch-up "none" still fires a time missed by less than this. */
#define SCHEDULE_GRACE_MS 5000
/* Notified when a schedule is created, paused or resumed: the scheduler
 * looks again. */
#define SCHEDULE_CHANNEL "cairn_schedules"

/* A fire's run key: this prefix, the schedule's name, ':' and the due
 * time in Unix ms; in SQL, of the last fire of schedule row s. */
#define SCHEDULE_KEY_PREFIX "cairn.schedule:"
#define SCHEDULE_KEY_SQL(s)                                                                        \
	"'" SCHEDULE_KEY_PREFIX "' || " s ".name || ':' || "                                       \
	"(extract(epoch FROM " s ".last_at) * 1000)::bigint"
/* The run of the last fire of each schedule of CTE s that has one: the
 * schedule's name, the run's id and finished_at. A join of the schedules
 * (on Citus a reference table, read as the CTE's rows) with the runs,
 * where a subquery per schedule is refused by Citus. */
#define SCHEDULE_LAST_RUNS(s)                                                                      \
	"SELECT " s ".name, r.id, r.finished_at FROM " s " JOIN cairn.runs r "                     \
	"ON r.workflow = " s ".workflow AND r.key = " SCHEDULE_KEY_SQL(s)

/*
 * The times c fires in zone tz from from_ms (included) to now_ms (included),
 * as Unix ms, ascending and each once, into due[] (at most
 * SCHEDULE_FIRES_MAX, the first ones; with only_last, the last one alone),
 * *ndue their count, and the first time after them into *next_ms (after
 * now_ms, unless more than SCHEDULE_FIRES_MAX were due). 0, -CAIRN_EINVAL
 * (err: an unknown zone, or a cron that never fires), or -CAIRN_EDB.
 */
int schedule_due(PGconn *conn, const cron *c, const char *tz, int64_t from_ms, int64_t now_ms,
                 int only_last, int64_t *due, int *ndue, int64_t *next_ms, buf *err);
#endif
