/*
 * sdk.c - cairn-worker as the engine of a language SDK process (see sdk.h
 * and docs/protocol.md, the contract this file implements). Each execution
 * of an SDK workflow takes a lane, tells the SDK to call the function, and
 * then answers its durable calls one at a time by making the same call of
 * the C API on the execution's cairn_ctx: what is journaled, what runs, what
 * suspends is decided here exactly as for a C workflow. A lane is a
 * connected socket that carries one execution at a time, so the executor
 * thread reads and writes it directly: no thread hands a message to another.
 *
 * Owns: the lanes (their descriptors and read buffers), the hello, and the
 * control lane's watcher thread. The SDK process going away (end of file on
 * any lane) ends this process at once, writing nothing for the runs in
 * flight: for them it is a crash, counted by the poison guard.
 */
#include "sdk.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

enum {
	PROTOCOL = 3,         /* the newest version this engine speaks (all up to it) */
	HELLO_WAIT_S = 30,    /* how long the SDK has to say hello */
	LINE_SLACK = 64 << 10 /* a line may exceed max_payload by this much */
};

/* A step's retry policy and a duration fit a double exactly up to this. */
#define MAX_MS 9007199254740991.0

typedef struct lane {
	int fd;
	char *buf; /* bytes read and not yet returned as a line */
	size_t len, cap;
	struct lane *next_free;
} lane;

struct sdk {
	lane ctl;
	lane *lanes; /* [n] */
	int n;
	pthread_mutex_t mu;
	pthread_cond_t freed;
	lane *free;
	_Atomic int64_t next_x;
	size_t max_line;
	cJSON *hello;
	char runtime[64];
	int protocol; /* the version spoken: the newest both speak */
};

/* ------------------------------------------------------------- the lanes */

/* The SDK process closed a lane or wrote what is not the protocol: this
 * process cannot serve its runs any more. Nothing is written for the runs
 * in flight (their journals hold what was committed), as for a crash. */
static _Noreturn void gone(const char *why)
{
	fprintf(stderr,
	        "cairn-worker: the SDK process is gone (%s); exiting without writing the runs "
	        "in flight\n",
	        why);
	_exit(1);
}

/* The next line of l (without its '\n', NUL-terminated, the caller's to
 * free): 1, or 0 at end of file, -1 on a read error (errno) or a line
 * longer than max (errno EMSGSIZE). */
static int lane_line(lane *l, size_t max, char **line)
{
	size_t scanned = 0;
	for (;;) {
		char *nl =
		    l->len > scanned ? memchr(l->buf + scanned, '\n', l->len - scanned) : NULL;
		if (nl) {
			size_t n = (size_t)(nl - l->buf);
			if (!(*line = malloc(n + 1)))
				return errno = ENOMEM, -1;
			memcpy(*line, l->buf, n);
			(*line)[n] = '\0';
			l->len -= n + 1;
			memmove(l->buf, nl + 1, l->len);
			return 1;
		}
		scanned = l->len;
		if (l->len > max)
			return errno = EMSGSIZE, -1;
		if (l->cap - l->len < 4096) {
			size_t cap = l->cap ? l->cap * 2 : 65536;
			char *b = realloc(l->buf, cap);
			if (!b)
				return errno = ENOMEM, -1;
			l->buf = b;
			l->cap = cap;
		}
		ssize_t r = read(l->fd, l->buf + l->len, l->cap - l->len);
		if (r == 0)
			return 0;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		l->len += (size_t)r;
	}
}

/* Sends m as one line; 0, or -1 with errno. */
static int lane_send(lane *l, const cJSON *m)
{
	char *text = cJSON_PrintUnformatted(m);
	if (!text)
		return errno = ENOMEM, -1;
	size_t len = strlen(text);
	text[len] = '\n'; /* replaces the NUL: sent by length */
	size_t off = 0;
	int rc = 0;
	while (off <= len) {
		ssize_t w = send(l->fd, text + off, len + 1 - off, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			rc = -1;
			break;
		}
		off += (size_t)w;
	}
	free(text);
	return rc;
}

static void send_or_exit(lane *l, const cJSON *m)
{
	if (lane_send(l, m) < 0) {
		char why[128];
		snprintf(why, sizeof why, "writing a lane: %s", strerror(errno));
		gone(why);
	}
}

static lane *lane_take(sdk *s)
{
	pthread_mutex_lock(&s->mu);
	while (!s->free)
		pthread_cond_wait(&s->freed, &s->mu);
	lane *l = s->free;
	s->free = l->next_free;
	pthread_mutex_unlock(&s->mu);
	return l;
}

static void lane_give(sdk *s, lane *l)
{
	pthread_mutex_lock(&s->mu);
	l->next_free = s->free;
	s->free = l;
	pthread_cond_signal(&s->freed);
	pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------------------ an execution */

typedef struct exec {
	sdk *s;
	lane *l;
	cairn_ctx *ctx;
	int64_t x;
	int refused; /* a step result the SDK did not wait for was refused: this
	                rc ends the execution at the SDK's next message */
} exec;

/* The SDK's next message about this execution; messages about an earlier
 * one (sent after it was stopped) are dropped. */
static cJSON *next_msg(exec *e)
{
	for (;;) {
		char *line;
		int rc = lane_line(e->l, e->s->max_line, &line);
		if (rc <= 0)
			gone(rc == 0             ? "end of file on an execution lane"
			     : errno == EMSGSIZE ? "a line longer than max_payload + 64 KiB"
			                         : strerror(errno));
		cJSON *m = cJSON_Parse(line);
		free(line);
		const cJSON *x = cJSON_GetObjectItemCaseSensitive(m, "x");
		const cJSON *op = cJSON_GetObjectItemCaseSensitive(m, "op");
		if (!cJSON_IsObject(m) || !cJSON_IsNumber(x) || !cJSON_IsString(op))
			gone("a line that is not a JSON object with \"x\" and \"op\"");
		if ((int64_t)x->valuedouble == e->x)
			return m;
		cJSON_Delete(m);
	}
}

static void send_simple(exec *e, const char *t, const char *k1, const char *v1, const char *k2,
                        const char *v2)
{
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "t", t);
	if (k1)
		cJSON_AddStringToObject(m, k1, v1);
	if (k2)
		cJSON_AddStringToObject(m, k2, v2);
	send_or_exit(e->l, m);
	cJSON_Delete(m);
}

/* {"t":"ok","value":v}; v is the caller's (NULL: null). */
static void send_ok(exec *e, const cJSON *v)
{
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "t", "ok");
	if (v)
		cJSON_AddItemReferenceToObject(m, "value", (cJSON *)v);
	else
		cJSON_AddNullToObject(m, "value");
	send_or_exit(e->l, m);
	cJSON_Delete(m);
}

static const char *stop_reason(int rc)
{
	switch (rc) {
	case CAIRN_SUSPENDED: return "suspended";
	case CAIRN_CANCELLED: return "cancelled";
	case CAIRN_ESTOP: return "stop";
	case CAIRN_ENONDET: return "nondeterminism";
	default: return "failed";
	}
}

static const char *errmsg(const exec *e, int rc)
{
	const char *m = cairn_ctx_error(e->ctx);
	return *m ? m : cairn_strstatus(rc);
}

/* Answers a durable call that returned rc (value: its result, the
 * caller's). 0 when the execution goes on, else the rc it ends with. */
static int answer(exec *e, int rc, const cJSON *value)
{
	switch (rc) {
	case CAIRN_OK: send_ok(e, value); return 0;
	case CAIRN_ETIMEOUT: send_simple(e, "timeout", NULL, NULL, NULL, NULL); return 0;
	case CAIRN_EFAIL:
	case CAIRN_EINVAL:
		send_simple(e, "error", "code", rc == CAIRN_EFAIL ? "failed" : "invalid", "message",
		            errmsg(e, rc));
		return 0;
	default:
		send_simple(e, "stop", "reason", stop_reason(rc), "message", errmsg(e, rc));
		return rc;
	}
}

/* A request that names a field wrongly: answered error invalid. */
static int invalid(exec *e, const char *op, const char *field, const char *want)
{
	char msg[256];
	snprintf(msg, sizeof msg, "%s: field \"%s\" must be %s", op, field, want);
	send_simple(e, "error", "code", "invalid", "message", msg);
	return 0;
}

static const char *str_field(const cJSON *m, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, k);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A whole number of milliseconds (or an id) in [0, 2^53]: 0, or -1. A
 * field that is absent or null gives none (-1) when optional. */
static int ms_field(const cJSON *m, const char *k, int optional, int64_t *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, k);
	if (optional && (!v || cJSON_IsNull(v))) {
		*out = -1;
		return 0;
	}
	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0 ||
	    v->valuedouble > MAX_MS || v->valuedouble != floor(v->valuedouble))
		return -1;
	*out = (int64_t)v->valuedouble;
	return 0;
}

/* A retry policy from JSON (absent fields: 0, the C defaults). 0, or -1
 * with the offending field in *bad. */
static int policy_from(const cJSON *o, cairn_retry_policy *p, const char **bad)
{
	memset(p, 0, sizeof *p);
	if (!o || cJSON_IsNull(o))
		return 0;
	if (!cJSON_IsObject(o))
		return *bad = "retry", -1;
	static const char *const ints[] = {"max_attempts", "initial_ms", "max_ms", "timeout_ms"};
	int64_t v[4];
	for (int i = 0; i < 4; i++)
		if (ms_field(o, ints[i], 1, &v[i]) < 0 || (i == 0 && v[i] > 1000000))
			return *bad = ints[i], -1;
	p->max_attempts = v[0] < 0 ? 0 : (int)v[0];
	p->initial_ms = v[1] < 0 ? 0 : v[1];
	p->max_ms = v[2] < 0 ? 0 : v[2];
	p->timeout_ms = v[3] < 0 ? 0 : v[3];
	const cJSON *mul = cJSON_GetObjectItemCaseSensitive(o, "multiplier");
	const cJSON *jit = cJSON_GetObjectItemCaseSensitive(o, "jitter");
	if (mul && !(cJSON_IsNumber(mul) && isfinite(mul->valuedouble) && mul->valuedouble >= 0))
		return *bad = "multiplier", -1;
	if (jit && !(cJSON_IsNumber(jit) && isfinite(jit->valuedouble) && jit->valuedouble <= 1))
		return *bad = "jitter", -1;
	p->multiplier = mul ? mul->valuedouble : 0;
	p->jitter = jit ? jit->valuedouble : 0;
	return 0;
}

/* -------------------------------------------------------------- steps */

typedef struct step_call {
	exec *e;
	int await;     /* the SDK waits for the verdict on the result it sends */
	int delivered; /* the SDK sent a result and, without await, waits for nothing */
} step_call;

/* The step function of every SDK step: asks the SDK to run the step and
 * hands its result or error to the engine, which judges it (a late result
 * is discarded, an error retried per the policy). */
static int remote_step(cairn_ctx *ctx, void *arg, cJSON **result)
{
	step_call *sc = arg;
	exec *e = sc->e;
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "t", "run_step");
	cJSON_AddNumberToObject(m, "attempt", cairn_ctx_step_attempt(ctx));
	/* Version 3: the attempt's trace context (an older SDK ignores it). */
	cJSON_AddStringToObject(m, "traceparent", cairn_ctx_traceparent(ctx));
	send_or_exit(e->l, m);
	cJSON_Delete(m);
	for (;;) {
		m = next_msg(e);
		const char *op = str_field(m, "op");
		int rc;
		if (strcmp(op, "step_result") == 0) {
			*result = cJSON_DetachItemFromObjectCaseSensitive(m, "value");
			sc->delivered = !sc->await;
			rc = CAIRN_OK;
		} else if (strcmp(op, "step_error") == 0) {
			const char *msg = str_field(m, "message");
			const cJSON *retry = cJSON_GetObjectItemCaseSensitive(m, "retryable");
			rc = cJSON_IsFalse(retry)
			         ? cairn_fail(ctx, "%s", msg ? msg : "failed")
			         : cairn_retryable(ctx, "%s", msg ? msg : "failed");
		} else {
			if (strcmp(op, "should_stop") == 0) {
				cJSON *b = cJSON_CreateBool(cairn_should_stop(ctx));
				send_ok(e, b);
				cJSON_Delete(b);
			} else {
				send_simple(e, "error", "code", "invalid", "message",
				            "only should_stop may be called while a step runs");
			}
			cJSON_Delete(m);
			continue;
		}
		cJSON_Delete(m);
		return rc;
	}
}

static int op_step(exec *e, const cJSON *m)
{
	const char *name = str_field(m, "name"), *bad = NULL;
	cairn_retry_policy p;
	if (!name)
		return invalid(e, "step", "name", "a string");
	if (policy_from(cJSON_GetObjectItemCaseSensitive(m, "retry"), &p, &bad) < 0)
		return invalid(e, "step", bad, "a retry policy field (docs/protocol.md)");
	step_call sc = {.e = e,
	                .await = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "await"))};
	cJSON *res = NULL;
	int rc = cairn_step_retry(e->ctx, name, &p, remote_step, &sc, &res);
	if (!sc.delivered)
		return answer(e, rc, res);
	/* The SDK went on with its result: a refusal ends the run when it
	 * next speaks. */
	if (rc != CAIRN_OK)
		e->refused = rc;
	return 0;
}

/* ---------------------------------------------------- the other calls */

static int op_sleep(exec *e, const cJSON *m)
{
	const char *name = str_field(m, "name");
	int64_t ms;
	if (!name)
		return invalid(e, "sleep", "name", "a string");
	if (ms_field(m, "ms", 0, &ms) < 0)
		return invalid(e, "sleep", "ms", "a whole number of milliseconds >= 0");
	return answer(e, cairn_sleep(e->ctx, name, ms), NULL);
}

static int op_sleep_until(exec *e, const cJSON *m)
{
	const char *name = str_field(m, "name");
	int64_t at;
	if (!name)
		return invalid(e, "sleep_until", "name", "a string");
	if (ms_field(m, "unix_ms", 0, &at) < 0)
		return invalid(e, "sleep_until", "unix_ms", "a whole number of Unix milliseconds");
	return answer(e, cairn_sleep_until(e->ctx, name, at), NULL);
}

static int op_signal(exec *e, const cJSON *m)
{
	const char *name = str_field(m, "name");
	int64_t timeout;
	if (!name)
		return invalid(e, "signal", "name", "a string");
	if (ms_field(m, "timeout_ms", 1, &timeout) < 0)
		return invalid(e, "signal", "timeout_ms", "null or a whole number of ms >= 0");
	cJSON *payload = NULL;
	int rc = cairn_await_signal(e->ctx, name, timeout, &payload);
	return answer(e, rc, payload);
}

static int op_now(exec *e, const cJSON *m)
{
	(void)m;
	int64_t now = 0;
	int rc = cairn_now(e->ctx, &now);
	cJSON *v = cJSON_CreateNumber((double)now);
	rc = answer(e, rc, v);
	cJSON_Delete(v);
	return rc;
}

static int op_random(exec *e, const cJSON *m)
{
	(void)m;
	uint64_t r = 0;
	int rc = cairn_random(e->ctx, &r);
	char text[24];
	snprintf(text, sizeof text, "%" PRIu64, r);
	cJSON *v = cJSON_CreateString(text);
	rc = answer(e, rc, v);
	cJSON_Delete(v);
	return rc;
}

static int answer_id(exec *e, int rc, int64_t id)
{
	cJSON *v = cJSON_CreateNumber((double)id);
	rc = answer(e, rc, v);
	cJSON_Delete(v);
	return rc;
}

static int op_child_start(exec *e, const cJSON *m)
{
	const char *name = str_field(m, "name"), *wf = str_field(m, "workflow");
	if (!name || !wf)
		return invalid(e, "child_start", name ? "workflow" : "name", "a string");
	int64_t id = 0;
	int rc =
	    cairn_child_start(e->ctx, name, wf, cJSON_GetObjectItemCaseSensitive(m, "input"), &id);
	return answer_id(e, rc, id);
}

static int op_child_wait(exec *e, const cJSON *m)
{
	int64_t child, timeout;
	if (ms_field(m, "child", 0, &child) < 0)
		return invalid(e, "child_wait", "child", "a run id");
	if (ms_field(m, "timeout_ms", 1, &timeout) < 0)
		return invalid(e, "child_wait", "timeout_ms", "null or a whole number of ms >= 0");
	cJSON *out = NULL;
	int rc = cairn_child_wait(e->ctx, child, timeout, &out);
	return answer(e, rc, out);
}

/* The results of a wait for children as the protocol renders them: null
 * for a child that has not ended, else {"status", "output", "error"}. */
static cJSON *results_value(const cairn_child_result *r, int n)
{
	static const char *const status[] = {
	    [CAIRN_OK] = "completed", [CAIRN_EFAIL] = "failed", [CAIRN_CANCELLED] = "cancelled"};
	cJSON *a = cJSON_CreateArray();
	for (int i = 0; a && i < n; i++) {
		cJSON *o = r[i].done ? cJSON_CreateObject() : cJSON_CreateNull();
		if (r[i].done) {
			cJSON_AddStringToObject(o, "status", status[r[i].status]);
			cJSON_AddItemToObject(o, "output",
			                      r[i].output ? cJSON_Duplicate(r[i].output, 1)
			                                  : cJSON_CreateNull());
			if (r[i].error)
				cJSON_AddStringToObject(o, "error", r[i].error);
			else
				cJSON_AddNullToObject(o, "error");
		}
		cJSON_AddItemToArray(a, o);
	}
	return a;
}

/* child_wait_all: cairn_child_wait_first of the children, k of them
 * (absent: all). A child that failed is in the results, not an error. */
static int op_child_wait_all(exec *e, const cJSON *m)
{
	const cJSON *kids = cJSON_GetObjectItemCaseSensitive(m, "children"), *it;
	int n = cJSON_IsArray(kids) ? cJSON_GetArraySize(kids) : 0;
	int64_t k, timeout;
	if (n < 1 || n > 1000000)
		return invalid(e, "child_wait_all", "children", "an array of 1 to 1000000 run ids");
	if (ms_field(m, "k", 1, &k) < 0 || k == 0 || k > n)
		return invalid(e, "child_wait_all", "k",
		               "null or a whole number from 1 to its children");
	if (ms_field(m, "timeout_ms", 1, &timeout) < 0)
		return invalid(e, "child_wait_all", "timeout_ms",
		               "null or a whole number of ms >= 0");
	int64_t *ids = calloc((size_t)n, sizeof *ids);
	cairn_child_result *r = calloc((size_t)n, sizeof *r);
	int i = 0, bad = !ids || !r;
	cJSON_ArrayForEach(it, kids)
	{
		bad |= !cJSON_IsNumber(it) || it->valuedouble < 1 ||
		       it->valuedouble > 9007199254740992.0;
		if (ids)
			ids[i++] = bad ? 0 : (int64_t)it->valuedouble;
	}
	int rc;
	if (bad) {
		rc = ids && r ? invalid(e, "child_wait_all", "children", "an array of run ids")
		              : answer(e, CAIRN_ENOMEM, NULL);
	} else {
		rc = cairn_child_wait_first(e->ctx, ids, n, k < 0 ? n : (int)k, timeout, r);
		cJSON *v = rc == CAIRN_OK || rc == CAIRN_EFAIL ? results_value(r, n) : NULL;
		rc = answer(e, v ? CAIRN_OK : rc, v);
		cJSON_Delete(v);
	}
	free(ids);
	free(r);
	return rc;
}

static int op_send(exec *e, const cJSON *m)
{
	const char *name = str_field(m, "name"), *sig = str_field(m, "signal");
	int64_t run;
	if (!name || !sig)
		return invalid(e, "send", name ? "signal" : "name", "a string");
	if (ms_field(m, "run", 0, &run) < 0)
		return invalid(e, "send", "run", "a run id");
	int rc = cairn_send(e->ctx, name, run, sig, cJSON_GetObjectItemCaseSensitive(m, "payload"));
	return answer(e, rc, NULL);
}

static int op_enqueue(exec *e, const cJSON *m)
{
	const char *name = str_field(m, "name"), *wf = str_field(m, "workflow");
	if (!name || !wf)
		return invalid(e, "enqueue", name ? "workflow" : "name", "a string");
	int64_t id = 0;
	int rc =
	    cairn_enqueue_from(e->ctx, name, wf, cJSON_GetObjectItemCaseSensitive(m, "input"), &id);
	return answer_id(e, rc, id);
}

static int op_set_event(exec *e, const cJSON *m)
{
	const char *key = str_field(m, "key");
	if (!key)
		return invalid(e, "set_event", "key", "a string");
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, "value");
	cJSON *null = v ? NULL : cJSON_CreateNull();
	int rc = cairn_set_event(e->ctx, key, v ? v : null);
	cJSON_Delete(null);
	return answer(e, rc, NULL);
}

static int answer_bool(exec *e, int b)
{
	cJSON *v = cJSON_CreateBool(b);
	send_ok(e, v);
	cJSON_Delete(v);
	return 0;
}

static int op_patched(exec *e, const cJSON *m)
{
	const char *patch = str_field(m, "patch");
	if (!patch)
		return invalid(e, "patched", "patch", "a string");
	return answer_bool(e, cairn_patched(e->ctx, patch));
}

static int op_should_stop(exec *e, const cJSON *m)
{
	(void)m;
	return answer_bool(e, cairn_should_stop(e->ctx));
}

static const struct {
	const char *op;
	int (*fn)(exec *e, const cJSON *m);
} OPS[] = {
    {"step", op_step},
    {"sleep", op_sleep},
    {"sleep_until", op_sleep_until},
    {"signal", op_signal},
    {"now", op_now},
    {"random", op_random},
    {"child_start", op_child_start},
    {"child_wait", op_child_wait},
    {"child_wait_all", op_child_wait_all},
    {"send", op_send},
    {"enqueue", op_enqueue},
    {"set_event", op_set_event},
    {"patched", op_patched},
    {"should_stop", op_should_stop},
};

/* Answers the execution's calls until it returns, fails or is stopped. */
static int serve(exec *e, cJSON **output)
{
	for (;;) {
		cJSON *m = next_msg(e);
		const char *op = str_field(m, "op");
		int rc = -1;
		if (e->refused) {
			rc = e->refused;
			send_simple(e, "stop", "reason", stop_reason(rc), "message", errmsg(e, rc));
		} else if (strcmp(op, "return") == 0) {
			*output = cJSON_DetachItemFromObjectCaseSensitive(m, "value");
			rc = CAIRN_OK;
		} else if (strcmp(op, "continue_as_new") == 0 && e->s->protocol >= 2) {
			/* Version 2: the run ends and its successor starts with
			 * input, in the run's final commit (or the run ends as
			 * this says: cancelled, handed over, its input refused). */
			rc = cairn_continue_as_new(e->ctx,
			                           cJSON_GetObjectItemCaseSensitive(m, "input"));
		} else if (strcmp(op, "fail") == 0) {
			const char *msg = str_field(m, "message");
			rc = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "retryable"))
			         ? cairn_retryable(e->ctx, "%s", msg ? msg : "failed")
			         : cairn_fail(e->ctx, "%s", msg ? msg : "failed");
		} else {
			size_t i = 0;
			while (i < sizeof OPS / sizeof OPS[0] && strcmp(OPS[i].op, op) != 0)
				i++;
			if (i < sizeof OPS / sizeof OPS[0]) {
				rc = OPS[i].fn(e, m);
			} else {
				char msg[160];
				snprintf(msg, sizeof msg, "unknown op \"%.64s\" (docs/protocol.md)",
				         op);
				send_simple(e, "error", "code", "invalid", "message", msg);
				rc = 0;
			}
			if (rc == 0) {
				cJSON_Delete(m);
				continue;
			}
		}
		cJSON_Delete(m);
		return rc;
	}
}

/* The workflow function of every SDK workflow. */
static int sdk_workflow(cairn_ctx *ctx, const cJSON *input, cJSON **output)
{
	sdk *s = cairn_workflow_arg(ctx);
	exec e = {.s = s, .ctx = ctx, .x = atomic_fetch_add(&s->next_x, 1) + 1};
	e.l = lane_take(s);
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "t", "run");
	cJSON_AddNumberToObject(m, "x", (double)e.x);
	cJSON_AddNumberToObject(m, "run", (double)cairn_ctx_run_id(ctx));
	cJSON_AddStringToObject(m, "workflow", cairn_ctx_workflow(ctx));
	if (input)
		cJSON_AddItemReferenceToObject(m, "input", (cJSON *)input);
	else
		cJSON_AddNullToObject(m, "input");
	cJSON_AddNumberToObject(m, "attempt", cairn_ctx_attempt(ctx));
	cJSON_AddStringToObject(m, "traceparent", cairn_ctx_traceparent(ctx));
	send_or_exit(e.l, m);
	cJSON_Delete(m);
	int rc = serve(&e, output);
	lane_give(s, e.l);
	return rc;
}

/* ------------------------------------------------------ opening, hello */

static int fail(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, n, fmt, ap);
	va_end(ap);
	return -1;
}

/* --sdk-fds: descriptors and ranges, comma-separated ("3-19", "5,7,9"),
 * the control lane first. */
static int lanes_from_fds(sdk *s, const char *spec, char *err, size_t n)
{
	int fds[1025], nfds = 0;
	const char *p = spec;
	for (;;) {
		char *end;
		long first = strtol(p, &end, 10), last = first;
		if (end != p && *end == '-')
			last = strtol(end + 1, &end, 10);
		if (end == p || (*end && *end != ',') || first < 0 || first > INT_MAX ||
		    last < first || last > INT_MAX || last - first >= 1025 - nfds)
			return fail(
			    err, n,
			    "--sdk-fds \"%s\": expected descriptors or ranges, comma-separated, "
			    "the control lane first and then 1 to 1024 execution lanes (3-19 or "
			    "5,7,9, say)",
			    spec);
		for (long fd = first; fd <= last; fd++)
			fds[nfds++] = (int)fd;
		if (!*end)
			break;
		p = end + 1;
	}
	if (nfds < 2)
		return fail(err, n, "--sdk-fds \"%s\": no execution lane after the control lane",
		            spec);
	s->n = nfds - 1;
	if (!(s->lanes = calloc((size_t)s->n, sizeof *s->lanes)))
		return fail(err, n, "out of memory");
	for (int i = 0; i < nfds; i++) {
		if (fcntl(fds[i], F_SETFD, FD_CLOEXEC) < 0)
			return fail(err, n, "--sdk-fds: descriptor %d is not open (%s)", fds[i],
			            strerror(errno));
		(i == 0 ? &s->ctl : &s->lanes[i - 1])->fd = fds[i];
	}
	return 0;
}

static int lanes_from_path(sdk *s, const char *path, char *err, size_t n)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof a.sun_path)
		return fail(err, n, "--sdk-connect \"%s\": longer than a Unix socket path may be",
		            path);
	strcpy(a.sun_path, path);
	const char *conc = getenv("CAIRN_CONCURRENCY");
	char *end;
	long lanes = conc && *conc ? strtol(conc, &end, 10) : 16;
	if ((conc && *conc && *end) || lanes < 1 || lanes > 1024)
		return fail(err, n,
		            "CAIRN_CONCURRENCY \"%s\": expected 1 to 1024 (the lanes --sdk-connect "
		            "opens)",
		            conc);
	s->n = (int)lanes;
	if (!(s->lanes = calloc((size_t)s->n, sizeof *s->lanes)))
		return fail(err, n, "out of memory");
	for (int i = 0; i <= s->n; i++) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
			if (fd >= 0)
				close(fd);
			return fail(err, n, "--sdk-connect \"%s\": %s", path, strerror(errno));
		}
		(i == 0 ? &s->ctl : &s->lanes[i - 1])->fd = fd;
	}
	return 0;
}

static int speaks(const cJSON *protocols, int v)
{
	const cJSON *p;
	cJSON_ArrayForEach(p, protocols)
	{
		if (cJSON_IsNumber(p) && p->valuedouble == v)
			return 1;
	}
	return 0;
}

static int read_hello(sdk *s, char *err, size_t n)
{
	struct timeval tv = {.tv_sec = HELLO_WAIT_S};
	setsockopt(s->ctl.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	char *line = NULL;
	int rc = lane_line(&s->ctl, s->max_line, &line);
	struct timeval none = {0};
	setsockopt(s->ctl.fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
	if (rc <= 0)
		return fail(err, n, "no hello from the SDK process on the control lane: %s",
		            rc == 0 ? "end of file" : strerror(errno));
	s->hello = cJSON_Parse(line);
	free(line);
	const cJSON *h = s->hello;
	const char *op = str_field(h, "op");
	if (!op || strcmp(op, "hello") != 0)
		return fail(err, n, "the SDK's first message is not a hello");
	const cJSON *protocols = cJSON_GetObjectItemCaseSensitive(h, "protocols");
	for (s->protocol = PROTOCOL; s->protocol > 0 && !speaks(protocols, s->protocol);)
		s->protocol--;
	if (!s->protocol)
		return fail(err, n,
		            "the SDK speaks no protocol version this engine does (1 to %d; its "
		            "\"protocols\" lists what it speaks)",
		            PROTOCOL);
	const cJSON *wfs = cJSON_GetObjectItemCaseSensitive(h, "workflows");
	if (!cJSON_IsArray(wfs) || cJSON_GetArraySize(wfs) == 0)
		return fail(err, n, "hello: \"workflows\" must be a non-empty array");
	const char *rt = str_field(h, "runtime");
	snprintf(s->runtime, sizeof s->runtime, "%s", rt && *rt ? rt : "sdk");
	return 0;
}

int sdk_open(const char *fds, const char *path, sdk **out, char *err, size_t errlen)
{
	sdk *s = calloc(1, sizeof *s);
	*out = s;
	if (!s)
		return fail(err, errlen, "out of memory");
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->freed, NULL);
	s->max_line = (1 << 20) + LINE_SLACK;
	int rc = fds ? lanes_from_fds(s, fds, err, errlen) : lanes_from_path(s, path, err, errlen);
	if (rc == 0)
		rc = read_hello(s, err, errlen);
	for (int i = 0; rc == 0 && i < s->n; i++)
		lane_give(s, &s->lanes[i]);
	return rc;
}

void sdk_free(sdk *s)
{
	if (!s)
		return;
	for (int i = 0; i <= s->n && s->lanes; i++) {
		lane *l = i == 0 ? &s->ctl : &s->lanes[i - 1];
		if (l->fd > 2)
			close(l->fd);
		free(l->buf);
	}
	free(s->lanes);
	cJSON_Delete(s->hello);
	pthread_cond_destroy(&s->freed);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

int sdk_lanes(const sdk *s)
{
	return s->n;
}

void sdk_refuse(sdk *s, const char *why)
{
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "t", "refused");
	cJSON_AddStringToObject(m, "message", why);
	lane_send(&s->ctl, m);
	cJSON_Delete(m);
}

/* A numeric setting of w, from its configuration text (NAME=value lines). */
static long long setting_num(cairn_worker *w, const char *name)
{
	size_t len = strlen(name);
	for (const char *p = cairn_worker_config_text(w); p; p = strchr(p, '\n')) {
		p += *p == '\n';
		if (strncmp(p, name, len) == 0 && p[len] == '=')
			return strtoll(p + len + 1, NULL, 10);
	}
	return 0;
}

static void *watch(void *arg)
{
	sdk *s = arg;
	for (;;) {
		char *line = NULL;
		int rc = lane_line(&s->ctl, s->max_line, &line);
		free(line);
		if (rc <= 0)
			gone(rc == 0 ? "end of file on the control lane" : strerror(errno));
	}
	return NULL;
}

int sdk_attach(sdk *s, cairn_worker *w)
{
	char msg[512];
	const cJSON *wf;
	cJSON_ArrayForEach(wf, cJSON_GetObjectItemCaseSensitive(s->hello, "workflows"))
	{
		const char *name = str_field(wf, "name"), *bad = NULL;
		cairn_workflow_opts o = {.arg = s, .runtime = s->runtime};
		if (!name) {
			snprintf(msg, sizeof msg, "hello: every workflow needs a \"name\" string");
		} else if (policy_from(cJSON_GetObjectItemCaseSensitive(wf, "retry"), &o.retry,
		                       &bad) < 0) {
			snprintf(msg, sizeof msg,
			         "hello: workflow \"%.128s\": retry field \"%s\" is invalid", name,
			         bad);
		} else if (cairn_workflow_register(w, name, sdk_workflow, &o) != CAIRN_OK) {
			snprintf(msg, sizeof msg, "%s", cairn_worker_errmsg(w));
		} else {
			continue;
		}
		sdk_refuse(s, msg);
		fprintf(stderr, "cairn-worker: %s\n", msg);
		return CAIRN_EINVAL;
	}
	long long max_payload = setting_num(w, "CAIRN_MAX_PAYLOAD");
	s->max_line = (size_t)max_payload + LINE_SLACK;
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "t", "welcome");
	cJSON_AddNumberToObject(m, "protocol", s->protocol);
	cJSON_AddStringToObject(m, "engine", CAIRN_VERSION);
	cJSON_AddNumberToObject(m, "max_payload", (double)max_payload);
	cJSON_AddNumberToObject(m, "lanes", s->n);
	int rc = lane_send(&s->ctl, m);
	cJSON_Delete(m);
	pthread_t t;
	if (rc < 0 || pthread_create(&t, NULL, watch, s) != 0) {
		fprintf(stderr, "cairn-worker: cannot answer the SDK process: %s\n",
		        strerror(errno));
		return CAIRN_EINVAL;
	}
	pthread_detach(t);
	return CAIRN_OK;
}
