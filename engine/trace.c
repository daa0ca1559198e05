/*
 * trace.c - W3C trace context, span ids derived from runs, and the OTLP
 * exporter (see trace.h). The hot path is tracer_emit: a lock, a pointer
 * into a ring, maybe a signal; all encoding and every byte of I/O happen on
 * the exporter thread. The protobuf is written by hand: the OTLP trace
 * request uses five wire types' worth of protobuf (varint, fixed64,
 * length-delimited), and a generated library would be a dependency bigger
 * than this file.
 */
#include "trace.h"

#include <curl/curl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cairn.h"
#include "clock.h"
#include "parse.h"

/* ------------------------------------------------------- trace context */

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* n bytes from 2n lower-case hex digits: 0, or -1. */
static int unhex(const char *s, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int hi = hexval(s[2 * i]), lo = hi < 0 ? -1 : hexval(s[2 * i + 1]);
		if (lo < 0)
			return -1;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

static int all_zero(const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

int trace_parse(const char *s, uint8_t trace_id[16], uint8_t span_id[8], uint8_t *flags, char *why)
{
	static const char want[] = "expected a W3C traceparent: 00-<32 lower-case hex digits of "
	                           "the trace id>-<16 of the parent span id>-<2 of the flags>, "
	                           "neither id all zeros";
	uint8_t ver;
	size_t n = s ? strlen(s) : 0;
	int ok = n >= TRACEPARENT_LEN && unhex(s, &ver, 1) == 0 && ver != 0xff && s[2] == '-' &&
	         unhex(s + 3, trace_id, 16) == 0 && s[35] == '-' &&
	         unhex(s + 36, span_id, 8) == 0 && s[52] == '-' && unhex(s + 53, flags, 1) == 0 &&
	         (ver == 0 ? n == TRACEPARENT_LEN : n == TRACEPARENT_LEN || s[55] == '-') &&
	         !all_zero(trace_id, 16) && !all_zero(span_id, 8);
	if (ok)
		return 0;
	snprintf(why, PARSE_ERR_MAX, "invalid traceparent \"%.64s%s\": %s", s ? s : "",
	         n > 64 ? "..." : "", want);
	return -1;
}

static void hex(char *out, const uint8_t *b, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 15];
	}
}

void trace_format(char *out, const uint8_t trace_id[16], const uint8_t span_id[8], uint8_t flags)
{
	memcpy(out, "00-", 3);
	hex(out + 3, trace_id, 16);
	out[35] = '-';
	hex(out + 36, span_id, 8);
	out[52] = '-';
	hex(out + 53, &flags, 1);
	out[55] = '\0';
}

/* The first n (8 or 16) bytes of SipHash (-2-4, or its 128-bit variant)
 * over tag, the trace id (when given) and the words, never all zero. The
 * ids need no secrecy, only to differ and to be the same on every worker:
 * the key is a constant. SipHash costs a fifth of BLAKE2b here, and a run
 * derives an id for every durable call. */
static void derive(uint8_t *out, size_t n, const char *tag, const uint8_t *trace,
                   const int64_t *words, int nwords)
{
	static const unsigned char key[16] = "cairn trace ids.";
	unsigned char in[16 + 16 + 8 * 4], h[16];
	size_t len = strlen(tag);
	memcpy(in, tag, len);
	if (trace) {
		memcpy(in + len, trace, 16);
		len += 16;
	}
	for (int i = 0; i < nwords && i < 4; i++)
		for (int k = 0; k < 8; k++)
			in[len++] = (unsigned char)((uint64_t)words[i] >> (8 * k));
	if (n > 8)
		crypto_shorthash_siphashx24(h, in, len, key);
	else
		crypto_shorthash_siphash24(h, in, len, key);
	memcpy(out, h, n);
	if (all_zero(out, n))
		out[n - 1] = 1;
}

void trace_run(trace_ctx *t, int64_t run_id, int64_t created_us, const char *tp, int sampled)
{
	char why[PARSE_ERR_MAX];
	if (!tp || !*tp || trace_parse(tp, t->trace_id, t->parent, &t->flags, why) < 0) {
		const int64_t w[] = {run_id, created_us};
		derive(t->trace_id, 16, "cairn.trace", NULL, w, 2);
		memset(t->parent, 0, sizeof t->parent);
		t->flags = sampled ? 1 : 0;
	}
	derive(t->run_span, 8, "cairn.run", t->trace_id, &run_id, 1);
}

void trace_call_id(const trace_ctx *t, int64_t run_id, int run_attempt, int seq, int step_attempt,
                   uint8_t out[8])
{
	const int64_t w[] = {run_id, run_attempt, seq, step_attempt};
	derive(out, 8, "cairn.call", t->trace_id, w, 4);
}

void trace_random_id(uint8_t out[8])
{
	do
		randombytes_buf(out, 8);
	while (all_zero(out, 8));
}

int64_t trace_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Copies at most n bytes of s (cut at a character) into out as UTF-8: a
 * byte that starts no valid sequence becomes '?', since a protobuf string
 * must be UTF-8 and a collector refuses a request that holds one that is
 * not. Returns the bytes written (no NUL). */
static size_t utf8_copy(char *out, const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t o = 0;
	while (*p && o < n) {
		size_t len = *p < 0x80                           ? 1
		             : (*p & 0xe0) == 0xc0 && *p >= 0xc2 ? 2
		             : (*p & 0xf0) == 0xe0               ? 3
		             : (*p & 0xf8) == 0xf0 && *p <= 0xf4 ? 4
		                                                 : 0;
		for (size_t k = 1; k < len; k++)
			if ((p[k] & 0xc0) != 0x80)
				len = 0; /* cut short (a NUL ends it too) */
		if (len == 3 && ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0)))
			len = 0; /* overlong, or a surrogate */
		if (len == 4 && ((p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90)))
			len = 0;
		if (!len) {
			out[o++] = '?';
			p++;
			continue;
		}
		if (o + len > n)
			break;
		memcpy(out + o, p, len);
		o += len;
		p += len;
	}
	return o;
}

trace_span *trace_span_new(const char *what, const char *name, const char *workflow,
                           const char *group, const char *error)
{
	size_t lw = strlen(what), ln = name ? strlen(name) : 0, lf = strlen(workflow),
	       lg = group ? strlen(group) : 0, le = error ? strlen(error) : 0;
	if (le > TRACE_ERROR_MAX)
		le = TRACE_ERROR_MAX;
	trace_span *s =
	    malloc(sizeof *s + lw + 1 + ln + 1 + lf + 1 + lg + 1 + (error ? le + 1 : 0));
	if (!s)
		return NULL;
	memset(s, 0, sizeof *s);
	char *p = s->tail;
	s->name = p;
	memcpy(p, what, lw);
	p += lw;
	if (name) {
		*p++ = ' ';
		memcpy(p, name, ln);
		p += ln;
	}
	*p++ = '\0';
	s->workflow = memcpy(p, workflow, lf + 1);
	p += lf + 1;
	s->group = p;
	if (group)
		memcpy(p, group, lg);
	p[lg] = '\0';
	p += lg + 1;
	if (error) {
		s->error = p;
		p[utf8_copy(p, error, le)] = '\0';
	}
	s->seq = -1;
	return s;
}

/* ------------------------------------------------------------- protobuf */

enum { WT_VARINT = 0, WT_FIXED64 = 1, WT_LEN = 2 };

static size_t varint_len(uint64_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

static void pb_varint(buf *b, uint64_t v)
{
	char tmp[10];
	size_t n = 0;
	while (v >= 0x80) {
		tmp[n++] = (char)(v | 0x80);
		v >>= 7;
	}
	tmp[n++] = (char)v;
	buf_append(b, tmp, n);
}

static void pb_tag(buf *b, int field, int wt)
{
	pb_varint(b, (uint64_t)field << 3 | (uint64_t)wt);
}

static void pb_bytes(buf *b, int field, const void *p, size_t n)
{
	pb_tag(b, field, WT_LEN);
	pb_varint(b, n);
	buf_append(b, p, n);
}

static void pb_str(buf *b, int field, const char *s)
{
	pb_bytes(b, field, s, strlen(s));
}

static void pb_uint(buf *b, int field, uint64_t v)
{
	pb_tag(b, field, WT_VARINT);
	pb_varint(b, v);
}

/* A KeyValue (field `field` of its parent) whose AnyValue is string v. */
static void kv_str(buf *b, int field, const char *key, const char *v)
{
	size_t kl = strlen(key), vl = strlen(v);
	size_t any = 1 + varint_len(vl) + vl;
	size_t kv = 1 + varint_len(kl) + kl + 1 + varint_len(any) + any;
	pb_tag(b, field, WT_LEN);
	pb_varint(b, kv);
	pb_bytes(b, 1, key, kl);
	pb_tag(b, 2, WT_LEN);
	pb_varint(b, any);
	pb_bytes(b, 1, v, vl); /* AnyValue.string_value */
}

/* The same with int_value v (field 3, a varint of the two's complement). */
static void kv_int(buf *b, int field, const char *key, int64_t v)
{
	size_t kl = strlen(key);
	size_t any = 1 + varint_len((uint64_t)v);
	size_t kv = 1 + varint_len(kl) + kl + 1 + varint_len(any) + any;
	pb_tag(b, field, WT_LEN);
	pb_varint(b, kv);
	pb_bytes(b, 1, key, kl);
	pb_tag(b, 2, WT_LEN);
	pb_varint(b, any);
	pb_uint(b, 3, (uint64_t)v);
}

/* A nested message: its bytes (in m) as field `field` of b. */
static void pb_msg(buf *b, int field, const buf *m)
{
	pb_bytes(b, field, m->data ? m->data : "", m->len);
}

/* Writers into memory the caller has reserved (see span_bound): a span is
 * written field by field with no check per field, which made encoding
 * three times faster than appending each field to a buf. */
static char *w_varint(char *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (char)(v | 0x80);
		v >>= 7;
	}
	*p++ = (char)v;
	return p;
}

static char *w_tag(char *p, int field, int wt)
{
	return w_varint(p, (uint64_t)field << 3 | (uint64_t)wt);
}

static char *w_bytes(char *p, int field, const void *d, size_t n)
{
	p = w_varint(w_tag(p, field, WT_LEN), n);
	memcpy(p, d, n);
	return p + n;
}

static char *w_fixed64(char *p, int field, uint64_t v)
{
	p = w_tag(p, field, WT_FIXED64);
	for (int k = 0; k < 8; k++)
		*p++ = (char)(v >> (8 * k));
	return p;
}

/* The bytes of a KeyValue (its body) of a string of vl bytes. */
static size_t kv_str_len(size_t kl, size_t vl)
{
	size_t any = 1 + varint_len(vl) + vl;
	return 1 + varint_len(kl) + kl + 1 + varint_len(any) + any;
}

static char *w_kv_str(char *p, int field, const char *k, size_t kl, const char *v, size_t vl)
{
	p = w_varint(w_tag(p, field, WT_LEN), kv_str_len(kl, vl));
	p = w_bytes(p, 1, k, kl);
	p = w_varint(w_tag(p, 2, WT_LEN), 1 + varint_len(vl) + vl);
	return w_bytes(p, 1, v, vl);
}

static char *w_kv_int(char *p, int field, const char *k, size_t kl, int64_t v)
{
	size_t any = 1 + varint_len((uint64_t)v);
	p = w_varint(w_tag(p, field, WT_LEN), 1 + varint_len(kl) + kl + 1 + varint_len(any) + any);
	p = w_bytes(p, 1, k, kl);
	p = w_varint(w_tag(p, 2, WT_LEN), any);
	return w_varint(w_tag(p, 3, WT_VARINT), (uint64_t)v);
}

#define KEY(s) s, sizeof s - 1

/* At least the bytes encode_span writes for s: the fixed fields and
 * attributes take under 600, plus the strings (the error three times: the
 * event's message and the status's). */
static size_t span_bound(const trace_span *s)
{
	size_t e = s->error ? strlen(s->error) : 8;
	return 800 + strlen(s->name) + strlen(s->workflow) + strlen(s->group) + 3 * e;
}

/* Span (opentelemetry.proto.trace.v1.Span) s at p (span_bound(s) bytes
 * free); returns the end. */
static char *encode_span(const trace_span *s, char *p)
{
	p = w_bytes(p, 1, s->trace_id, 16);
	p = w_bytes(p, 2, s->span_id, 8);
	if (!all_zero(s->parent, 8))
		p = w_bytes(p, 4, s->parent, 8);
	p = w_bytes(p, 5, s->name, strlen(s->name));
	p = w_varint(w_tag(p, 6, WT_VARINT), 1); /* SPAN_KIND_INTERNAL */
	p = w_fixed64(p, 7, (uint64_t)s->start_ns);
	p = w_fixed64(p, 8, (uint64_t)(s->end_ns > s->start_ns ? s->end_ns : s->start_ns));
	p = w_kv_int(p, 9, KEY("cairn.run_id"), s->run_id);
	p = w_kv_str(p, 9, KEY("cairn.workflow"), s->workflow, strlen(s->workflow));
	p = w_kv_int(p, 9, KEY("cairn.attempt"), s->attempt);
	p = w_kv_int(p, 9, KEY("cairn.shard"), s->shard);
	if (s->group[0])
		p = w_kv_str(p, 9, KEY("cairn.shard_group"), s->group, strlen(s->group));
	if (s->kind == TRACE_CALL) {
		const char *k = s->call_kind ? s->call_kind : "step";
		p = w_kv_int(p, 9, KEY("cairn.step.seq"), s->seq);
		p = w_kv_str(p, 9, KEY("cairn.step.kind"), k, strlen(k));
		if (s->step_attempt > 0)
			p = w_kv_int(p, 9, KEY("cairn.step.attempt"), s->step_attempt);
	}
	if (s->outcome)
		p = w_kv_str(p, 9, KEY("cairn.outcome"), s->outcome, strlen(s->outcome));
	if (s->error_type) {
		const char *msg = s->error ? s->error : "failed";
		size_t ml = strlen(msg), tl = strlen(s->error_type);
		size_t tk = sizeof "exception.type" - 1, mk = sizeof "exception.message" - 1;
		size_t ev = 9 + 1 + 1 + (sizeof "exception" - 1) + 1 +
		            varint_len(kv_str_len(tk, tl)) + kv_str_len(tk, tl) + 1 +
		            varint_len(kv_str_len(mk, ml)) + kv_str_len(mk, ml);
		p = w_varint(w_tag(p, 11, WT_LEN), ev);
		p = w_fixed64(p, 1, (uint64_t)s->end_ns);
		p = w_bytes(p, 2, KEY("exception"));
		p = w_kv_str(p, 3, KEY("exception.type"), s->error_type, tl);
		p = w_kv_str(p, 3, KEY("exception.message"), msg, ml);
		p = w_varint(w_tag(p, 15, WT_LEN), 1 + varint_len(ml) + ml + 2);
		p = w_bytes(p, 2, msg, ml);
		p = w_varint(w_tag(p, 3, WT_VARINT), 2); /* STATUS_CODE_ERROR */
	}
	/* flags: the W3C trace flags (sampled) and "parent is remote" known. */
	p = w_tag(p, 16, 5);
	memcpy(p, "\1\1\0\0", 4);
	return p + 4;
}

void trace_encode(const buf *resource, trace_span *const *spans, int n, buf *out)
{
	buf scope = BUF_INIT, sp = BUF_INIT, rs = BUF_INIT;
	/* InstrumentationScope {name, version} */
	buf_reset(&sp);
	pb_str(&sp, 1, "cairn");
	pb_str(&sp, 2, CAIRN_VERSION);
	pb_msg(&scope, 1, &sp);
	for (int i = 0; i < n; i++) {
		buf_reset(&sp);
		if (buf_reserve(&sp, span_bound(spans[i])) < 0)
			break;
		sp.len = (size_t)(encode_span(spans[i], sp.data) - sp.data);
		sp.data[sp.len] = '\0';
		pb_msg(&scope, 2, &sp);
	}
	pb_msg(&rs, 1, resource);
	pb_msg(&rs, 2, &scope);
	buf_reset(out);
	pb_msg(out, 1, &rs);
	if (scope.oom || sp.oom || rs.oom)
		out->oom = 1;
	buf_free(&scope);
	buf_free(&sp);
	buf_free(&rs);
}

/* ------------------------------------------------------ k=v,k=v values */

/* Percent-decodes s[0..n) into out: 0, or -1 on a bad escape. */
static int pct_decode(const char *s, size_t n, buf *out)
{
	for (size_t i = 0; i < n; i++) {
		if (s[i] != '%') {
			buf_append(out, s + i, 1);
			continue;
		}
		uint8_t c;
		char h[2] = {i + 1 < n ? s[i + 1] : 0, i + 2 < n ? s[i + 2] : 0};
		if (h[0] >= 'A' && h[0] <= 'F')
			h[0] = (char)(h[0] - 'A' + 'a');
		if (h[1] >= 'A' && h[1] <= 'F')
			h[1] = (char)(h[1] - 'A' + 'a');
		if (unhex(h, &c, 1) < 0)
			return -1;
		buf_append(out, (const char *)&c, 1);
		i += 2;
	}
	return 0;
}

/* Walks "k=v,k2=v2" (spaces around members ignored, values
 * percent-encoded), calling fn(key, value, arg) for each: 0, or -1 with
 * why naming the bad member. */
static int pairs_each(const char *what, const char *pairs, char *why,
                      int (*fn)(const char *k, const char *v, void *arg), void *arg)
{
	const char *p = pairs;
	while (p && *p) {
		const char *end = strchr(p, ',');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		while (n && (*p == ' ' || *p == '\t')) {
			p++;
			n--;
		}
		while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
			n--;
		const char *eq = memchr(p, '=', n);
		buf k = BUF_INIT, v = BUF_INIT;
		int bad = !eq || eq == p;
		if (!bad) {
			size_t kn = (size_t)(eq - p);
			while (kn && (p[kn - 1] == ' ' || p[kn - 1] == '\t'))
				kn--;
			const char *vs = eq + 1;
			size_t vn = n - (size_t)(vs - p);
			while (vn && (*vs == ' ' || *vs == '\t')) {
				vs++;
				vn--;
			}
			bad = pct_decode(p, kn, &k) < 0 || pct_decode(vs, vn, &v) < 0 || !k.len;
			for (size_t i = 0; !bad && i < k.len; i++)
				bad = (unsigned char)k.data[i] <= ' ' || k.data[i] == 0x7f;
			for (size_t i = 0; !bad && i < v.len; i++)
				bad = v.data[i] == '\0' || v.data[i] == '\r' || v.data[i] == '\n';
		}
		if (!bad && n && fn && fn(buf_str(&k), buf_str(&v), arg) < 0)
			bad = 2;
		buf_free(&k);
		buf_free(&v);
		if (bad && n) {
			snprintf(
			    why, PARSE_ERR_MAX,
			    "invalid value for %s: member \"%.*s\": expected key=value members "
			    "separated by commas, values percent-encoded (a=b,c=d%%20e)",
			    what, (int)(n > 80 ? 80 : n), p);
			return -1;
		}
		p = end ? end + 1 : NULL;
	}
	return 0;
}

int trace_check_pairs(const char *what, const char *pairs, char *why)
{
	return pairs_each(what, pairs, why, NULL, NULL);
}

int trace_check_url(const char *url, char *why)
{
	CURLU *h = curl_url();
	char *scheme = NULL, *host = NULL;
	int ok = h && curl_url_set(h, CURLUPART_URL, url, 0) == CURLUE_OK &&
	         curl_url_get(h, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
	         curl_url_get(h, CURLUPART_HOST, &host, 0) == CURLUE_OK && *host &&
	         (strcmp(scheme, "http") == 0 || strcmp(scheme, "https") == 0);
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(h);
	if (ok)
		return 0;
	snprintf(why, PARSE_ERR_MAX,
	         "\"%.120s\": expected an http:// or https:// URL with a host, like "
	         "http://collector:4318",
	         url);
	return -1;
}

/* --------------------------------------------------------------- resource */

typedef struct res_arg {
	buf *attrs;
	int has_name;
} res_arg;

static int res_attr(const char *k, const char *v, void *arg)
{
	res_arg *a = arg;
	if (strcmp(k, "service.name") == 0) {
		if (a->has_name)
			return 0; /* OTEL_SERVICE_NAME wins */
		a->has_name = 1;
	}
	kv_str(a->attrs, 1, k, v);
	return 0;
}

int trace_resource(const trace_settings *s, const char *instance, buf *out, char *why)
{
	res_arg a = {.attrs = out};
	buf_reset(out);
	if (s->service_name && *s->service_name) {
		kv_str(out, 1, "service.name", s->service_name);
		a.has_name = 1;
	}
	if (pairs_each("OTEL_RESOURCE_ATTRIBUTES", s->resource_attrs, why, res_attr, &a) < 0)
		return -1;
	if (!a.has_name)
		kv_str(out, 1, "service.name", "cairn-worker");
	char host[256] = "";
	if (gethostname(host, sizeof host - 1) == 0 && host[0])
		kv_str(out, 1, "host.name", host);
	kv_str(out, 1, "service.instance.id", instance);
	kv_int(out, 1, "process.pid", (int64_t)getpid());
	kv_str(out, 1, "telemetry.sdk.name", "cairn");
	kv_str(out, 1, "telemetry.sdk.language", "c");
	kv_str(out, 1, "telemetry.sdk.version", CAIRN_VERSION);
	return out->oom ? -1 : 0;
}

/* --------------------------------------------------------------- exporter */

struct tracer {
	trace_settings s;
	char *url;
	metrics *m;
	const logger *log;
	buf resource; /* the Resource message */
	CURL *curl;
	struct curl_slist *headers;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	trace_span **ring; /* [s.queue_max] */
	int head, len;
	int stop;
	_Atomic int64_t stop_by; /* monotonic ms: exports end by then once stop is set (0: not
	                            stopping) */
	int failing;             /* the last export failed: the next success is logged */
};

void tracer_emit(tracer *t, trace_span *s)
{
	pthread_mutex_lock(&t->mu);
	if (t->len == t->s.queue_max) {
		pthread_mutex_unlock(&t->mu);
		atomic_fetch_add_explicit(&t->m->otel_spans_dropped_full, 1, memory_order_relaxed);
		free(s);
		return;
	}
	t->ring[(t->head + t->len) % t->s.queue_max] = s;
	int full_batch = ++t->len == t->s.batch_max;
	atomic_store_explicit(&t->m->otel_queue_length, t->len, memory_order_relaxed);
	pthread_mutex_unlock(&t->mu);
	if (full_batch)
		pthread_cond_signal(&t->cv);
}

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
	return size * n;
}

/* Ends an export in progress once the worker stops and its deadline for
 * the last exports has passed: a collector that hangs holds a drain up for
 * tracer_stop's wait, not for OTEL_EXPORTER_OTLP_TIMEOUT. */
static int export_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	tracer *t = arg;
	int64_t by = atomic_load(&t->stop_by);
	return by && clock_mono_ms() >= by;
}

/* POSTs body: 0, or -1 with why. */
static int post(tracer *t, const buf *body, char *why, size_t n)
{
	curl_easy_setopt(t->curl, CURLOPT_POSTFIELDS, body->data);
	curl_easy_setopt(t->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body->len);
	CURLcode rc = curl_easy_perform(t->curl);
	long status = 0;
	if (rc == CURLE_OK)
		curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
	if (rc == CURLE_OK && status >= 200 && status < 300)
		return 0;
	if (rc != CURLE_OK)
		snprintf(why, n, "%s", curl_easy_strerror(rc));
	else
		snprintf(why, n, "the collector answered HTTP %ld", status);
	return -1;
}

/* Sends spans[0..n) and frees them. */
static void export_batch(tracer *t, trace_span **spans, int n)
{
	buf body = BUF_INIT;
	char why[256] = "out of memory encoding spans";
	trace_encode(&t->resource, spans, n, &body);
	int rc = body.oom ? -1 : post(t, &body, why, sizeof why);
	buf_free(&body);
	for (int i = 0; i < n; i++)
		free(spans[i]);
	if (rc == 0) {
		atomic_fetch_add(&t->m->otel_spans_exported, (uint64_t)n);
		if (t->failing)
			log_kv(t->log, LOG_INFO, "exporting spans again", "url", t->url, NULL);
		t->failing = 0;
		return;
	}
	atomic_fetch_add(&t->m->otel_export_failures, 1);
	atomic_fetch_add(&t->m->otel_spans_dropped_failed, (uint64_t)n);
	if (!t->failing) {
		char cnt[24];
		snprintf(cnt, sizeof cnt, "%d", n);
		log_kv(
		    t->log, LOG_WARN,
		    "cannot export spans; they are dropped (cairn_otel_spans_dropped_total) until "
		    "the collector answers",
		    "url", t->url, "spans", cnt, "error", why, NULL);
	}
	t->failing = 1;
}

static void *exporter_main(void *arg)
{
	tracer *t = arg;
	trace_span **batch = malloc(sizeof *batch * (size_t)t->s.batch_max);
	pthread_mutex_lock(&t->mu);
	for (;;) {
		int64_t due = clock_mono_ms() + t->s.delay_ms;
		while (!t->stop && t->len < t->s.batch_max) {
			int64_t left = due - clock_mono_ms();
			if (left <= 0)
				break;
			clock_cond_wait_ms(&t->cv, &t->mu, left);
		}
		if (t->stop && (!t->len || clock_mono_ms() >= t->stop_by))
			break;
		while (t->len) {
			int n = 0;
			while (t->len && n < t->s.batch_max && batch) {
				batch[n++] = t->ring[t->head];
				t->head = (t->head + 1) % t->s.queue_max;
				t->len--;
			}
			atomic_store(&t->m->otel_queue_length, t->len);
			pthread_mutex_unlock(&t->mu);
			if (n)
				export_batch(t, batch, n);
			pthread_mutex_lock(&t->mu);
			if (!batch || (!t->stop && t->len < t->s.batch_max) ||
			    (t->stop && clock_mono_ms() >= t->stop_by))
				break;
		}
		if (!batch)
			break;
	}
	pthread_mutex_unlock(&t->mu);
	free(batch);
	return NULL;
}

static void tracer_free(tracer *t)
{
	if (!t)
		return;
	for (int i = 0; i < t->len; i++)
		free(t->ring[(t->head + i) % t->s.queue_max]);
	if (t->len)
		atomic_fetch_add(&t->m->otel_spans_dropped_full, (uint64_t)t->len);
	atomic_store(&t->m->otel_queue_length, 0);
	free(t->ring);
	free(t->url);
	buf_free(&t->resource);
	curl_slist_free_all(t->headers);
	if (t->curl)
		curl_easy_cleanup(t->curl);
	pthread_cond_destroy(&t->cv);
	pthread_mutex_destroy(&t->mu);
	free(t);
}

static int add_header(const char *k, const char *v, void *arg)
{
	tracer *t = arg;
	buf h = BUF_INIT;
	buf_printf(&h, "%s: %s", k, v);
	struct curl_slist *l = h.oom ? NULL : curl_slist_append(t->headers, buf_str(&h));
	buf_free(&h);
	if (!l)
		return -1;
	t->headers = l;
	return 0;
}

/* A UUIDv4 for service.instance.id into id (37 bytes). */
static void instance_id(char *id)
{
	uint8_t b[16];
	randombytes_buf(b, sizeof b);
	b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
	b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
	static const int groups[] = {4, 2, 2, 2, 6};
	char *p = id;
	const uint8_t *q = b;
	for (int g = 0; g < 5; g++) {
		if (g)
			*p++ = '-';
		hex(p, q, (size_t)groups[g]);
		p += 2 * groups[g];
		q += groups[g];
	}
	*p = '\0';
}

/* t's curl handle, resource and headers: 0, or -CAIRN_ENOMEM /
 * -CAIRN_EINVAL with why. */
static int tracer_setup(tracer *t, const char *instance, char *why)
{
	const trace_settings *s = &t->s;
	if (!t->url || !t->ring || !t->curl) {
		snprintf(why, PARSE_ERR_MAX, "out of memory starting the span exporter");
		return -CAIRN_ENOMEM;
	}
	if (trace_resource(s, instance, &t->resource, why) < 0 ||
	    pairs_each("OTEL_EXPORTER_OTLP_HEADERS", s->headers, why, add_header, t) < 0)
		return -CAIRN_EINVAL;
	struct curl_slist *l =
	    curl_slist_append(t->headers, "Content-Type: application/x-protobuf");
	if (!l) {
		snprintf(why, PARSE_ERR_MAX, "out of memory starting the span exporter");
		return -CAIRN_ENOMEM;
	}
	t->headers = l;
	curl_easy_setopt(t->curl, CURLOPT_URL, t->url);
	curl_easy_setopt(t->curl, CURLOPT_HTTPHEADER, t->headers);
	curl_easy_setopt(t->curl, CURLOPT_TIMEOUT_MS, (long)s->timeout_ms);
	curl_easy_setopt(t->curl, CURLOPT_CONNECTTIMEOUT_MS, (long)s->timeout_ms);
	curl_easy_setopt(t->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(t->curl, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(t->curl, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(t->curl, CURLOPT_XFERINFOFUNCTION, export_progress);
	curl_easy_setopt(t->curl, CURLOPT_XFERINFODATA, t);
	curl_easy_setopt(t->curl, CURLOPT_USERAGENT, "cairn/" CAIRN_VERSION " (otlp)");
	return 0;
}

int tracer_start(const trace_settings *s, metrics *m, const logger *log, tracer **out, buf *err)
{
	*out = NULL;
	atomic_store(&m->otel_queue_capacity, s->url && *s->url ? s->queue_max : 0);
	if (!s->url || !*s->url)
		return 0;
	char why[PARSE_ERR_MAX] = "out of memory starting the span exporter", id[37];
	tracer *t = calloc(1, sizeof *t);
	int rc = -CAIRN_ENOMEM;
	if (t) {
		t->s = *s;
		t->m = m;
		t->log = log;
		pthread_mutex_init(&t->mu, NULL);
		clock_cond_init(&t->cv);
		t->url = strdup(s->url);
		t->ring = calloc((size_t)s->queue_max, sizeof *t->ring);
		t->curl = curl_easy_init();
		instance_id(id);
		rc = tracer_setup(t, id, why);
		if (!rc && pthread_create(&t->thread, NULL, exporter_main, t) != 0)
			rc = -CAIRN_ENOMEM;
	}
	if (rc) {
		tracer_free(t);
		buf_reset(err);
		buf_puts(err, why);
		return rc;
	}
	*out = t;
	log_kv(log, LOG_INFO, "exporting traces", "url", t->url, "service.instance.id", id, NULL);
	return 0;
}

void tracer_stop(tracer *t, int64_t wait_ms)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->mu);
	t->stop = 1;
	atomic_store(&t->stop_by, clock_mono_ms() + (wait_ms > 0 ? wait_ms : 1));
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu);
	pthread_join(t->thread, NULL);
	tracer_free(t);
}
