/*
 * parse.c - the validators behind every external input (CLI arguments,
 * environment, JSON payloads). Pure: no I/O, no allocation that outlives a
 * call, so they are unit-tested without a database.
 */
#include "parse.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cairn.h"

#define ERR(...) (snprintf(err, PARSE_ERR_MAX, __VA_ARGS__), -CAIRN_EINVAL)

/* The unit at *p, its length in *len: ms per unit, or 0 for none. */
static int64_t duration_unit(const char *p, int *len)
{
	static const struct {
		const char *name;
		int64_t ms;
	} units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
	for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
		size_t n = strlen(units[i].name);
		if (strncmp(p, units[i].name, n) == 0) {
			*len = (int)n;
			return units[i].ms;
		}
	}
	return 0;
}

int parse_duration_ms(const char *s, int64_t *out, char *err)
{
	const char *accepted = "expected a duration like 500ms, 2s, 1m, 1.5h or 7d";
	if (!s || !*s)
		return ERR("empty duration: %s", accepted);
	if (strcmp(s, "0") == 0) {
		*out = 0;
		return 0;
	}
	int64_t total = 0;
	const char *p = s;
	while (*p) {
		if (!isdigit((unsigned char)*p))
			return ERR("invalid duration \"%s\": %s", s, accepted);
		int64_t n = 0, frac = 0, scale = 1;
		while (isdigit((unsigned char)*p)) {
			if (n > INT64_MAX / 10 - 10)
				return ERR("duration \"%s\" is too large", s);
			n = n * 10 + (*p++ - '0');
		}
		/* A decimal fraction: at most 6 digits, and a whole number of
		 * milliseconds once multiplied by its unit. */
		if (*p == '.') {
			p++;
			if (!isdigit((unsigned char)*p))
				return ERR(
				    "invalid duration \"%s\": a digit must follow the decimal "
				    "point; %s",
				    s, accepted);
			while (isdigit((unsigned char)*p)) {
				if (scale == 1000000)
					return ERR(
					    "invalid duration \"%s\": at most 6 decimals; %s", s,
					    accepted);
				frac = frac * 10 + (*p++ - '0');
				scale *= 10;
			}
		}
		int len;
		int64_t unit = duration_unit(p, &len);
		if (!unit)
			return ERR("invalid duration \"%s\": missing or unknown unit; %s", s,
			           accepted);
		p += len;
		if (frac * unit % scale != 0)
			return ERR(
			    "invalid duration \"%s\": not a whole number of milliseconds; %s", s,
			    accepted);
		if (n > (INT64_MAX - total) / unit ||
		    frac * unit / scale > INT64_MAX - total - n * unit)
			return ERR("duration \"%s\" is too large", s);
		total += n * unit + frac * unit / scale;
	}
	*out = total;
	return 0;
}

int parse_size_bytes(const char *s, size_t *out, char *err)
{
	const char *accepted = "expected a size like 1048576, 512KiB, 1MiB or 1GiB";
	if (!s || !*s || !isdigit((unsigned char)*s))
		return ERR("invalid size \"%s\": %s", s ? s : "", accepted);
	errno = 0;
	char *end;
	unsigned long long n = strtoull(s, &end, 10);
	if (errno)
		return ERR("size \"%s\" is too large", s);
	static const struct {
		const char *suffix;
		unsigned long long mult;
	} units[] = {{"", 1},
	             {"B", 1},
	             {"KiB", 1ULL << 10},
	             {"MiB", 1ULL << 20},
	             {"GiB", 1ULL << 30},
	             {"KB", 1000},
	             {"MB", 1000000},
	             {"GB", 1000000000}};
	for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
		if (strcmp(end, units[i].suffix) == 0) {
			if (n > SIZE_MAX / units[i].mult)
				return ERR("size \"%s\" is too large", s);
			*out = (size_t)(n * units[i].mult);
			return 0;
		}
	}
	return ERR("invalid size \"%s\": %s", s, accepted);
}

static int digits(const char *p, int n, int *out)
{
	int v = 0;
	for (int i = 0; i < n; i++) {
		if (!isdigit((unsigned char)p[i]))
			return -CAIRN_EINVAL;
		v = v * 10 + (p[i] - '0');
	}
	*out = v;
	return 0;
}

int parse_timestamp_ms(const char *s, int64_t *out, char *err)
{
	const char *accepted = "expected an RFC 3339 time like 2026-12-24T10:00:00Z";
	int Y, M, D, h, m, sec;
	if (!s || strlen(s) < 20 || digits(s, 4, &Y) || s[4] != '-' || digits(s + 5, 2, &M) ||
	    s[7] != '-' || digits(s + 8, 2, &D) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
	    digits(s + 11, 2, &h) || s[13] != ':' || digits(s + 14, 2, &m) || s[16] != ':' ||
	    digits(s + 17, 2, &sec))
		return ERR("invalid time \"%s\": %s", s ? s : "", accepted);
	static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	int leap = (Y % 4 == 0 && Y % 100 != 0) || Y % 400 == 0;
	if (Y < 1970 || M < 1 || M > 12 || D < 1 || D > mdays[M - 1] ||
	    (M == 2 && D == 29 && !leap) || h > 23 || m > 59 || sec > 60)
		return ERR("invalid time \"%s\": a field is out of range; %s", s, accepted);
	const char *p = s + 19;
	int64_t frac_ms = 0;
	if (*p == '.') {
		p++;
		if (!isdigit((unsigned char)*p))
			return ERR("invalid time \"%s\": %s", s, accepted);
		int scale = 100;
		for (; isdigit((unsigned char)*p); p++) {
			frac_ms += (*p - '0') * scale;
			scale /= 10;
		}
	}
	int64_t offset_s = 0;
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		int oh, om;
		if (digits(p + 1, 2, &oh) || p[3] != ':' || digits(p + 4, 2, &om) || oh > 23 ||
		    om > 59)
			return ERR("invalid time \"%s\": bad UTC offset; %s", s, accepted);
		offset_s = (oh * 3600 + om * 60) * (*p == '-' ? -1 : 1);
		p += 6;
	} else {
		return ERR("invalid time \"%s\": missing time zone (Z or +HH:MM); %s", s, accepted);
	}
	if (*p)
		return ERR("invalid time \"%s\": trailing characters; %s", s, accepted);
	struct tm tm = {.tm_year = Y - 1900,
	                .tm_mon = M - 1,
	                .tm_mday = D,
	                .tm_hour = h,
	                .tm_min = m,
	                .tm_sec = sec};
	int64_t t = (int64_t)timegm(&tm);
	*out = (t - offset_s) * 1000 + frac_ms;
	return 0;
}

int parse_int(const char *s, int64_t min, int64_t max, int64_t *out, char *err)
{
	if (!s || !*s)
		return ERR("empty number: expected an integer from %" PRId64 " to %" PRId64, min,
		           max);
	errno = 0;
	char *end;
	long long v = strtoll(s, &end, 10);
	if (*end || errno || end == s || isspace((unsigned char)*s))
		return ERR("invalid number \"%s\": expected an integer from %" PRId64
		           " to %" PRId64,
		           s, min, max);
	if (v < min || v > max)
		return ERR("%s is out of range: expected an integer from %" PRId64 " to %" PRId64,
		           s, min, max);
	*out = v;
	return 0;
}

/* Length of the UTF-8 sequence starting at p, or 0 if it is invalid. */
static size_t utf8_len(const unsigned char *p);
static size_t utf8_len_n(const unsigned char *p, size_t avail);

/* s quoted for an error message: at most QUOTE_MAX bytes of it, control
 * characters and bytes that are not UTF-8 written as \xNN, "..." appended when
 * cut. out holds at least QUOTE_BUF bytes. */
#define QUOTE_MAX 32
#define QUOTE_BUF (QUOTE_MAX * 4 + 8)
static const char *quote(const char *s, char out[QUOTE_BUF])
{
	size_t o = 0, i = 0;
	while (s[i] && i < QUOTE_MAX) {
		const unsigned char *p = (const unsigned char *)s + i;
		size_t len = *p < 0x20 || *p == 0x7f ? 0 : utf8_len(p);
		if (len == 0) {
			o += (size_t)snprintf(out + o, 5, "\\x%02x", *p);
			i++;
		} else {
			memcpy(out + o, p, len);
			o += len;
			i += len;
		}
	}
	if (s[i])
		o += (size_t)snprintf(out + o, 4, "...");
	out[o] = '\0';
	return out;
}

int parse_check_name(const char *what, const char *s, char *err)
{
	if (!s || !*s)
		return ERR("%s must not be empty", what);
	char q[QUOTE_BUF];
	size_t n = strlen(s);
	if (n > NAME_MAX_BYTES)
		return ERR("%s is %zu bytes long: at most %d are accepted", what, n,
		           NAME_MAX_BYTES);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (!isalnum(c) && c != '_' && c != '-' && c != '.' && c != ':')
			return ERR(
			    "invalid %s \"%s\": character %zu (0x%02x) is not accepted; expected "
			    "letters, digits and _ - . :",
			    what, quote(s, q), i + 1, c);
	}
	return 0;
}

/* Length of the UTF-8 sequence at p, of at most avail bytes, or 0 if it is
 * not one: RFC 3629, as PostgreSQL checks it (pg_utf8_islegal), so no
 * overlong form, no UTF-16 surrogate (U+D800 to U+DFFF) and nothing past
 * U+10FFFF. A sequence is read byte by byte and stops at the first that
 * does not fit, so a NUL-terminated string is never read past its end. */
static size_t utf8_len_n(const unsigned char *p, size_t avail)
{
	if (avail == 0)
		return 0;
	unsigned c = p[0], lo = 0x80, hi = 0xbf; /* the range of the second byte */
	size_t n;
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		n = 2;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		lo = c == 0xe0 ? 0xa0 : lo; /* overlong below U+0800 */
		hi = c == 0xed ? 0x9f : hi; /* surrogates */
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		lo = c == 0xf0 ? 0x90 : lo; /* overlong below U+10000 */
		hi = c == 0xf4 ? 0x8f : hi; /* past U+10FFFF */
	} else {
		return 0; /* a continuation byte, an overlong C0/C1, or F5 to FF */
	}
	if (avail < n || p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	return n;
}

static size_t utf8_len(const unsigned char *p)
{
	return utf8_len_n(p, 4);
}

int parse_rate(const char *s, int *n, int64_t *period_ms, char *err)
{
	const char *accepted = "expected N/PERIOD: N from 1 to 1000000 starts per PERIOD, a unit "
	                       "(s, m, h, d) or a duration from 1ms to 1d, as in 10/s, 600/m, "
	                       "5/500ms";
	char q[QUOTE_BUF];
	const char *slash = s ? strchr(s, '/') : NULL;
	if (!slash)
		return ERR("invalid rate \"%s\": %s", s ? quote(s, q) : "", accepted);
	char num[24];
	size_t len = (size_t)(slash - s);
	int64_t v;
	if (len == 0 || len >= sizeof num)
		return ERR("invalid rate \"%s\": %s", quote(s, q), accepted);
	memcpy(num, s, len);
	num[len] = 0;
	char why[PARSE_ERR_MAX];
	if (parse_int(num, 1, 1000000, &v, why) < 0)
		return ERR("invalid rate \"%s\": %s", quote(s, q), accepted);
	static const struct {
		const char *unit;
		int64_t ms;
	} units[] = {{"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
	const char *per = slash + 1;
	int64_t ms = -1;
	for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
		if (strcmp(per, units[i].unit) == 0)
			ms = units[i].ms;
	if (ms < 0 && parse_duration_ms(per, &ms, why) < 0)
		return ERR("invalid rate \"%s\": %s", quote(s, q), accepted);
	if (ms < 1 || ms > 86400000)
		return ERR("invalid rate \"%s\": the period must be from 1ms to 1d", quote(s, q));
	*n = (int)v;
	*period_ms = ms;
	return 0;
}

int parse_check_key(const char *s, char *err)
{
	const char *accepted = "keys are 1 to 512 bytes of printable UTF-8";
	if (!s || !*s)
		return ERR("key must not be empty: %s", accepted);
	char q[QUOTE_BUF];
	size_t n = strlen(s);
	if (n > KEY_MAX_BYTES)
		return ERR("invalid key \"%s\": it is %zu bytes long; at most %d are accepted",
		           quote(s, q), n, KEY_MAX_BYTES);
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x20 || c == 0x7f)
			return ERR(
			    "invalid key \"%s\": byte %zu is a control character (0x%02x); %s",
			    quote(s, q), i + 1, c, accepted);
		size_t len = utf8_len((const unsigned char *)s + i);
		if (len == 0)
			return ERR("invalid key \"%s\": byte %zu is not valid UTF-8; %s",
			           quote(s, q), i + 1, accepted);
		i += len;
	}
	return 0;
}

int json_depth(const char *s)
{
	int depth = 0, max = 0, in_string = 0;
	for (const char *p = s; *p; p++) {
		if (in_string) {
			if (*p == '\\' && p[1])
				p++;
			else if (*p == '"')
				in_string = 0;
		} else if (*p == '"') {
			in_string = 1;
		} else if (*p == '[' || *p == '{') {
			if (++depth > max)
				max = depth;
		} else if (*p == ']' || *p == '}') {
			depth--;
		}
	}
	return max;
}

/*
 * Where the scan of json_check_text is in the value, as a path ($.items[2].name)
 * for its messages: one frame per open array or object, the path of each
 * member appended to the container's own while the scan is inside it.
 */
#define JPATH_BUF 96
typedef struct jpath {
	char text[JPATH_BUF + 4]; /* room for "..." */
	size_t len;
	int cut; /* text reached JPATH_BUF: what follows is left out */
	struct {
		char kind;    /* '[' or '{' */
		size_t base;  /* len of text at the container itself */
		int base_cut; /* and whether its path was cut */
		long index;   /* an array's current element */
		int want_key; /* an object's next string is a member name */
	} f[JSON_MAX_DEPTH];
	int depth; /* open containers; frames past JSON_MAX_DEPTH are not kept */
} jpath;

static void jpath_add(jpath *p, const char *s, size_t n)
{
	if (p->cut || p->len + n > JPATH_BUF) {
		if (!p->cut)
			memcpy(p->text + p->len, "...", 4);
		p->cut = 1;
		return;
	}
	memcpy(p->text + p->len, s, n);
	p->len += n;
	p->text[p->len] = '\0';
}

/* Back to the path of the innermost container. */
static void jpath_top(jpath *p)
{
	p->len = p->f[p->depth - 1].base;
	p->cut = p->f[p->depth - 1].base_cut;
	memcpy(p->text + p->len, p->cut ? "..." : "", p->cut ? 4 : 1);
}

static void jpath_index(jpath *p)
{
	char n[24];
	jpath_top(p);
	jpath_add(p, n, (size_t)snprintf(n, sizeof n, "[%ld]", p->f[p->depth - 1].index));
}

/* A member name s[0..n) as written in the text (escapes and all): .name
 * when it is plain, else ["name"]. */
static void jpath_key(jpath *p, const char *s, size_t n)
{
	int plain = n > 0;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-')
			plain = 0;
	jpath_top(p);
	jpath_add(p, plain ? "." : "[\"", plain ? 1 : 2);
	jpath_add(p, s, n);
	if (!plain)
		jpath_add(p, "\"]", 2);
}

/* The structure around s[i], which is outside any string. */
static void jpath_step(jpath *p, char c)
{
	int top = p->depth > 0 && p->depth <= JSON_MAX_DEPTH;
	if (c == '[' || c == '{') {
		p->depth++;
		if (p->depth > JSON_MAX_DEPTH)
			return;
		p->f[p->depth - 1].kind = c;
		p->f[p->depth - 1].base = p->len;
		p->f[p->depth - 1].base_cut = p->cut;
		p->f[p->depth - 1].index = 0;
		p->f[p->depth - 1].want_key = c == '{';
		if (c == '[')
			jpath_index(p);
	} else if ((c == ']' || c == '}') && p->depth > 0) {
		if (top)
			jpath_top(p);
		p->depth--;
	} else if (c == ',' && top && p->f[p->depth - 1].kind == '[') {
		p->f[p->depth - 1].index++;
		jpath_index(p);
	} else if (c == ',' && top) {
		p->f[p->depth - 1].want_key = 1;
	}
}

/* The error of json_check_text: what, the problem, where (a path from the
 * value's root, $, when it is inside an array or object), and the rule. */
static int jtext_error(const char *what, const jpath *p, int in_key, size_t at, const char *problem,
                       const char *rule, char *err)
{
	if (p->depth > 0)
		return ERR("%s %s at byte %zu, in %s$%s: %s", what, problem, at + 1,
		           in_key ? "a member name of " : "", p->text, rule);
	return ERR("%s %s at byte %zu: %s", what, problem, at + 1, rule);
}

int json_check_text(const char *what, const char *s, size_t n, char *err)
{
	static const char utf8_rule[] = "JSON text must be UTF-8";
	jpath p = {.len = 0};
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == 0)
			return jtext_error(what, &p, 0, i, "holds a NUL byte",
			                   "JSON text cannot hold one", err);
		if (c >= 0x80 && !utf8_len_n((const unsigned char *)s + i, n - i)) {
			char problem[48];
			snprintf(problem, sizeof problem, "is not valid UTF-8 (0x%02x)", c);
			return jtext_error(what, &p, 0, i, problem, utf8_rule, err);
		}
		if (c != '"') {
			jpath_step(&p, (char)c);
			continue;
		}
		int key = p.depth > 0 && p.depth <= JSON_MAX_DEPTH &&
		          p.f[p.depth - 1].kind == '{' && p.f[p.depth - 1].want_key;
		size_t start = ++i;
		for (; i < n && s[i] != '"'; i++) {
			c = (unsigned char)s[i];
			size_t len =
			    c >= 0x80 ? utf8_len_n((const unsigned char *)s + i, n - i) : 1;
			char problem[48];
			if (c == '\\' && i + 5 < n && memcmp(s + i + 1, "u0000", 5) == 0)
				return jtext_error(what, &p, key, i,
				                   "holds \\u0000 (the NUL character)",
				                   "cairn accepts no NUL character in JSON text "
				                   "(PostgreSQL's jsonb "
				                   "cannot store it); send binary data as base64",
				                   err);
			if (c == '\\') {
				/* The escaped character: \" does not end the string (one
				 * that is not printable ASCII is no escape, and is checked
				 * as any other). */
				i += i + 1 < n && s[i + 1] >= 0x20 && s[i + 1] < 0x7f;
				continue;
			}
			if (c == 0)
				return jtext_error(what, &p, key, i, "holds a NUL byte",
				                   "JSON text cannot hold one", err);
			if (c < 0x20) {
				snprintf(problem, sizeof problem,
				         "holds a control character (0x%02x)", c);
				return jtext_error(what, &p, key, i, problem,
				                   "a JSON string must escape it (\\n, \\u001b)",
				                   err);
			}
			if (!len) {
				snprintf(problem, sizeof problem, "is not valid UTF-8 (0x%02x)", c);
				return jtext_error(what, &p, key, i, problem, utf8_rule, err);
			}
			i += len - 1;
		}
		if (key && i <= n) {
			jpath_key(&p, s + start, i - start);
			p.f[p.depth - 1].want_key = 0;
		}
	}
	return 0;
}

int parse_check_json_n(const char *what, const char *s, size_t n, size_t max, char *err)
{
	if (n > max)
		return ERR("%s is %zu bytes: larger than the maximum of %zu bytes", what, n, max);
	/* Before anything reads s as a C string: a NUL byte would end it early. */
	if (json_check_text(what, s, n, err) < 0)
		return -CAIRN_EINVAL;
	int depth = json_depth(s);
	if (depth > JSON_MAX_DEPTH)
		return ERR("%s is nested %d levels deep: at most %d are accepted", what, depth,
		           JSON_MAX_DEPTH);
	const char *end = NULL;
	/* n + 1: cJSON wants the terminating NUL inside the length. */
	cJSON *j = cJSON_ParseWithLengthOpts(s, n + 1, &end, 1);
	if (!j) {
		size_t pos = end && end >= s ? (size_t)(end - s) : 0;
		return ERR("%s is not valid JSON: syntax error at byte %zu", what, pos + 1);
	}
	cJSON_Delete(j);
	return 0;
}

int parse_check_json(const char *what, const char *s, size_t max, char *err)
{
	return parse_check_json_n(what, s, strlen(s), max, err);
}

int utf8_valid(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		size_t len = utf8_len(p);
		if (!len)
			return 0;
		p += len;
	}
	return 1;
}

void utf8_clean(const char *s, buf *out)
{
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		size_t len = utf8_len(p);
		if (len) {
			buf_append(out, (const char *)p, len);
			p += len;
		} else {
			buf_puts(out, "\xef\xbf\xbd"); /* U+FFFD, the replacement character */
			p++;
		}
	}
}

int parse_id_list(const char *s, int64_t *ids, int cap)
{
	int n = 0;
	for (;;) {
		size_t len = strspn(s, "0123456789");
		if (len == 0 || len > 18 || n == cap)
			return -1;
		ids[n++] = strtoll(s, NULL, 10);
		s += len;
		if (*s == '\0')
			return n;
		if (*s++ != ',')
			return -1;
	}
}

int parse_listen_addr(const char *a, struct sockaddr_storage *sa, socklen_t *len, int *wildcard)
{
	const char *colon = strrchr(a, ':');
	char host[128];
	int64_t port;
	char perr[PARSE_ERR_MAX];
	if (!colon || (size_t)(colon - a) >= sizeof host ||
	    parse_int(colon + 1, 0, 65535, &port, perr) < 0)
		return -1;
	memcpy(host, a, (size_t)(colon - a));
	host[colon - a] = '\0';
	memset(sa, 0, sizeof *sa);
	if (host[0] == '[') {
		size_t hl = strlen(host);
		if (hl < 3 || host[hl - 1] != ']')
			return -1;
		host[hl - 1] = '\0';
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
		if (inet_pton(AF_INET6, host + 1, &s6->sin6_addr) != 1)
			return -1;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		*len = sizeof *s6;
		*wildcard = IN6_IS_ADDR_UNSPECIFIED(&s6->sin6_addr);
		return 0;
	}
	struct sockaddr_in *s4 = (struct sockaddr_in *)sa;
	s4->sin_family = AF_INET;
	s4->sin_port = htons((uint16_t)port);
	*len = sizeof *s4;
	if (!host[0] || strcmp(host, "0.0.0.0") == 0)
		s4->sin_addr.s_addr = htonl(INADDR_ANY);
	else if (strcmp(host, "localhost") == 0)
		s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	else if (inet_pton(AF_INET, host, &s4->sin_addr) != 1)
		return -1;
	*wildcard = s4->sin_addr.s_addr == htonl(INADDR_ANY);
	return 0;
}

int parse_addr_loopback(const struct sockaddr_storage *sa)
{
	if (sa->ss_family == AF_INET6)
		return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
	return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
}

static int host_char(int c)
{
	return isalnum(c) || c == '-' || c == '_' || c == '.';
}

/* host[0..hl) is a port: 1 to 5 digits. */
static int is_port(const char *p, size_t n)
{
	if (n < 1 || n > 5)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isdigit((unsigned char)p[i]))
			return 0;
	return 1;
}

/* Whether names (comma-separated) holds the n bytes at h, without case. */
static int host_listed(const char *h, size_t n, const char *names)
{
	for (const char *p = names; p && *p;) {
		size_t l = strcspn(p, ",");
		if (l == n && strncasecmp(p, h, n) == 0)
			return 1;
		p += l + (p[l] == ',');
	}
	return 0;
}

int parse_host_allowed(const char *host, const char *names)
{
	char lit[64];
	size_t len = strlen(host), hl;
	if (host[0] == '[') { /* [IPv6] or [IPv6]:PORT */
		const char *close = strchr(host, ']');
		hl = close ? (size_t)(close - host) - 1 : 0;
		if (!close || hl == 0 || hl >= sizeof lit ||
		    (close[1] && (close[1] != ':' || !is_port(close + 2, strlen(close + 2)))))
			return 0;
		memcpy(lit, host + 1, hl);
		lit[hl] = '\0';
		struct in6_addr a6;
		return inet_pton(AF_INET6, lit, &a6) == 1;
	}
	const char *colon = strchr(host, ':');
	hl = colon ? (size_t)(colon - host) : len;
	if (colon && !is_port(colon + 1, len - hl - 1))
		return 0;
	if (hl == 0)
		return 0;
	for (size_t i = 0; i < hl; i++)
		if (!host_char((unsigned char)host[i]))
			return 0;
	if (hl < sizeof lit) {
		memcpy(lit, host, hl);
		lit[hl] = '\0';
		struct in_addr a4;
		if (inet_pton(AF_INET, lit, &a4) == 1)
			return 1;
	}
	return (hl == 9 && strncasecmp(host, "localhost", 9) == 0) || host_listed(host, hl, names);
}

int parse_check_hosts(const char *what, const char *names, char *err)
{
	for (const char *p = names; *p;) {
		size_t l = strcspn(p, ",");
		int ok = l > 0 && l <= PARSE_HOST_MAX;
		for (size_t i = 0; ok && i < l; i++)
			ok = host_char((unsigned char)p[i]);
		if (!ok) {
			snprintf(
			    err, PARSE_ERR_MAX,
			    "invalid value for %s: \"%.*s\": expected host names separated by "
			    "commas (worker-1.example,cairn.internal), each of letters, digits, "
			    "'-', '_' and '.', without a port",
			    what, (int)(l < 64 ? l : 64), p);
			return -1;
		}
		p += l + (p[l] == ',');
	}
	return 0;
}
