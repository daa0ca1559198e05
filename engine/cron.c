/*
 * cron.c - parses cron expressions, finds their next wall-clock time, and
 * the instants they fire in a zone whose offsets the caller loads (cron.h).
 */
#include "cron.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct field {
	const char *name;
	int min, max;
	const char *const *names; /* names[i] means min + i, or NULL */
} field;

static const char *const MONTHS[] = {"jan", "feb", "mar", "apr", "may", "jun", "jul",
                                     "aug", "sep", "oct", "nov", "dec", NULL};
static const char *const DAYS[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat", NULL};

static const field FIELDS[] = {
    {"second", 0, 59, NULL},       {"minute", 0, 59, NULL},  {"hour", 0, 23, NULL},
    {"day of month", 1, 31, NULL}, {"month", 1, 12, MONTHS}, {"day of week", 0, 7, DAYS},
};

static const struct {
	const char *macro, *expr;
} MACROS[] = {{"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
              {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
              {"@hourly", "0 * * * *"}};

/* A number or a name of f at *p (advanced): 0, or -1. */
static int value(const field *f, const char **p, int *out)
{
	if (isdigit((unsigned char)**p)) {
		char *end;
		long v = strtol(*p, &end, 10);
		if (end - *p > 2 || v < f->min || v > f->max)
			return -1;
		*p = end;
		*out = (int)v;
		return 0;
	}
	for (int i = 0; f->names && f->names[i]; i++)
		if (strncasecmp(*p, f->names[i], 3) == 0 && !isalpha((unsigned char)(*p)[3])) {
			*p += 3;
			*out = f->min + i;
			return 0;
		}
	return -1;
}

/* One field's text (len bytes) into bits; *any when it is `*`. */
static int parse_field(const field *f, const char *s, size_t len, uint64_t *bits, int *any)
{
	char text[128];
	if (len == 0 || len >= sizeof text)
		return -1;
	memcpy(text, s, len);
	text[len] = '\0';
	*bits = 0;
	*any = strcmp(text, "*") == 0 || strcmp(text, "?") == 0;
	if (text[0] == ',' || text[len - 1] == ',' || strstr(text, ",,"))
		return -1;
	for (char *save = NULL, *part = strtok_r(text, ",", &save); part;
	     part = strtok_r(NULL, ",", &save)) {
		const char *p = part;
		int lo, hi, step = 1;
		if (*p == '*' || *p == '?') {
			lo = f->min;
			hi = f->max;
			p++;
		} else {
			if (value(f, &p, &lo) < 0)
				return -1;
			hi = lo;
			if (*p == '-') {
				p++;
				if (value(f, &p, &hi) < 0 || hi < lo)
					return -1;
			}
		}
		if (*p == '/') {
			p++;
			char *end;
			long v = strtol(p, &end, 10);
			if (end == p || end - p > 2 || v < 1 || v > f->max - f->min + 1)
				return -1;
			if (hi == lo && part[0] != '*')
				hi = f->max; /* A/S: from A on */
			step = (int)v;
			p = end;
		}
		if (*p)
			return -1;
		for (int v = lo; v <= hi; v += step)
			*bits |= 1ULL << v;
	}
	return 0;
}

int cron_parse(const char *expr, cron *out, char *err, size_t n)
{
	memset(out, 0, sizeof *out);
	if (!expr) {
		snprintf(err, n, "the cron expression is missing");
		return -1;
	}
	for (size_t i = 0; i < sizeof MACROS / sizeof MACROS[0]; i++)
		if (strcasecmp(expr, MACROS[i].macro) == 0)
			expr = MACROS[i].expr;
	const char *start[6];
	size_t len[6];
	int k = 0;
	for (const char *p = expr; *p;) {
		p += strspn(p, " \t");
		if (!*p)
			break;
		if (k == 6) {
			k = 7;
			break;
		}
		start[k] = p;
		len[k] = strcspn(p, " \t");
		p += len[k++];
	}
	if (k != 5 && k != 6) {
		snprintf(
		    err, n,
		    "invalid cron expression \"%s\": expected 5 fields (minute hour day-of-month "
		    "month day-of-week), 6 with seconds first, or @hourly, @daily, @weekly, "
		    "@monthly, @yearly",
		    expr);
		return -1;
	}
	uint64_t bits[6] = {1}; /* no seconds field: at second 0 */
	int any[6] = {0};
	for (int i = 0; i < k; i++) {
		int f = i + 6 - k;
		if (parse_field(&FIELDS[f], start[i], len[i], &bits[f], &any[f]) < 0) {
			snprintf(
			    err, n,
			    "invalid cron expression \"%s\": the %s field \"%.*s\" is not *, a "
			    "number from %d to %d%s, a range A-B, a step */S, A-B/S or A/S, or a "
			    "list of those",
			    expr, FIELDS[f].name, (int)len[i], start[i], FIELDS[f].min,
			    FIELDS[f].max,
			    f == 4   ? " (or JAN-DEC)"
			    : f == 5 ? " (or SUN-SAT; 7 is Sunday)"
			             : "");
			return -1;
		}
	}
	out->sec = bits[0];
	out->min = bits[1];
	out->hour = (uint32_t)bits[2];
	out->dom = (uint32_t)bits[3];
	out->mon = (uint32_t)bits[4];
	out->dow = (uint8_t)((bits[5] | (bits[5] >> 7)) & 0x7f); /* 7 is Sunday */
	out->dom_any = any[3];
	out->dow_any = any[5];
	return 0;
}

static int day_matches(const cron *c, const struct tm *t)
{
	int dom = (c->dom >> t->tm_mday) & 1, dow = (c->dow >> t->tm_wday) & 1;
	if (c->dom_any || c->dow_any)
		return dom && dow;
	return dom || dow;
}

/* t normalised (the naive arithmetic of timegm, no zone). */
static void norm(struct tm *t)
{
	time_t s = timegm(t);
	gmtime_r(&s, t);
}

int cron_next(const cron *c, const struct tm *after, struct tm *out)
{
	struct tm t = *after;
	t.tm_isdst = 0;
	t.tm_sec++;
	norm(&t);
	int limit = t.tm_year + 5;
	while (t.tm_year <= limit) {
		if (!((c->mon >> (t.tm_mon + 1)) & 1)) {
			t.tm_mon++;
			t.tm_mday = 1;
			t.tm_hour = t.tm_min = t.tm_sec = 0;
		} else if (!day_matches(c, &t)) {
			t.tm_mday++;
			t.tm_hour = t.tm_min = t.tm_sec = 0;
		} else if (!((c->hour >> t.tm_hour) & 1)) {
			t.tm_hour++;
			t.tm_min = t.tm_sec = 0;
		} else if (!((c->min >> t.tm_min) & 1)) {
			t.tm_min++;
			t.tm_sec = 0;
		} else if (!((c->sec >> t.tm_sec) & 1)) {
			t.tm_sec++;
		} else {
			*out = t;
			return 0;
		}
		norm(&t);
	}
	return -1;
}

/* ------------------------------------------------ fires in a time zone */

#define DAY        86400
#define OFFSET_MAX (26 * 3600) /* no zone is further from UTC (POSIX TZ: < 25 h) */
#define MARGIN     (3 * DAY)   /* offsets loaded either side of a wall time walked */
/* And ahead of it: a day at first (most walks end within it; a schedule
 * that fires each second loads a week of offsets each second), then 30 days
 * at a time, so that a long walk loads seldom. */
#define SPAN_FIRST DAY
#define SPAN       (30 * DAY)

typedef struct zone {
	cron_offsets o;
	cron_offsets_fn load;
	void *arg;
} zone;

static int offsets_valid(const cron_offsets *o, int64_t lo, int64_t hi)
{
	if (o->n < 1 || o->n > CRON_ZONE_CHANGES || o->lo > lo || o->hi < hi || o->at[0] != o->lo)
		return 0;
	for (int i = 0; i < o->n; i++)
		if (o->off[i] <= -OFFSET_MAX || o->off[i] >= OFFSET_MAX ||
		    (i && (o->at[i] <= o->at[i - 1] || o->at[i] > o->hi)))
			return 0;
	return 1;
}

/* Makes z hold the offsets MARGIN either side of wall time (or instant) w:
 * every instant a wall time near w can have. 0 or a code. */
static int cover(zone *z, int64_t w)
{
	if (z->o.n && z->o.lo <= w - MARGIN && z->o.hi >= w + MARGIN)
		return 0;
	int64_t lo = w - MARGIN, hi = w + MARGIN + (z->o.n ? SPAN : SPAN_FIRST);
	memset(&z->o, 0, sizeof z->o);
	int rc = z->load(z->arg, lo, hi, &z->o);
	if (rc)
		return rc;
	return offsets_valid(&z->o, lo, hi) ? 0 : CRON_EZONE;
}

/* The least and greatest offset in force at some instant from a to b. */
static void extremes(const cron_offsets *o, int64_t a, int64_t b, int32_t *lo, int32_t *hi)
{
	*lo = INT32_MAX;
	*hi = INT32_MIN;
	for (int i = 0; i < o->n; i++) {
		int64_t end = i + 1 < o->n ? o->at[i + 1] - 1 : o->hi;
		if (end < a || o->at[i] > b)
			continue;
		if (o->off[i] < *lo)
			*lo = o->off[i];
		if (o->off[i] > *hi)
			*hi = o->off[i];
	}
}

/*
 * The instant of wall time w (seconds as if UTC): the first instant whose
 * wall time it is; for one the clocks skipped, the instant it would have
 * had by the offset before the jump.
 */
static int64_t instant(const cron_offsets *o, int64_t w)
{
	for (int i = 0; i < o->n; i++) {
		int64_t u = w - o->off[i], end = i + 1 < o->n ? o->at[i + 1] - 1 : o->hi;
		if (u >= o->at[i] && u <= end)
			return u; /* segments ascend: the first is the earliest */
	}
	for (int i = 1; i < o->n; i++)
		if (w >= o->at[i] + o->off[i - 1] && w < o->at[i] + o->off[i])
			return w - o->off[i - 1];
	return w - o->off[0]; /* not reached: the offsets cover w */
}

/* The next wall time after w that c names: 0, or CRON_NEVER. */
static int next_wall(const cron *c, int64_t w, int64_t *out)
{
	time_t s = (time_t)w;
	struct tm t, n;
	if (!gmtime_r(&s, &t) || cron_next(c, &t, &n) < 0)
		return CRON_NEVER;
	*out = (int64_t)timegm(&n);
	return 0;
}

/* What a walk keeps: the fires due so far, ascending (or the last), and the
 * first beyond them. */
typedef struct found {
	int64_t *due;
	int max, n, only_last;
	int64_t until, beyond;
} found;

static void found_add(found *f, int64_t u)
{
	if (u > f->until) {
		if (u < f->beyond)
			f->beyond = u;
		return;
	}
	if (f->only_last) {
		if (f->n == 0 || u > f->due[0])
			f->due[0] = u;
		f->n = 1;
		return;
	}
	int i = f->n;
	while (i > 0 && f->due[i - 1] > u)
		i--;
	if (i > 0 && f->due[i - 1] == u)
		return; /* two wall times, one instant: one fire */
	if (i == f->max) {
		if (u < f->beyond)
			f->beyond = u;
		return;
	}
	if (f->n == f->max) {
		int64_t out = f->due[f->n - 1];
		if (out < f->beyond)
			f->beyond = out;
		f->n--;
	}
	memmove(f->due + i + 1, f->due + i, (size_t)(f->n - i) * sizeof *f->due);
	f->due[i] = u;
	f->n++;
}

/*
 * Walks the wall times c names in ascending order, each mapped to its
 * instant. A wall time's instant is not ascending with it (02:30 skipped
 * fires at 01:30 UTC, after 03:00 at 01:00 UTC), but it lies within the
 * zone's offsets of it: the walk starts at the least wall time whose
 * instant can be `from` (from plus the least offset near it), and stops at
 * the first whose instant must be after every fire it still needs (minus
 * the greatest offset near it, past the first beyond).
 */
int cron_fires(const cron *c, cron_offsets_fn load, void *arg, int64_t from, int64_t until,
               int only_last, int64_t *due, int max, int *n, int64_t *next)
{
	zone z = {.load = load, .arg = arg};
	found f = {.due = due,
	           .max = only_last ? 1 : max,
	           .only_last = only_last,
	           .until = until,
	           .beyond = INT64_MAX};
	*n = 0;
	int32_t lo, hi;
	int rc = cover(&z, from);
	if (rc)
		return rc;
	extremes(&z.o, from - DAY, from + 3 * DAY, &lo, &hi);
	for (int64_t w = from + lo - 1;;) {
		if ((rc = next_wall(c, w, &w)) || (rc = cover(&z, w)))
			return rc;
		extremes(&z.o, w - 2 * DAY, w + 2 * DAY, &lo, &hi);
		if (w - hi > f.beyond)
			break;
		int64_t u = instant(&z.o, w);
		if (u >= from)
			found_add(&f, u);
	}
	*n = f.n;
	*next = f.beyond;
	return 0;
}
