/*
 * builtins.c - the workflows every stock cairn-worker serves:
 *
 *   noop   returns its input (the benchmark's unit of work)
 *   sleep  {"ms": N}: one durable sleep
 *   http   one HTTP request with libcurl, journaled, retried on connection
 *          errors and 5xx with backoff
 *   order  the demo: charge, wait for an "approval" signal, pack, ship
 *   fanout {"n": N}: N child runs of square, waited for and summed, with a
 *          "progress" event
 *   square {"x": X}: X squared, in a step
 *   checkout the order with its payment as a child run (payment)
 *   payment {"amount": N}: a charge, in a step
 *   report the runs of the last day by status, counted in a transactional
 *          step: for a schedule
 *
 * Every input is validated before the first durable call, and bad input
 * fails the run with a message naming the field, the value and what is
 * accepted. Workflow functions run on the worker's executor threads and are
 * re-run from the top on every resume, so they keep no state of their own:
 * a durable call's result is owned by the ctx, and *output is handed to the
 * engine. Owns nothing beyond one call; libcurl's global state is set up by
 * builtins_register() on the main thread.
 */
#include "builtins.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <ctype.h>
#include <curl/curl.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "buf.h"
#include "netpolicy.h"

#define DAY_MS       (24LL * 3600 * 1000)
#define SLEEP_MAX_MS (30 * DAY_MS)

#define HTTP_URL_MAX            8192
#define HTTP_HEADERS_MAX        64 /* request headers */
#define HTTP_HEADER_VALUE_MAX   8192
#define HTTP_BODY_MAX           (1 << 20)  /* response body, bytes */
#define HTTP_RESP_HEADERS_MAX   (64 << 10) /* all response header lines, bytes */
#define HTTP_TIMEOUT_DEFAULT_MS 10000
#define HTTP_TIMEOUT_MAX_MS     300000
#define HTTP_ATTEMPTS_DEFAULT   5
#define HTTP_ATTEMPTS_MAX       20
#define HTTP_REDIRECTS_MAX      5
#define HTTP_REFUSED_MAX        (128 + NETPOLICY_WHY_MAX) /* "HOST is why" */

#define ORDER_ITEM_MAX            200
#define ORDER_APPROVAL_TIMEOUT_MS (3600 * 1000)

/* ------------------------------------------------------------ helpers */

/* The JSON text of v for an error message, cut to fit out. */
static const char *json_text(const cJSON *v, char *out, size_t n)
{
	if (!v) {
		snprintf(out, n, "nothing (the field is missing)");
		return out;
	}
	char *s = cJSON_PrintUnformatted(v);
	if (!s) {
		snprintf(out, n, "(unprintable)");
		return out;
	}
	if (strlen(s) >= n && n > 4)
		snprintf(out, n, "%.*s...", (int)(n - 4), s);
	else
		snprintf(out, n, "%s", s);
	free(s);
	return out;
}

/* 1 if s[0..n) is valid UTF-8 without NUL bytes (what jsonb accepts). */
static int utf8_text(const unsigned char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		unsigned c = s[i];
		size_t len;
		unsigned min;
		if (c == 0)
			return 0;
		if (c < 0x80) {
			i++;
			continue;
		}
		if ((c & 0xE0) == 0xC0)
			len = 2, min = 0x80, c &= 0x1F;
		else if ((c & 0xF0) == 0xE0)
			len = 3, min = 0x800, c &= 0x0F;
		else if ((c & 0xF8) == 0xF0)
			len = 4, min = 0x10000, c &= 0x07;
		else
			return 0;
		if (n - i < len)
			return 0;
		for (size_t k = 1; k < len; k++) {
			if ((s[i + k] & 0xC0) != 0x80)
				return 0;
			c = (c << 6) | (s[i + k] & 0x3F);
		}
		if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
			return 0;
		i += len;
	}
	return 1;
}

/* Appends s[0..n) to b, bytes that are not UTF-8 text replaced by '?'. */
static void append_text(buf *b, const char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		size_t len = 1;
		unsigned char c = (unsigned char)s[i];
		if (c >= 0xF0)
			len = 4;
		else if (c >= 0xE0)
			len = 3;
		else if (c >= 0xC0)
			len = 2;
		if (len <= n - i && utf8_text((const unsigned char *)s + i, len))
			buf_append(b, s + i, len);
		else
			buf_append(b, "?", 1), len = 1;
		i += len;
	}
}

static void base64(buf *b, const unsigned char *s, size_t n)
{
	static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned)s[i] << 16;
		if (i + 1 < n)
			v |= (unsigned)s[i + 1] << 8;
		if (i + 2 < n)
			v |= s[i + 2];
		char q[4] = {A[(v >> 18) & 63], A[(v >> 12) & 63],
		             i + 1 < n ? A[(v >> 6) & 63] : '=', i + 2 < n ? A[v & 63] : '='};
		buf_append(b, q, 4);
	}
}

/* An integer-valued JSON number in [min, max]; 0 on success. */
static int get_int(const cJSON *v, int64_t min, int64_t max, int64_t *out)
{
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
	    v->valuedouble != floor(v->valuedouble))
		return -1;
	if (v->valuedouble < (double)min || v->valuedouble > (double)max)
		return -1;
	*out = (int64_t)v->valuedouble;
	return 0;
}

static int is_object(const cJSON *v)
{
	return v && cJSON_IsObject(v);
}

/* ---------------------------------------------------------------- noop */

static int wf_noop(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	if (!input || cJSON_IsNull(input))
		return CAIRN_OK;
	*output = cJSON_Duplicate(input, 1);
	return *output ? CAIRN_OK : cairn_fail(ctx, "noop: out of memory copying the input");
}

/* --------------------------------------------------------------- sleep */

static int wf_sleep(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	char t[128];
	if (!is_object(input))
		return cairn_fail(ctx, "sleep: input must be an object like {\"ms\": 1000}, got %s",
		                  json_text(input, t, sizeof t));
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(input, "ms");
	int64_t ms;
	if (get_int(v, 0, SLEEP_MAX_MS, &ms))
		return cairn_fail(
		    ctx, "sleep: \"ms\" must be an integer from 0 to %lld (30 days), got %s",
		    (long long)SLEEP_MAX_MS, json_text(v, t, sizeof t));
	CAIRN_TRY(cairn_sleep(ctx, "sleep", ms));
	*output = cJSON_CreateObject();
	if (*output)
		cJSON_AddNumberToObject(*output, "slept_ms", (double)ms);
	return CAIRN_OK;
}

/* ---------------------------------------------------------------- http */

/* Where requests may go (CAIRN_HTTP_ALLOW) and through which proxy
 * (CAIRN_HTTP_PROXY); read once by builtins_register(). */
typedef struct http_env {
	netpolicy *allow;
	char *proxy; /* "": none, whatever the environment says */
} http_env;

static http_env *http_settings;

/* A validated request; built from the input on every (re)play. */
typedef struct http_req {
	const http_env *env;
	char url[HTTP_URL_MAX + 1];
	char method[8];
	struct curl_slist *headers;
	char *body; /* NULL: none */
	size_t body_len;
	int64_t timeout_ms;
} http_req;

/* What came back; lives for one attempt. */
typedef struct http_resp {
	cairn_ctx *ctx;
	const http_env *env;
	int check;                      /* refuse addresses CAIRN_HTTP_ALLOW does not open */
	char refused[HTTP_REFUSED_MAX]; /* the address refused, and why; "" none */
	buf body;
	int body_too_big;
	cJSON *headers;
	size_t header_bytes;
	int headers_too_big;
} http_resp;

static const char *const HTTP_METHODS[] = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"};

static int header_name_ok(const char *s)
{
	/* RFC 9110 token characters. */
	size_t n = strlen(s);
	if (n == 0 || n > 256)
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("!#$%&'*+-.^_`|~", *s))
			return 0;
	return 1;
}

static int header_value_ok(const char *s)
{
	if (strlen(s) > HTTP_HEADER_VALUE_MAX)
		return 0;
	for (; *s; s++)
		if (*s == '\r' || *s == '\n')
			return 0;
	return 1;
}

static void http_req_free(http_req *r)
{
	curl_slist_free_all(r->headers);
	free(r->body);
}

/* Adds "Name: value" to the request's headers; 0 on success. */
static int add_header(http_req *r, const char *name, const char *value)
{
	buf b = BUF_INIT;
	/* "Name;" sends an empty header; "Name:" would remove it. */
	if (*value)
		buf_printf(&b, "%s: %s", name, value);
	else
		buf_printf(&b, "%s;", name);
	struct curl_slist *l = b.oom ? NULL : curl_slist_append(r->headers, b.data);
	buf_free(&b);
	if (!l)
		return -1;
	r->headers = l;
	return 0;
}

/* Checks the url: parseable by libcurl, scheme http or https, a host. */
static int check_url(cairn_ctx *ctx, const char *url)
{
	CURLU *u = curl_url();
	if (!u)
		return cairn_fail(ctx, "http: out of memory");
	char *scheme = NULL, *host = NULL;
	CURLUcode uc = curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME);
	int rc = CAIRN_OK;
	if (uc != CURLUE_OK)
		rc = cairn_fail(ctx, "http: \"url\" is not a valid URL: \"%.200s\": %s", url,
		                curl_url_strerror(uc));
	else if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	         (strcasecmp(scheme, "http") != 0 && strcasecmp(scheme, "https") != 0))
		rc = cairn_fail(
		    ctx, "http: \"url\" must be an http:// or https:// URL, got \"%.200s\"", url);
	else if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !*host)
		rc = cairn_fail(ctx, "http: \"url\" has no host: \"%.200s\"", url);
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(u);
	return rc;
}

/* Validates the input into r; a bad field fails the run naming it. */
static int http_parse(cairn_ctx *ctx, const cJSON *in, http_req *r, cairn_retry_policy *policy)
{
	char t[128];
	if (!is_object(in))
		return cairn_fail(
		    ctx,
		    "http: input must be an object like {\"url\": \"https://example.com\"}, "
		    "got %s",
		    json_text(in, t, sizeof t));

	const cJSON *url = cJSON_GetObjectItemCaseSensitive(in, "url");
	if (!url)
		return cairn_fail(ctx, "http: \"url\" is missing: the input needs {\"url\": "
		                       "\"https://...\"}");
	if (!cJSON_IsString(url) || !*url->valuestring)
		return cairn_fail(ctx, "http: \"url\" must be a non-empty string, got %s",
		                  json_text(url, t, sizeof t));
	if (strlen(url->valuestring) > HTTP_URL_MAX)
		return cairn_fail(ctx, "http: \"url\" is %zu bytes long; at most %d are accepted",
		                  strlen(url->valuestring), HTTP_URL_MAX);
	CAIRN_TRY(check_url(ctx, url->valuestring));
	snprintf(r->url, sizeof r->url, "%s", url->valuestring);

	const cJSON *m = cJSON_GetObjectItemCaseSensitive(in, "method");
	snprintf(r->method, sizeof r->method, "GET");
	if (m && !cJSON_IsNull(m)) {
		size_t i = 0, n = sizeof HTTP_METHODS / sizeof HTTP_METHODS[0];
		if (cJSON_IsString(m))
			while (i < n && strcasecmp(m->valuestring, HTTP_METHODS[i]) != 0)
				i++;
		if (!cJSON_IsString(m) || i == n)
			return cairn_fail(
			    ctx,
			    "http: \"method\" must be GET, POST, PUT, PATCH, DELETE or "
			    "HEAD, got %s",
			    json_text(m, t, sizeof t));
		snprintf(r->method, sizeof r->method, "%s", HTTP_METHODS[i]);
	}

	int has_content_type = 0;
	const cJSON *h = cJSON_GetObjectItemCaseSensitive(in, "headers");
	if (h && !cJSON_IsNull(h)) {
		if (!cJSON_IsObject(h))
			return cairn_fail(ctx,
			                  "http: \"headers\" must be an object of strings like "
			                  "{\"Accept\": \"application/json\"}, got %s",
			                  json_text(h, t, sizeof t));
		if (cJSON_GetArraySize(h) > HTTP_HEADERS_MAX)
			return cairn_fail(
			    ctx, "http: \"headers\" has %d entries; at most %d are accepted",
			    cJSON_GetArraySize(h), HTTP_HEADERS_MAX);
		const cJSON *e;
		cJSON_ArrayForEach(e, h)
		{
			if (!header_name_ok(e->string))
				return cairn_fail(
				    ctx,
				    "http: header name \"%.100s\" is not valid: expected "
				    "1-256 letters, digits or !#$%%&'*+-.^_`|~",
				    e->string);
			if (!cJSON_IsString(e))
				return cairn_fail(ctx,
				                  "http: header \"%s\" must be a string, got %s",
				                  e->string, json_text(e, t, sizeof t));
			if (!header_value_ok(e->valuestring))
				return cairn_fail(
				    ctx,
				    "http: header \"%s\" must be at most %d bytes without "
				    "CR or LF",
				    e->string, HTTP_HEADER_VALUE_MAX);
			has_content_type |= strcasecmp(e->string, "content-type") == 0;
			if (add_header(r, e->string, e->valuestring))
				return cairn_fail(ctx, "http: out of memory");
		}
	}

	const cJSON *body = cJSON_GetObjectItemCaseSensitive(in, "body");
	if (body && !cJSON_IsNull(body)) {
		if (strcmp(r->method, "HEAD") == 0)
			return cairn_fail(ctx, "http: a HEAD request cannot have a \"body\"");
		int text = cJSON_IsString(body);
		r->body = text ? strdup(body->valuestring) : cJSON_PrintUnformatted(body);
		if (!r->body)
			return cairn_fail(ctx, "http: out of memory");
		r->body_len = strlen(r->body);
		if (!has_content_type &&
		    add_header(r, "Content-Type",
		               text ? "text/plain; charset=utf-8" : "application/json"))
			return cairn_fail(ctx, "http: out of memory");
	}

	const cJSON *to = cJSON_GetObjectItemCaseSensitive(in, "timeout_ms");
	r->timeout_ms = HTTP_TIMEOUT_DEFAULT_MS;
	if (to && !cJSON_IsNull(to) && get_int(to, 1, HTTP_TIMEOUT_MAX_MS, &r->timeout_ms))
		return cairn_fail(ctx,
		                  "http: \"timeout_ms\" must be an integer from 1 to %d, got %s",
		                  HTTP_TIMEOUT_MAX_MS, json_text(to, t, sizeof t));

	const cJSON *ma = cJSON_GetObjectItemCaseSensitive(in, "max_attempts");
	int64_t attempts = HTTP_ATTEMPTS_DEFAULT;
	if (ma && !cJSON_IsNull(ma) && get_int(ma, 1, HTTP_ATTEMPTS_MAX, &attempts))
		return cairn_fail(ctx,
		                  "http: \"max_attempts\" must be an integer from 1 to %d, got %s",
		                  HTTP_ATTEMPTS_MAX, json_text(ma, t, sizeof t));
	policy->max_attempts = (int)attempts;

	/* curl would wait for "100 Continue" before sending a large body. */
	struct curl_slist *l = curl_slist_append(r->headers, "Expect:");
	if (!l)
		return cairn_fail(ctx, "http: out of memory");
	r->headers = l;
	return CAIRN_OK;
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
	http_resp *resp = arg;
	size_t len = size * n;
	if (resp->body.len + len > HTTP_BODY_MAX) {
		resp->body_too_big = 1;
		return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
	}
	buf_append(&resp->body, p, len);
	return resp->body.oom ? 0 : len;
}

/* One header line: "HTTP/1.1 200 OK" starts a new response (a redirect or
 * 100 Continue came before), "Name: value" adds a header. */
static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
	http_resp *resp = arg;
	size_t len = size * n;
	resp->header_bytes += len;
	if (resp->header_bytes > HTTP_RESP_HEADERS_MAX) {
		resp->headers_too_big = 1;
		return 0;
	}
	if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) {
		cJSON_Delete(resp->headers);
		resp->headers = cJSON_CreateObject();
		return resp->headers ? len : 0;
	}
	const char *colon = memchr(p, ':', len);
	if (!colon || colon == p || !resp->headers)
		return len; /* blank line, folded continuation: nothing to record */
	buf name = BUF_INIT, value = BUF_INIT;
	for (const char *c = p; c < colon; c++) {
		char l = (char)tolower((unsigned char)*c);
		append_text(&name, &l, 1);
	}
	const char *v = colon + 1, *end = p + len;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
		end--;
	cJSON *old = name.data ? cJSON_GetObjectItemCaseSensitive(resp->headers, name.data) : NULL;
	if (old && cJSON_IsString(old))
		buf_printf(&value, "%s, ", old->valuestring);
	append_text(&value, v, (size_t)(end - v));
	size_t ok = 0;
	if (!name.oom && !value.oom && name.data) {
		cJSON *s = cJSON_CreateString(buf_str(&value));
		if (s) {
			if (old)
				cJSON_ReplaceItemInObjectCaseSensitive(resp->headers, name.data, s);
			else
				cJSON_AddItemToObject(resp->headers, name.data, s);
			ok = len;
		}
	}
	buf_free(&name);
	buf_free(&value);
	return ok;
}

static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	http_resp *resp = arg;
	return cairn_should_stop(resp->ctx);
}

/* Errors no retry can fix. */
static int curl_permanent(CURLcode c)
{
	switch (c) {
	case CURLE_UNSUPPORTED_PROTOCOL:
	case CURLE_URL_MALFORMAT:
	case CURLE_NOT_BUILT_IN:
	case CURLE_TOO_MANY_REDIRECTS:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_BAD_CONTENT_ENCODING:
	case CURLE_FILESIZE_EXCEEDED:
	case CURLE_BAD_FUNCTION_ARGUMENT:
	case CURLE_UNKNOWN_OPTION: return 1;
	default: return 0;
	}
}

/* Every connection curl opens (to the host of each redirect too, to every
 * address a name resolved to) passes here: one CAIRN_HTTP_ALLOW does not
 * open is refused before it is made, whatever DNS said earlier. */
static curl_socket_t open_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *a)
{
	http_resp *resp = arg;
	char rule[NETPOLICY_WHY_MAX];
	const char *why = resp->check && purpose == CURLSOCKTYPE_IPCXN
	                      ? netpolicy_refuses(resp->env->allow, &a->addr, rule, sizeof rule)
	                      : NULL;
	if (!why)
		return socket(a->family, a->socktype, a->protocol);
	char ip[INET6_ADDRSTRLEN] = "?";
	const void *raw = a->family == AF_INET6
	                      ? (const void *)&((const struct sockaddr_in6 *)&a->addr)->sin6_addr
	                      : (const void *)&((const struct sockaddr_in *)&a->addr)->sin_addr;
	inet_ntop(a->family, raw, ip, sizeof ip);
	snprintf(resp->refused, sizeof resp->refused, "%s is %s", ip, why);
	return CURL_SOCKET_BAD;
}

/* The host of url as curl sees it (no brackets around IPv6), or NULL;
 * curl_free() it. */
static char *url_host(const char *url)
{
	CURLU *h = curl_url();
	char *host = NULL;
	if (h && curl_url_set(h, CURLUPART_URL, url, 0) == CURLUE_OK)
		curl_url_get(h, CURLUPART_HOST, &host, 0);
	curl_url_cleanup(h);
	if (host && host[0] == '[') {
		size_t n = strlen(host);
		memmove(host, host + 1, n - 1);
		host[n - 2] = '\0';
	}
	return host;
}

/* Whether resp must check the addresses of a request to host: not when the
 * allow list names it; through a proxy, which connects for us, only the
 * host itself when it is an address or localhost (the refusal, if any, in
 * resp->refused). */
static int must_check(http_resp *resp, const char *host)
{
	const http_env *env = resp->env;
	if (netpolicy_allows_host(env->allow, host))
		return 0;
	if (!env->proxy[0])
		return 1;
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
	const char *why = NULL;
	char rule[NETPOLICY_WHY_MAX];
	if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
		ss.ss_family = AF_INET;
		why = netpolicy_refuses(env->allow, (struct sockaddr *)&ss, rule, sizeof rule);
	} else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
		ss.ss_family = AF_INET6;
		why = netpolicy_refuses(env->allow, (struct sockaddr *)&ss, rule, sizeof rule);
	} else {
		size_t n = strlen(host);
		if (strcasecmp(host, "localhost") == 0 ||
		    (n > 10 && strcasecmp(host + n - 10, ".localhost") == 0))
			why = "a loopback address";
	}
	if (why)
		snprintf(resp->refused, sizeof resp->refused, "%.100s is %s", host, why);
	return 0;
}

static int http_setopts(CURL *e, const http_req *r, http_resp *resp, char *errbuf)
{
	int bad = 0;
#define SET(opt, val) bad |= curl_easy_setopt(e, opt, val) != CURLE_OK
	SET(CURLOPT_URL, r->url);
	SET(CURLOPT_PROTOCOLS_STR, "http,https");
	/* Redirects are followed by http_step, one request at a time. */
	SET(CURLOPT_FOLLOWLOCATION, 0L);
	SET(CURLOPT_PROXY, r->env->proxy);
	SET(CURLOPT_OPENSOCKETFUNCTION, open_socket);
	SET(CURLOPT_OPENSOCKETDATA, resp);
	SET(CURLOPT_NOSIGNAL, 1L);
	SET(CURLOPT_TIMEOUT_MS, (long)r->timeout_ms);
	SET(CURLOPT_CONNECTTIMEOUT_MS, (long)(r->timeout_ms < 10000 ? r->timeout_ms : 10000));
	SET(CURLOPT_ERRORBUFFER, errbuf);
	SET(CURLOPT_USERAGENT, "cairn/" CAIRN_VERSION);
	SET(CURLOPT_HTTPHEADER, r->headers);
	SET(CURLOPT_WRITEFUNCTION, on_body);
	SET(CURLOPT_WRITEDATA, resp);
	SET(CURLOPT_HEADERFUNCTION, on_header);
	SET(CURLOPT_HEADERDATA, resp);
	SET(CURLOPT_NOPROGRESS, 0L);
	SET(CURLOPT_XFERINFOFUNCTION, on_progress);
	SET(CURLOPT_XFERINFODATA, resp);
	if (strcmp(r->method, "HEAD") == 0) {
		SET(CURLOPT_NOBODY, 1L);
	} else if (strcmp(r->method, "GET") != 0 || r->body) {
		if (strcmp(r->method, "POST") != 0)
			SET(CURLOPT_CUSTOMREQUEST, r->method);
		if (r->body || strcmp(r->method, "DELETE") != 0) {
			SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
			SET(CURLOPT_POSTFIELDS, r->body ? r->body : "");
		}
	}
#undef SET
	return bad ? -1 : 0;
}

/* The request of the next hop after a redirect to location (with status),
 * into hop; 0, or -1 when location is no http:// or https:// URL or too
 * long. A 303, and a 301 or 302 after a POST, become a GET without a body
 * (a HEAD stays a HEAD), as browsers do. (Once a hop leaves the first
 * host, http_step leaves the request's own headers behind.) */
static int next_hop(http_req *hop, const char *location, long status)
{
	if ((strncasecmp(location, "http://", 7) != 0 &&
	     strncasecmp(location, "https://", 8) != 0) ||
	    strlen(location) > HTTP_URL_MAX)
		return -1;
	snprintf(hop->url, sizeof hop->url, "%s", location);
	if (strcmp(hop->method, "HEAD") != 0 &&
	    (status == 303 ||
	     ((status == 301 || status == 302) && strcmp(hop->method, "POST") == 0))) {
		snprintf(hop->method, sizeof hop->method, "GET");
		hop->body = NULL;
		hop->body_len = 0;
	}
	return 0;
}

/* The request's headers h with this step attempt's traceparent (W3C
 * trace context, cairn_ctx_traceparent) unless h sets one; NULL when out
 * of memory. */
static struct curl_slist *traced_headers(cairn_ctx *ctx, const struct curl_slist *h)
{
	struct curl_slist *out = NULL, *l;
	int own = 0;
	for (; h; h = h->next) {
		own |= strncasecmp(h->data, "traceparent", 11) == 0 &&
		       (h->data[11] == ':' || h->data[11] == ';');
		if (!(l = curl_slist_append(out, h->data)))
			goto oom;
		out = l;
	}
	char tp[80];
	snprintf(tp, sizeof tp, "traceparent: %s", cairn_ctx_traceparent(ctx));
	if (!own && !(l = curl_slist_append(out, tp)))
		goto oom;
	return own ? out : l;
oom:
	curl_slist_free_all(out);
	return NULL;
}

static int http_step(cairn_ctx *ctx, void *arg, cJSON **result)
{
	const http_req *r = arg;
	http_resp resp = {.ctx = ctx, .env = r->env, .body = BUF_INIT};
	char errbuf[CURL_ERROR_SIZE] = "";
	CURL *e = curl_easy_init();
	/* The request's own headers go to its host; to another host (a
	 * redirect) only the trace context goes. */
	struct curl_slist *mine = traced_headers(ctx, r->headers);
	struct curl_slist *bare = traced_headers(ctx, &(struct curl_slist){.data = "Expect:"});
	char *host0 = url_host(r->url);
	http_req *hop = malloc(sizeof *hop);
	int rc;
	if (!e || !bare || !mine || !hop) {
		rc = cairn_retryable(
		    ctx, "http: cannot set up the request to %.200s (out of memory?)", r->url);
		goto out;
	}
	if (!host0) {
		rc = cairn_fail(ctx, "http: %.200s: no host in the URL", r->url);
		goto out;
	}
	*hop = *r;
	hop->headers = mine;
	CURLcode c = CURLE_OK;
	long status = 0;
	for (int hops = 0;; hops++) {
		char *host = url_host(hop->url);
		if (!host || strcasecmp(host, host0) != 0)
			hop->headers = bare; /* and for every hop after it */
		resp.refused[0] = '\0';
		resp.check = host ? must_check(&resp, host) : 1;
		curl_free(host);
		if (resp.refused[0])
			break;
		buf_reset(&resp.body);
		resp.body_too_big = resp.headers_too_big = 0;
		resp.header_bytes = 0;
		cJSON_Delete(resp.headers);
		errbuf[0] = '\0';
		if (!(resp.headers = cJSON_CreateObject()) ||
		    (curl_easy_reset(e), http_setopts(e, hop, &resp, errbuf))) {
			rc = cairn_retryable(ctx, "http: cannot set up the request to %.200s",
			                     hop->url);
			goto out;
		}
		c = curl_easy_perform(e);
		status = 0;
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
		char *location = NULL;
		if (c != CURLE_OK ||
		    (status != 301 && status != 302 && status != 303 && status != 307 &&
		     status != 308) ||
		    curl_easy_getinfo(e, CURLINFO_REDIRECT_URL, &location) != CURLE_OK || !location)
			break;
		if (hops == HTTP_REDIRECTS_MAX) {
			rc = cairn_fail(ctx, "http: %s %.200s: more than %d redirects", r->method,
			                r->url, HTTP_REDIRECTS_MAX);
			goto out;
		}
		if (next_hop(hop, location, status) < 0) {
			rc =
			    cairn_fail(ctx,
			               "http: %s %.200s: redirected to %.200s, which is no http:// "
			               "or https:// URL",
			               hop->method, hop->url, location);
			goto out;
		}
	}
	const char *why = *errbuf ? errbuf : curl_easy_strerror(c);
	if (resp.refused[0]) {
		rc = cairn_fail(
		    ctx,
		    "http: %s %.200s: refused to connect: %s; CAIRN_HTTP_ALLOW lists the "
		    "addresses, CIDRs and host names the http workflow may reach",
		    hop->method, hop->url, resp.refused);
	} else if (resp.body_too_big) {
		rc = cairn_fail(ctx, "http: %s %.200s: the response body is larger than %d bytes",
		                hop->method, hop->url, HTTP_BODY_MAX);
	} else if (resp.headers_too_big) {
		rc = cairn_fail(ctx,
		                "http: %s %.200s: the response headers are larger than %d bytes",
		                hop->method, hop->url, HTTP_RESP_HEADERS_MAX);
	} else if (c == CURLE_ABORTED_BY_CALLBACK) {
		rc = cairn_retryable(ctx, "http: %s %.200s: interrupted, the run is stopping",
		                     hop->method, hop->url);
	} else if (c != CURLE_OK) {
		rc = (curl_permanent(c) ? cairn_fail : cairn_retryable)(ctx, "http: %s %.200s: %s",
		                                                        hop->method, hop->url, why);
	} else if (status >= 500) {
		rc = cairn_retryable(ctx, "http: %s %.200s: the server answered %ld", hop->method,
		                     hop->url, status);
	} else {
		cJSON *o = cJSON_CreateObject();
		if (!o) {
			rc = cairn_retryable(ctx, "http: out of memory");
			goto out;
		}
		cJSON_AddNumberToObject(o, "status", (double)status);
		cJSON_AddItemToObject(o, "headers", resp.headers);
		resp.headers = NULL;
		const unsigned char *b = (const unsigned char *)buf_str(&resp.body);
		if (utf8_text(b, resp.body.len)) {
			cJSON_AddStringToObject(o, "body", (const char *)b);
		} else {
			/* Binary: jsonb cannot hold it as a string. */
			buf b64 = BUF_INIT;
			base64(&b64, b, resp.body.len);
			cJSON_AddStringToObject(o, "body_base64", buf_str(&b64));
			buf_free(&b64);
		}
		*result = o;
		rc = CAIRN_OK;
	}
out:
	curl_easy_cleanup(e);
	curl_slist_free_all(bare);
	curl_slist_free_all(mine);
	curl_free(host0);
	free(hop);
	cJSON_Delete(resp.headers);
	buf_free(&resp.body);
	return rc;
}

static int wf_http(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	http_req *r = calloc(1, sizeof *r);
	if (!r)
		return cairn_fail(ctx, "http: out of memory");
	cairn_retry_policy policy = {.initial_ms = 1000, .multiplier = 2.0, .max_ms = 30000};
	r->env = cairn_workflow_arg(ctx);
	int rc = http_parse(ctx, input, r, &policy);
	if (rc == CAIRN_OK) {
		cJSON *res;
		rc = cairn_step_retry(ctx, "request", &policy, http_step, r, &res);
		if (rc == CAIRN_OK)
			*output = cJSON_Duplicate(res, 1);
	}
	http_req_free(r);
	free(r);
	return rc;
}

/* --------------------------------------------------------------- order */

typedef struct order_in {
	const char *item;
	double amount;
} order_in;

static int order_charge(cairn_ctx *ctx, void *arg, cJSON **result)
{
	const order_in *o = arg;
	char id[64];
	snprintf(id, sizeof id, "ch_%" PRId64, cairn_ctx_run_id(ctx));
	/* A real workflow calls the payment provider here, with id as the
	 * idempotency key so a re-run of this step cannot charge twice. */
	cJSON *r = cJSON_CreateObject();
	if (!r || !cJSON_AddStringToObject(r, "charge_id", id) ||
	    !cJSON_AddNumberToObject(r, "amount", o->amount)) {
		cJSON_Delete(r);
		return cairn_retryable(ctx, "charge: out of memory");
	}
	*result = r;
	return CAIRN_OK;
}

static int order_ship(cairn_ctx *ctx, void *arg, cJSON **result)
{
	char id[64];
	snprintf(id, sizeof id, "trk_%" PRId64, cairn_ctx_run_id(ctx));
	cJSON *r = cJSON_CreateObject();
	if (!r || !cJSON_AddStringToObject(r, "tracking", id)) {
		cJSON_Delete(r);
		return cairn_retryable(ctx, "ship: out of memory");
	}
	*result = r;
	return CAIRN_OK;
}

/* A string field of a journaled result, or NULL. */
static const char *result_string(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Reads the approval signal: true, false, or {"approved": bool, "by": "..."}. */
static int order_approval(cairn_ctx *ctx, const cJSON *p, int *approved, const char **by)
{
	char t[128];
	static const char accepted[] =
	    "true, false or {\"approved\": true|false, \"by\": \"name\"}";
	*by = NULL;
	if (cJSON_IsBool(p)) {
		*approved = cJSON_IsTrue(p);
		return CAIRN_OK;
	}
	if (!is_object(p))
		return cairn_fail(ctx, "order: the approval signal must be %s, got %s", accepted,
		                  json_text(p, t, sizeof t));
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(p, "approved");
	if (!cJSON_IsBool(a))
		return cairn_fail(ctx,
		                  "order: \"approved\" of the approval signal must be true or "
		                  "false, got %s",
		                  json_text(a, t, sizeof t));
	*approved = cJSON_IsTrue(a);
	const cJSON *b = cJSON_GetObjectItemCaseSensitive(p, "by");
	if (b && !cJSON_IsNull(b)) {
		if (!cJSON_IsString(b) || strlen(b->valuestring) > ORDER_ITEM_MAX)
			return cairn_fail(
			    ctx,
			    "order: \"by\" of the approval signal must be a string of "
			    "at most %d bytes, got %s",
			    ORDER_ITEM_MAX, json_text(b, t, sizeof t));
		*by = b->valuestring;
	}
	return CAIRN_OK;
}

static int wf_order(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	char t[128];
	if (!is_object(input))
		return cairn_fail(ctx,
		                  "order: input must be an object like {\"item\": \"book\", "
		                  "\"amount\": 12}, got %s",
		                  json_text(input, t, sizeof t));
	const cJSON *item = cJSON_GetObjectItemCaseSensitive(input, "item");
	if (!cJSON_IsString(item) || !*item->valuestring ||
	    strlen(item->valuestring) > ORDER_ITEM_MAX)
		return cairn_fail(ctx,
		                  "order: \"item\" must be a non-empty string of at most %d bytes, "
		                  "got %s",
		                  ORDER_ITEM_MAX, json_text(item, t, sizeof t));
	const cJSON *amount = cJSON_GetObjectItemCaseSensitive(input, "amount");
	if (!cJSON_IsNumber(amount) || !isfinite(amount->valuedouble) || amount->valuedouble <= 0)
		return cairn_fail(ctx, "order: \"amount\" must be a number greater than 0, got %s",
		                  json_text(amount, t, sizeof t));
	order_in o = {item->valuestring, amount->valuedouble};

	cJSON *charge, *approval, *ship;
	CAIRN_TRY(cairn_step(ctx, "charge", order_charge, &o, &charge));
	int rc = cairn_await_signal(ctx, "approval", ORDER_APPROVAL_TIMEOUT_MS, &approval);
	if (rc == CAIRN_ETIMEOUT)
		return cairn_fail(ctx, "order: no approval within 1h");
	CAIRN_TRY(rc);
	int approved = 0;
	const char *by = NULL;
	CAIRN_TRY(order_approval(ctx, approval, &approved, &by));
	if (!approved)
		return by ? cairn_fail(ctx, "order rejected by %s", by)
		          : cairn_fail(ctx, "order rejected");
	CAIRN_TRY(cairn_sleep(ctx, "pack", 1000));
	CAIRN_TRY(cairn_step(ctx, "ship", order_ship, NULL, &ship));

	const char *charge_id = result_string(charge, "charge_id");
	const char *tracking = result_string(ship, "tracking");
	if (!charge_id || !tracking)
		return cairn_fail(ctx, "order: the journal of this run has no %s",
		                  charge_id ? "tracking number" : "charge id");
	cJSON *out = cJSON_CreateObject();
	if (!out)
		return cairn_retryable(ctx, "order: out of memory");
	cJSON_AddStringToObject(out, "item", o.item);
	cJSON_AddNumberToObject(out, "amount", o.amount);
	cJSON_AddStringToObject(out, "charge_id", charge_id);
	cJSON_AddStringToObject(out, "tracking", tracking);
	if (by)
		cJSON_AddStringToObject(out, "approved_by", by);
	else
		cJSON_AddNullToObject(out, "approved_by");
	*output = out;
	return CAIRN_OK;
}

/* ------------------------------------------------------- fanout, square */

#define FANOUT_MAX 100000

/* {"x": N}: its square, computed in a step; a negative x fails the run. */
static int square_fn(cairn_ctx *ctx, void *arg, cJSON **result)
{
	double x = *(const double *)arg;
	*result = cJSON_CreateObject();
	if (!*result || !cJSON_AddNumberToObject(*result, "y", x * x))
		return cairn_retryable(ctx, "square: out of memory");
	return CAIRN_OK;
}

static int wf_square(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	char t[128];
	const cJSON *x = is_object(input) ? cJSON_GetObjectItemCaseSensitive(input, "x") : NULL;
	if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble))
		return cairn_fail(ctx, "square: input must be an object like {\"x\": 3}, got %s",
		                  json_text(input, t, sizeof t));
	if (x->valuedouble < 0)
		return cairn_fail(ctx, "square: x is %g; only x >= 0 is squared here",
		                  x->valuedouble);
	double v = x->valuedouble;
	cJSON *r;
	CAIRN_TRY(cairn_step(ctx, "square", square_fn, &v, &r));
	*output = cJSON_Duplicate(r, 1);
	return *output ? CAIRN_OK : cairn_retryable(ctx, "square: out of memory");
}

/* The sum of the squares the children of results returned. */
static double sum_of(const cairn_child_result *results, int64_t n)
{
	double sum = 0;
	for (int64_t i = 0; i < n; i++) {
		const cJSON *y = cJSON_GetObjectItemCaseSensitive(results[i].output, "y");
		sum += cJSON_IsNumber(y) ? y->valuedouble : 0;
	}
	return sum;
}

/* Publishes "progress": {"done": done, "of": n}. */
static int progress(cairn_ctx *ctx, int64_t done, int64_t n)
{
	cJSON *p = cJSON_CreateObject();
	if (!p || !cJSON_AddNumberToObject(p, "done", (double)done) ||
	    !cJSON_AddNumberToObject(p, "of", (double)n)) {
		cJSON_Delete(p);
		return cairn_retryable(ctx, "fanout: out of memory");
	}
	int rc = cairn_set_event(ctx, "progress", p);
	cJSON_Delete(p);
	return rc;
}

/* {"n": N}: N child runs of square (x = 0 .. N-1) and the sum of their
 * squares. It waits for the first half of them, publishes "progress", then
 * waits for all: woken twice, however many children. A failed child fails
 * the fan-out, naming it. */
static int wf_fanout(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	char t[128];
	const cJSON *nv = is_object(input) ? cJSON_GetObjectItemCaseSensitive(input, "n") : NULL;
	int64_t n;
	if (get_int(nv, 1, FANOUT_MAX, &n))
		return cairn_fail(ctx, "fanout: \"n\" must be an integer from 1 to %d, got %s",
		                  FANOUT_MAX, json_text(nv, t, sizeof t));
	const cJSON *neg = cJSON_GetObjectItemCaseSensitive(input, "negative");
	int64_t *ids = calloc((size_t)n, sizeof *ids);
	cairn_child_result *results = calloc((size_t)n, sizeof *results);
	cJSON *in = cJSON_CreateObject(), *x = in ? cJSON_AddNumberToObject(in, "x", 0) : NULL;
	int rc = ids && results && x ? CAIRN_OK : cairn_retryable(ctx, "fanout: out of memory");
	for (int64_t i = 0; i < n && rc == CAIRN_OK; i++) {
		/* {"negative": K} makes child K fail, to show a failed child. */
		cJSON_SetNumberValue(
		    x, cJSON_IsNumber(neg) && neg->valuedouble == (double)i ? -1.0 : (double)i);
		rc = cairn_child_start(ctx, "child", "square", in, &ids[i]);
	}
	cJSON_Delete(in);
	int half = (int)(n + 1) / 2, done = 0;
	if (rc == CAIRN_OK)
		rc = cairn_child_wait_first(ctx, ids, (int)n, half, -1, results);
	for (int64_t i = 0; rc == CAIRN_OK && i < n; i++)
		done += results[i].done;
	if (rc == CAIRN_OK && done < n)
		rc = progress(ctx, done, n);
	if (rc == CAIRN_OK)
		rc = cairn_child_wait_all(ctx, ids, (int)n, -1, results);
	if (rc == CAIRN_OK)
		rc = progress(ctx, n, n);
	double sum = rc == CAIRN_OK ? sum_of(results, n) : 0;
	free(ids);
	free(results);
	if (rc)
		return rc;
	*output = cJSON_CreateObject();
	if (!*output || !cJSON_AddNumberToObject(*output, "sum", sum) ||
	    !cJSON_AddNumberToObject(*output, "children", (double)n))
		return cairn_retryable(ctx, "fanout: out of memory");
	return CAIRN_OK;
}

/* ------------------------------------------------- payment, checkout */

/* {"amount": N}: a payment of its own, in a step (the charge). */
static int wf_payment(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	char t[128];
	const cJSON *amount =
	    is_object(input) ? cJSON_GetObjectItemCaseSensitive(input, "amount") : NULL;
	if (!cJSON_IsNumber(amount) || !isfinite(amount->valuedouble) || amount->valuedouble <= 0)
		return cairn_fail(ctx,
		                  "payment: \"amount\" must be a number greater than 0, got %s",
		                  json_text(amount, t, sizeof t));
	order_in o = {"payment", amount->valuedouble};
	cJSON *charge;
	CAIRN_TRY(cairn_step(ctx, "charge", order_charge, &o, &charge));
	*output = cJSON_Duplicate(charge, 1);
	return *output ? CAIRN_OK : cairn_retryable(ctx, "payment: out of memory");
}

/* The order demo with its payment as a child run: start the payment, wait
 * for the approval signal, then for the payment, then ship. Cancelling the
 * checkout cancels a payment still running. */
static int wf_checkout(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	char t[128];
	const cJSON *item =
	    is_object(input) ? cJSON_GetObjectItemCaseSensitive(input, "item") : NULL;
	const cJSON *amount =
	    is_object(input) ? cJSON_GetObjectItemCaseSensitive(input, "amount") : NULL;
	if (!cJSON_IsString(item) || !*item->valuestring ||
	    strlen(item->valuestring) > ORDER_ITEM_MAX)
		return cairn_fail(ctx,
		                  "checkout: input must be an object like {\"item\": \"book\", "
		                  "\"amount\": 12}, got %s",
		                  json_text(input, t, sizeof t));
	cJSON *pin = cJSON_CreateObject(), *approval, *paid, *ship;
	cJSON_AddItemToObject(pin, "amount", cJSON_Duplicate(amount, 1));
	int64_t payment;
	int rc = cairn_child_start(ctx, "payment", "payment", pin, &payment);
	cJSON_Delete(pin);
	CAIRN_TRY(rc);
	rc = cairn_await_signal(ctx, "approval", ORDER_APPROVAL_TIMEOUT_MS, &approval);
	if (rc == CAIRN_ETIMEOUT)
		return cairn_fail(ctx, "checkout: no approval within 1h");
	CAIRN_TRY(rc);
	int approved = 0;
	const char *by = NULL;
	CAIRN_TRY(order_approval(ctx, approval, &approved, &by));
	if (!approved)
		return cairn_fail(ctx, "checkout rejected%s%s", by ? " by " : "", by ? by : "");
	CAIRN_TRY(cairn_child_wait(ctx, payment, -1, &paid));
	CAIRN_TRY(cairn_step(ctx, "ship", order_ship, NULL, &ship));
	const char *charge_id = result_string(paid, "charge_id");
	const char *tracking = result_string(ship, "tracking");
	cJSON *out = cJSON_CreateObject();
	if (!out)
		return cairn_retryable(ctx, "checkout: out of memory");
	cJSON_AddStringToObject(out, "item", item->valuestring);
	cJSON_AddNumberToObject(out, "payment_run", (double)payment);
	if (charge_id)
		cJSON_AddStringToObject(out, "charge_id", charge_id);
	if (tracking)
		cJSON_AddStringToObject(out, "tracking", tracking);
	*output = out;
	return CAIRN_OK;
}

/* ---------------------------------------------------------------- report */

/* Counts the runs of the last day by status, in a transactional step. */
static int report_count(cairn_ctx *ctx, PGconn *c, void *arg, cJSON **result)
{
	PGresult *r = PQexec(c, "SELECT status, count(*) FROM cairn.runs "
	                        "WHERE created_at > now() - interval '1 day' GROUP BY status "
	                        "ORDER BY status");
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		int rc = cairn_retryable(ctx, "report: %s", PQresultErrorMessage(r));
		PQclear(r);
		return rc;
	}
	*result = cJSON_CreateObject();
	for (int i = 0; *result && i < PQntuples(r); i++)
		cJSON_AddNumberToObject(*result, PQgetvalue(r, i, 0), atof(PQgetvalue(r, i, 1)));
	PQclear(r);
	return *result ? CAIRN_OK : cairn_retryable(ctx, "report: out of memory");
}

/* The runs of the last day by status: {"completed": N, ...}, also
 * published as the event "report". For a schedule (`cairn schedule create
 * daily --cron @daily --workflow report`). */
static int wf_report(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	cJSON *counts;
	CAIRN_TRY(cairn_tx_step(ctx, "count", report_count, NULL, &counts));
	CAIRN_TRY(cairn_set_event(ctx, "report", counts));
	*output = cJSON_Duplicate(counts, 1);
	return *output ? CAIRN_OK : cairn_retryable(ctx, "report: out of memory");
}

/* ---------------------------------------------------------- registration */

int builtins_register(cairn_worker *w)
{
	static const struct {
		const char *name;
		cairn_workflow_fn fn;
	} flows[] = {{"noop", wf_noop},       {"sleep", wf_sleep},       {"http", wf_http},
	             {"order", wf_order},     {"fanout", wf_fanout},     {"square", wf_square},
	             {"payment", wf_payment}, {"checkout", wf_checkout}, {"report", wf_report}};
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return CAIRN_ENOMEM;
	/* The worker validated both settings as it loaded them. */
	char err[512];
	if (!http_settings && (http_settings = calloc(1, sizeof *http_settings)) &&
	    (netpolicy_parse(cairn_worker_setting(w, "CAIRN_HTTP_ALLOW"), &http_settings->allow,
	                     err, sizeof err) < 0 ||
	     !(http_settings->proxy = strdup(cairn_worker_setting(w, "CAIRN_HTTP_PROXY"))))) {
		builtins_shutdown();
		return CAIRN_ENOMEM;
	}
	if (!http_settings)
		return CAIRN_ENOMEM;
	for (size_t i = 0; i < sizeof flows / sizeof flows[0]; i++) {
		cairn_workflow_opts o = {.arg = flows[i].fn == wf_http ? http_settings : NULL};
		int rc = cairn_workflow_register(w, flows[i].name, flows[i].fn, &o);
		if (rc)
			return rc;
	}
	return CAIRN_OK;
}

void builtins_shutdown(void)
{
	if (http_settings) {
		netpolicy_free(http_settings->allow);
		free(http_settings->proxy);
		free(http_settings);
		http_settings = NULL;
	}
	curl_global_cleanup();
}
