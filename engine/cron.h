/*
 * cron.h - cron expressions for schedules (`cairn schedule create --cron`):
 * five fields (minute hour day-of-month month day-of-week) or six, a
 * seconds field first; each field `*`, a number, a range `A-B`, a step
 * (`*\/S`, `A-B/S`, `A/S`) or a comma-separated list of those; month and
 * weekday names (JAN-DEC, SUN-SAT; 0 and 7 are Sunday); the macros @yearly
 * (@annually), @monthly, @weekly, @daily (@midnight) and @hourly. As in
 * Vixie cron, when both day fields are restricted a day matching either
 * one matches.
 *
 * cron_next walks wall-clock times (struct tm, no zone). cron_fires gives
 * the instants an expression fires in a time zone, given the zone's UTC
 * offsets (which the caller loads: schedule.c asks PostgreSQL's tz rules):
 * every wall-clock time the expression names fires once, at the instant
 * it has; one that does not exist (skipped when the clocks go forward) at
 * the instant it would have had, shifted forward by the jump (02:30 when
 * 02:00 jumps to 03:00 fires at 03:30); one that happens twice (when the
 * clocks go back) at its first occurrence. Wall times that land on the same
 * instant are one fire. It walks from instants, never from a wall time read
 * back from one, so a shifted instant is neither missed nor fired twice.
 * Pure.
 */
#ifndef CAIRN_CRON_H
#define CAIRN_CRON_H
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef struct cron {
	uint64_t sec, min;       /* bit n: second / minute n */
	uint32_t hour, dom, mon; /* bit n: hour n, day n (1-31), month n (1-12) */
	uint8_t dow;             /* bit n: weekday n, 0 = Sunday */
	int dom_any, dow_any;    /* the field was `*` */
} cron;

/* Parses expr: 0, or -1 with err naming the field and what is accepted. */
int cron_parse(const char *expr, cron *out, char *err, size_t n);
/* The first wall-clock time after `after` (to the second) that c matches,
 * within 5 years: 0 with *out, or -1 when there is none (February 30th). */
int cron_next(const cron *c, const struct tm *after, struct tm *out);

/* Most changes of offset one load may hold. */
#define CRON_ZONE_CHANGES 32

/* A zone's UTC offsets (wall = instant + off) over the instants lo to hi
 * (Unix s, included): off[i] holds from at[i] until at[i + 1] (the last
 * one until hi); at[0] = lo, ascending. */
typedef struct cron_offsets {
	int64_t lo, hi;
	int n;
	int64_t at[CRON_ZONE_CHANGES];
	int32_t off[CRON_ZONE_CHANGES];
} cron_offsets;

/* Fills *out with a zone's offsets over at least lo to hi: 0, or a negative
 * code, which cron_fires returns as it is. */
typedef int (*cron_offsets_fn)(void *arg, int64_t lo, int64_t hi, cron_offsets *out);

#define CRON_NEVER 1 /* cron_fires: the expression names no time within 5 years */
#define CRON_EZONE 2 /* cron_fires: the offsets loaded are not a zone's */

/*
 * The instants (Unix s) c fires in the zone whose offsets load(arg, ...)
 * gives, from `from` on (included): those up to `until` (included),
 * ascending and each once, into due[] (the first max of them; with
 * only_last, the last one alone), *n their count, and the first fire after
 * them into *next (after until; or, when more than max were due, the next
 * due one). 0, CRON_NEVER, CRON_EZONE, or load's code.
 */
int cron_fires(const cron *c, cron_offsets_fn load, void *arg, int64_t from, int64_t until,
               int only_last, int64_t *due, int max, int *n, int64_t *next);
#endif
