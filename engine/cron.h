/*
 * cron.h - cron expressions for schedules (`cairn schedule create --cron`):
 * five fields (minute hour day-of-month month day-of-week) or six, a
 * seconds field first; each field `*`, a number, a range `A-B`, a step
 * (`*\/S`, `A-B/S`, `A/S`) or a comma-separated list of those; month and
 * weekday names (JAN-DEC, SUN-SAT; 0 and 7 are Sunday); the macros @yearly
 * (@annually), @monthly, @weekly, @daily (@midnight) and @hourly. As in
 * Vixie cron, when both day fields are restricted a day matching either
 * one matches. Times are wall-clock times (struct tm, no zone): mapping
 * them to instants in a time zone is the caller's (schedule.c asks
 * PostgreSQL, whose tz database handles daylight-saving changes). Pure.
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
#endif
