/*
 * log.c - structured logging. Values are strings (callers format numbers);
 * logfmt quotes a value when it has spaces, quotes or '=', JSON escapes it,
 * except the values of the keys TYPED_KEYS names, which JSON writes as
 * numbers or booleans. The whole line is built first and written with one
 * write() so lines from different threads never interleave.
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "cairn.h"

static const char *const LEVELS[] = {"error", "warn", "info", "debug"};

enum value_kind { V_STRING, V_NUMBER, V_BOOL };

/*
 * The keys whose values are numbers or booleans wherever they are logged:
 * JSON lines write them bare, so a log pipeline sees one type per key (a
 * key typed by the look of its value would be a number in one line and a
 * string in the next). A value that does not read as one stays a string.
 * tests/test_logs.c checks that every key logged with a number from
 * db_i64 is here.
 */
static const struct {
	const char *key;
	enum value_kind kind;
} TYPED_KEYS[] = {
    {"attempt", V_NUMBER},
    {"changed", V_NUMBER},
    {"claim_ms", V_NUMBER},
    {"count", V_NUMBER},
    {"cut_off", V_NUMBER},
    {"failures", V_NUMBER},
    {"finished_cleanly", V_NUMBER},
    {"gone", V_BOOL},
    {"http_port", V_NUMBER},
    {"owned", V_NUMBER},
    {"pid", V_NUMBER},
    {"recover_2pc_interval_ms", V_NUMBER},
    {"run", V_NUMBER},
    {"runner_id", V_NUMBER},
    {"runner_ttl_ms", V_NUMBER},
    {"runs", V_NUMBER},
    {"shard", V_NUMBER},
    {"spans", V_NUMBER},
};

static enum value_kind kind_of(const char *key)
{
	for (size_t i = 0; i < sizeof TYPED_KEYS / sizeof *TYPED_KEYS; i++)
		if (strcmp(TYPED_KEYS[i].key, key) == 0)
			return TYPED_KEYS[i].kind;
	return V_STRING;
}

static const char *digits(const char *p)
{
	while (*p >= '0' && *p <= '9')
		p++;
	return p;
}

/* Whether s is a JSON number as a whole (-?int frac? exp?). */
static int json_number(const char *s)
{
	const char *p = s + (*s == '-');
	if (*p == '0')
		p++;
	else if (*p >= '1' && *p <= '9')
		p = digits(p);
	else
		return 0;
	if (*p == '.') {
		const char *q = digits(p + 1);
		if (q == p + 1)
			return 0;
		p = q;
	}
	if (*p == 'e' || *p == 'E') {
		p++;
		p += *p == '+' || *p == '-';
		const char *q = digits(p);
		if (q == p)
			return 0;
		p = q;
	}
	return *p == '\0';
}

int log_parse_level(const char *s, int *out)
{
	for (int i = 0; i < 4; i++)
		if (strcmp(s, LEVELS[i]) == 0) {
			*out = i;
			return 0;
		}
	return -CAIRN_EINVAL;
}

int log_parse_format(const char *s, int *out)
{
	if (strcmp(s, "logfmt") == 0)
		*out = LOG_LOGFMT;
	else if (strcmp(s, "json") == 0)
		*out = LOG_JSON;
	else
		return -CAIRN_EINVAL;
	return 0;
}

static void put_json_string(buf *b, const char *s)
{
	buf_puts(b, "\"");
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			buf_printf(b, "\\%c", *p);
		else if (*p < 0x20)
			buf_printf(b, "\\u%04x", *p);
		else
			buf_append(b, (const char *)p, 1);
	}
	buf_puts(b, "\"");
}

static void put_logfmt_value(buf *b, const char *s)
{
	int quote = !*s || strpbrk(s, " \"=\t\n\\") != NULL;
	if (!quote) {
		buf_puts(b, s);
		return;
	}
	put_json_string(b, s); /* the same escaping rules */
}

void log_kv(const logger *lg, int level, const char *msg, ...)
{
	if (!lg || level > lg->level)
		return;
	struct timeval tv;
	gettimeofday(&tv, NULL);
	struct tm tm;
	gmtime_r(&tv.tv_sec, &tm);
	char ts[40];
	size_t n = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(ts + n, sizeof ts - n, ".%03dZ", (int)(tv.tv_usec / 1000));

	buf b = BUF_INIT;
	int json = lg->format == LOG_JSON;
	if (json) {
		buf_printf(&b, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":", ts, LEVELS[level]);
		put_json_string(&b, msg);
	} else {
		buf_printf(&b, "ts=%s level=%s msg=", ts, LEVELS[level]);
		put_json_string(&b, msg);
	}
	va_list ap;
	va_start(ap, msg);
	const char *k;
	while ((k = va_arg(ap, const char *))) {
		const char *v = va_arg(ap, const char *);
		if (!v)
			v = "";
		if (json) {
			enum value_kind kind = kind_of(k);
			buf_puts(&b, ",");
			put_json_string(&b, k);
			buf_puts(&b, ":");
			if ((kind == V_NUMBER && json_number(v)) ||
			    (kind == V_BOOL && (!strcmp(v, "true") || !strcmp(v, "false"))))
				buf_puts(&b, v);
			else
				put_json_string(&b, v);
		} else {
			buf_printf(&b, " %s=", k);
			put_logfmt_value(&b, v);
		}
	}
	va_end(ap);
	buf_puts(&b, json ? "}\n" : "\n");
	if (!b.oom) {
		ssize_t w = write(lg->fd, b.data, b.len);
		(void)w;
	}
	buf_free(&b);
}
