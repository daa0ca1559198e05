/*
 * api.c - the worker's HTTP API under /v1/ (see api.h): each request takes
 * a client from a small pool, makes the calls of the public client API and
 * answers JSON. A request body is split into its fields by PostgreSQL
 * (jsonb keeps numbers exact, where a C double would not), then validated
 * by the client as any enqueue is. Stored JSON values (inputs, outputs) go
 * into replies as the text PostgreSQL gives, never through a double.
 */
#include "api.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "clock.h"
#include "parse.h"

struct api {
	pthread_mutex_t mu;
	pthread_cond_t cv;     /* a client was given back, or api_stop */
	char *url;             /* the database */
	const seal_keys *keys; /* the worker's */
	cairn_client *idle[API_CLIENTS];
	int nidle, open; /* idle ones; open ones, idle or taken */
	int stopping;
};

int api_new(const char *database_url, const seal_keys *keys, api **out)
{
	api *a = calloc(1, sizeof *a);
	if (!a || !(a->url = strdup(database_url ? database_url : ""))) {
		free(a);
		return -CAIRN_ENOMEM;
	}
	if (clock_cond_init(&a->cv) < 0) {
		free(a->url);
		free(a);
		return -CAIRN_ENOMEM;
	}
	pthread_mutex_init(&a->mu, NULL);
	a->keys = keys;
	*out = a;
	return 0;
}

void api_stop(api *a)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->mu);
	a->stopping = 1;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
}

void api_free(api *a)
{
	if (!a)
		return;
	for (int i = 0; i < a->nidle; i++)
		cairn_client_free(a->idle[i]);
	pthread_mutex_destroy(&a->mu);
	pthread_cond_destroy(&a->cv);
	free(a->url);
	free(a);
}

/* ------------------------------------------------------------ the pool */

cairn_client *api_client_take(api *a, char *why, size_t n)
{
	int64_t deadline = clock_mono_ms() + 5000;
	pthread_mutex_lock(&a->mu);
	while (!a->nidle && a->open == API_CLIENTS && clock_mono_ms() < deadline)
		clock_cond_wait_ms(&a->cv, &a->mu, deadline - clock_mono_ms());
	cairn_client *c = a->nidle ? a->idle[--a->nidle] : NULL;
	int may_open = !c && a->open < API_CLIENTS;
	if (c || may_open)
		a->open += may_open;
	pthread_mutex_unlock(&a->mu);
	if (c)
		return c;
	if (!may_open) {
		snprintf(why, n, "all %d database connections of the HTTP API are busy; try again",
		         API_CLIENTS);
		return NULL;
	}
	if (cairn_client_open(a->url, &c) == CAIRN_OK) {
		client_use_keys(c, a->keys);
		return c;
	}
	snprintf(why, n, "the database is unreachable: %s", cairn_client_errmsg(c));
	cairn_client_free(c);
	pthread_mutex_lock(&a->mu);
	a->open--;
	pthread_cond_signal(&a->cv);
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

void api_client_give(api *a, cairn_client *c, int rc)
{
	int broken = rc == CAIRN_EDB && PQstatus(c->conn) != CONNECTION_OK;
	if (broken)
		cairn_client_free(c);
	pthread_mutex_lock(&a->mu);
	if (broken)
		a->open--;
	else
		a->idle[a->nidle++] = c;
	pthread_cond_signal(&a->cv);
	pthread_mutex_unlock(&a->mu);
}

/* ------------------------------------------------------------ replies */

unsigned api_status_of(int rc)
{
	switch (rc) {
	case CAIRN_OK: return 200;
	case CAIRN_EINVAL: return 400;
	case CAIRN_ENOTFOUND: return 404;
	case CAIRN_ESTATE: return 409;
	case CAIRN_ENOMEM: return 500;
	default: return 503;
	}
}

void api_reply(http_reply *r, unsigned status, cJSON *o)
{
	char *text = o ? cJSON_PrintUnformatted(o) : NULL;
	cJSON_Delete(o);
	buf_puts(&r->body, text ? text : "{\"error\":\"out of memory\"}");
	buf_puts(&r->body, "\n");
	cJSON_free(text);
	r->status = text ? status : 500;
	r->type = "application/json";
}

void api_error(http_reply *r, unsigned status, const char *why)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "error", why);
	api_reply(r, status, o);
}

int api_check_body(const http_request *q, const char *what, http_reply *r)
{
	char err[PARSE_ERR_MAX];
	if (parse_check_json_n(what, q->body, q->body_len, http_body_max(q->path), err) == 0)
		return 0;
	api_error(r, 400, err);
	return -1;
}

/* The client's error, as the status its code maps to. */
static void client_error(http_reply *r, cairn_client *c, int rc)
{
	api_error(r, api_status_of(rc), cairn_client_errmsg(c));
}

/* Adds name: JSON text v as it is (null when NULL). */
static void add_raw(cJSON *o, const char *name, const char *v)
{
	if (v)
		cJSON_AddRawToObject(o, name, v);
	else
		cJSON_AddNullToObject(o, name);
}

static void add_str(cJSON *o, const char *name, const char *v)
{
	if (v)
		cJSON_AddStringToObject(o, name, v);
	else
		cJSON_AddNullToObject(o, name);
}

/* Adds name: Unix ms as a number (null when 0: unset). */
static void add_ms(cJSON *o, const char *name, int64_t ms)
{
	if (ms)
		cJSON_AddNumberToObject(o, name, (double)ms);
	else
		cJSON_AddNullToObject(o, name);
}

static cJSON *run_json(const cairn_run *run)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "id", (double)run->id);
	cJSON_AddStringToObject(o, "workflow", run->workflow);
	cJSON_AddStringToObject(o, "key", run->key);
	cJSON_AddStringToObject(o, "group", run->group);
	cJSON_AddNumberToObject(o, "shard", run->shard);
	cJSON_AddStringToObject(o, "status", run->status);
	cJSON_AddNumberToObject(o, "attempt", run->attempt);
	cJSON_AddNumberToObject(o, "max_attempts", run->max_attempts);
	cJSON_AddBoolToObject(o, "cancel_requested", run->cancel_requested);
	add_raw(o, "input", run->input);
	add_raw(o, "output", run->output);
	add_str(o, "error", run->error);
	CLIENT_JSON_UNREADABLE(o, run, NULL);
	add_ms(o, "created_unix_ms", run->created_unix_ms);
	add_ms(o, "started_unix_ms", run->started_unix_ms);
	add_ms(o, "finished_unix_ms", run->finished_unix_ms);
	/* A chain of runs that continued as new: a client follows
	 * continued_to (the wait ends when this run does). */
	add_ms(o, "continued_from", run->continued_from);
	add_ms(o, "continued_to", run->continued_to);
	return o;
}

/* ------------------------------------------------------- POST /v1/runs */

/* The body (an object, or an array of them) as one row per run: its
 * position, whether it is an object, its fields as text with their JSON
 * types, and the names of fields that are not accepted. */
static const char SQL_SPLIT[] =
    "SELECT ord, jsonb_typeof(e) = 'object', "
    "       e->>'workflow', jsonb_typeof(e->'workflow'), (e->'input')::text, "
    "       e->>'key', jsonb_typeof(e->'key'), e->>'group', jsonb_typeof(e->'group'), "
    "       e->>'delay', jsonb_typeof(e->'delay'), e->>'run_at', jsonb_typeof(e->'run_at'), "
    "       e->>'max_attempts', jsonb_typeof(e->'max_attempts'), "
    "       e->>'concurrency_key', jsonb_typeof(e->'concurrency_key'), "
    "       e->>'priority', jsonb_typeof(e->'priority'), "
    "       e->>'require_served', jsonb_typeof(e->'require_served'), "
    "       (SELECT string_agg(k, ', ') FROM jsonb_object_keys(CASE WHEN jsonb_typeof(e) = "
    "          'object' THEN e END) k "
    "        WHERE k NOT IN ('workflow', 'input', 'key', 'group', 'delay', 'run_at', "
    "                        'max_attempts', 'concurrency_key', 'priority', "
    "                        'require_served')), "
    "       jsonb_typeof($1::jsonb) = 'array' "
    "FROM jsonb_array_elements(CASE WHEN jsonb_typeof($1::jsonb) = 'array' THEN $1::jsonb "
    "                               ELSE jsonb_build_array($1::jsonb) END) "
    "     WITH ORDINALITY AS t(e, ord) "
    "ORDER BY ord";

enum {
	SP_ORD,
	SP_OBJECT,
	SP_WORKFLOW,
	SP_WORKFLOW_T,
	SP_INPUT,
	SP_KEY,
	SP_KEY_T,
	SP_GROUP,
	SP_GROUP_T,
	SP_DELAY,
	SP_DELAY_T,
	SP_AT,
	SP_AT_T,
	SP_MAXA,
	SP_MAXA_T,
	SP_CKEY,
	SP_CKEY_T,
	SP_PRIO,
	SP_PRIO_T,
	SP_REQ,
	SP_REQ_T,
	SP_UNKNOWN,
	SP_ARRAY
};

/* Field col of row i: NULL when absent or null; else a string field must
 * be a JSON string ("number" too where numbers allowed). */
static const char *field(const PGresult *res, int i, int col, int numbers, const char *name,
                         char *why, size_t n)
{
	if (PQgetisnull(res, i, col))
		return NULL;
	const char *t = PQgetvalue(res, i, col + 1);
	if (strcmp(t, "null") == 0)
		return NULL;
	if (strcmp(t, "string") != 0 && !(numbers && strcmp(t, "number") == 0))
		snprintf(why, n, "%s is a JSON %s: expected a string%s", name, t,
		         numbers ? " or a number" : "");
	return PQgetvalue(res, i, col);
}

/* Row i of the split body into o: 0, or -1 with the reason in why. */
static int run_opts(const PGresult *res, int i, const char **workflow, cairn_enqueue_opts *o,
                    char *why, size_t n)
{
	char err[PARSE_ERR_MAX];
	int64_t v;
	why[0] = '\0';
	if (!db_get_bool(res, i, SP_OBJECT)) {
		snprintf(why, n,
		         "a run must be a JSON object with workflow and, optionally, input, "
		         "key, group, delay, run_at, max_attempts, concurrency_key, priority, "
		         "require_served");
		return -1;
	}
	if (!PQgetisnull(res, i, SP_UNKNOWN)) {
		snprintf(why, n,
		         "unknown field %s: expected workflow, input, key, group, delay, "
		         "run_at, max_attempts, concurrency_key, priority, require_served",
		         PQgetvalue(res, i, SP_UNKNOWN));
		return -1;
	}
	*workflow = field(res, i, SP_WORKFLOW, 0, "workflow", why, n);
	o->key = field(res, i, SP_KEY, 0, "key", why, n);
	o->group = field(res, i, SP_GROUP, 0, "group", why, n);
	o->input = PQgetisnull(res, i, SP_INPUT) ? NULL : PQgetvalue(res, i, SP_INPUT);
	const char *delay = field(res, i, SP_DELAY, 1, "delay", why, n);
	const char *at = field(res, i, SP_AT, 0, "run_at", why, n);
	const char *maxa = field(res, i, SP_MAXA, 1, "max_attempts", why, n);
	o->concurrency_key = field(res, i, SP_CKEY, 0, "concurrency_key", why, n);
	const char *prio = field(res, i, SP_PRIO, 1, "priority", why, n);
	if (!why[0] && !PQgetisnull(res, i, SP_REQ_T) &&
	    strcmp(PQgetvalue(res, i, SP_REQ_T), "boolean") != 0 &&
	    strcmp(PQgetvalue(res, i, SP_REQ_T), "null") != 0)
		snprintf(why, n, "require_served is a JSON %s: expected true or false",
		         PQgetvalue(res, i, SP_REQ_T));
	o->require_served =
	    !PQgetisnull(res, i, SP_REQ) && strcmp(PQgetvalue(res, i, SP_REQ), "true") == 0;
	if (why[0])
		return -1;
	if (!*workflow) {
		snprintf(why, n, "workflow is missing: expected the name of a workflow");
		return -1;
	}
	const char *bad = NULL;
	if (delay && strcmp(PQgetvalue(res, i, SP_DELAY_T), "number") == 0)
		bad = parse_int(delay, 0, INT64_MAX / 2, &o->delay_ms, err) < 0 ? "delay" : NULL;
	else if (delay)
		bad = parse_duration_ms(delay, &o->delay_ms, err) < 0 ? "delay" : NULL;
	if (!bad && at)
		bad = parse_timestamp_ms(at, &o->at_unix_ms, err) < 0 ? "run_at" : NULL;
	if (!bad && maxa)
		bad = parse_int(maxa, 1, 1000, &v, err) < 0 ? "max_attempts" : NULL;
	o->max_attempts = maxa ? (int)v : 0;
	if (!bad && prio)
		bad = parse_int(prio, -CAIRN_PRIORITY_MAX, CAIRN_PRIORITY_MAX, &v, err) < 0
		          ? "priority"
		          : NULL;
	if (bad) {
		snprintf(why, n, "invalid %s: %s", bad, err);
		return -1;
	}
	o->priority = prio ? (int)v : 0;
	return 0;
}

/* The runs of rows[0..n): one enqueue (an object) or a batch (an array,
 * every run of one workflow). */
static void create_runs(cairn_client *c, const PGresult *res, const char *traceparent,
                        http_reply *r, int *rc)
{
	int n = PQntuples(res), array = n > 0 && db_get_bool(res, 0, SP_ARRAY);
	char why[512] = "";
	if (n <= 0 || n > API_BATCH_MAX) {
		snprintf(why, sizeof why, "a batch of %d runs: expected 1 to %d", n, API_BATCH_MAX);
		api_error(r, 400, why);
		return;
	}
	size_t count = (size_t)n;
	cairn_enqueue_opts *opts = calloc(count, sizeof *opts);
	cairn_enqueued *done = calloc(count, sizeof *done);
	const char *workflow = NULL;
	for (int i = 0; opts && done && i < n; i++) {
		const char *wf = NULL;
		if (run_opts(res, i, &wf, &opts[i], why, sizeof why) == 0 && workflow &&
		    strcmp(wf, workflow) != 0)
			snprintf(why, sizeof why,
			         "its workflow is \"%s\", not \"%s\": a batch is of one "
			         "workflow",
			         wf, workflow);
		if (why[0] && array) {
			char msg[600];
			snprintf(msg, sizeof msg, "runs[%d]: %s", i, why);
			api_error(r, 400, msg);
		} else if (why[0]) {
			api_error(r, 400, why);
		}
		if (why[0])
			goto done;
		workflow = wf;
		opts[i].traceparent = traceparent;
	}
	if (!opts || !done) {
		api_error(r, 500, "out of memory");
		goto done;
	}
	*rc = array ? cairn_enqueue_batch(c, workflow, (size_t)n, opts, done)
	            : cairn_enqueue(c, workflow, &opts[0], &done[0]);
	if (*rc) {
		client_error(r, c, *rc);
		goto done;
	}
	cJSON *o = cJSON_CreateObject(), *list = array ? cJSON_AddArrayToObject(o, "runs") : o;
	for (int i = 0; i < n; i++) {
		cJSON *e = array ? cJSON_CreateObject() : o;
		cJSON_AddNumberToObject(e, "id", (double)done[i].id);
		cJSON_AddBoolToObject(e, "existed", done[i].existed);
		cJSON_AddBoolToObject(e, "held", done[i].held);
		cJSON_AddStringToObject(e, "status", done[i].status);
		if (done[i].warning)
			cJSON_AddStringToObject(e, "warning", done[i].warning);
		if (!array) {
			add_raw(e, "output", done[i].output);
			add_str(e, "error", done[i].error);
			CLIENT_JSON_UNREADABLE(e, &done[i], NULL);
		} else {
			cJSON_AddItemToArray(list, e);
		}
	}
	if (array && cairn_client_warning(c)) /* a batch's, for all its runs */
		cJSON_AddStringToObject(o, "warning", cairn_client_warning(c));
	api_reply(r, array || done[0].existed ? 200 : 201, o);
done:
	for (int i = 0; done && i < n; i++)
		cairn_enqueued_clear(&done[i]);
	free(opts);
	free(done);
}

static void post_runs(cairn_client *c, const http_request *q, http_reply *r, int *rc)
{
	if (api_check_body(q, "the body", r) < 0)
		return;
	const char *p[] = {q->body};
	buf dberr = BUF_INIT;
	PGresult *res = db_exec(c->conn, &dberr, SQL_SPLIT, 1, p);
	if (!res) {
		*rc = CAIRN_EDB;
		api_error(r, 503, buf_str(&dberr));
	} else {
		/* W3C trace context: the caller's span is the parent of every
		 * run of the request (trace.h). */
		create_runs(c, res, http_header(q, "traceparent"), r, rc);
	}
	PQclear(res);
	buf_free(&dberr);
}

/* ----------------------------------------------------- GET /v1/runs/ID */

/* Reads the run; with ?wait=DURATION, until it has finished, the wait is
 * over or the worker stops, re-reading it after 20 ms, then half as long
 * again each time up to 500 ms, without holding a connection in between. */
static void get_run(api *a, cairn_client **c, int64_t id, const http_request *q, http_reply *r,
                    int *rc)
{
	char err[PARSE_ERR_MAX], why[512];
	int64_t wait_ms = 0, nap = 20;
	const char *wait = http_query(q, "wait");
	if (wait && (parse_duration_ms(wait, &wait_ms, err) < 0 || wait_ms > API_WAIT_MAX_MS)) {
		snprintf(why, sizeof why,
		         "invalid wait \"%.64s\": expected a duration from 0 to 60s", wait);
		api_error(r, 400, why);
		return;
	}
	int64_t deadline = clock_mono_ms() + wait_ms;
	for (;;) {
		cairn_run *run = NULL;
		if ((*rc = cairn_run_get(*c, id, &run))) {
			client_error(r, *c, *rc);
			return;
		}
		int64_t left = deadline - clock_mono_ms();
		if (run->finished_unix_ms || left <= 0) {
			api_reply(r, 200, run_json(run));
			cairn_run_free(run);
			return;
		}
		cairn_run_free(run);
		api_client_give(a, *c, *rc);
		*c = NULL;
		pthread_mutex_lock(&a->mu);
		if (!a->stopping)
			clock_cond_wait_ms(&a->cv, &a->mu, nap < left ? nap : left);
		if (a->stopping)
			deadline = 0;
		pthread_mutex_unlock(&a->mu);
		nap = nap + nap / 2 > 500 ? 500 : nap + nap / 2;
		if (!(*c = api_client_take(a, why, sizeof why))) {
			api_error(r, 503, why);
			return;
		}
	}
}

/* ----------------------------------------- POST /v1/runs/ID/(action) */

static void run_action(cairn_client *c, int64_t id, const char *action, const http_request *q,
                       http_reply *r, int *rc)
{
	static const char signals[] = "signals/";
	const char *name = NULL;
	if (strncmp(action, signals, sizeof signals - 1) == 0) {
		name = action + sizeof signals - 1;
		if (q->body_len && api_check_body(q, "signal payload", r) < 0)
			return;
		*rc = cairn_signal(c, id, name, q->body_len ? q->body : "null");
	} else if (strcmp(action, "cancel") == 0) {
		*rc = cairn_cancel(c, id);
	} else if (strcmp(action, "retry") == 0) {
		*rc = cairn_retry(c, id);
	} else {
		api_error(r, 404,
		          "not found: POST /v1/runs/ID/signals/NAME, /v1/runs/ID/cancel or "
		          "/v1/runs/ID/retry");
		return;
	}
	if (*rc) {
		client_error(r, c, *rc);
		return;
	}
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "run", (double)id);
	if (name) {
		cJSON_AddStringToObject(o, "signal", name);
		cJSON_AddBoolToObject(o, "delivered", 1);
	} else {
		cJSON_AddBoolToObject(
		    o, strcmp(action, "cancel") == 0 ? "cancel_requested" : "retried", 1);
	}
	api_reply(r, 202, o);
}

/* ------------------------------------------------------------ routing */

/* What the request asks for: "runs" (id 0), or a run and what follows its
 * id ("" or an action); -1 for a path the API does not have. */
static int parse_path(const char *sub, int64_t *id, const char **rest)
{
	static const char runs[] = "/runs";
	char err[PARSE_ERR_MAX], num[24];
	if (strncmp(sub, runs, sizeof runs - 1) != 0)
		return -1;
	sub += sizeof runs - 1;
	*id = 0;
	*rest = "";
	if (!*sub)
		return 0;
	if (*sub++ != '/')
		return -1;
	size_t len = strcspn(sub, "/");
	if (len == 0 || len >= sizeof num)
		return -1;
	memcpy(num, sub, len);
	num[len] = '\0';
	if (parse_int(num, 1, INT64_MAX, id, err) < 0)
		return -1;
	*rest = sub[len] ? sub + len + 1 : "";
	return 0;
}

void api_handle(api *a, const http_request *q, const char *sub, http_reply *r)
{
	int64_t id;
	const char *rest;
	int post = strcmp(q->method, "POST") == 0, get = strcmp(q->method, "GET") == 0;
	char why[512];
	if (parse_path(sub, &id, &rest) < 0) {
		api_error(r, 404,
		          "not found: the API has /v1/runs and /v1/runs/ID (docs/openapi.yaml)");
		return;
	}
	if ((!id && !post) || (id && !*rest && !get) || (id && *rest && !post)) {
		r->allow = !id || *rest ? "POST" : "GET";
		snprintf(why, sizeof why, "method %.16s not allowed here: use %s", q->method,
		         r->allow);
		api_error(r, 405, why);
		return;
	}
	if (q->body_too_big) {
		snprintf(why, sizeof why, "the body is larger than %zu bytes",
		         http_body_max(q->path));
		api_error(r, 413, why);
		return;
	}
	cairn_client *c = api_client_take(a, why, sizeof why);
	if (!c) {
		api_error(r, 503, why);
		return;
	}
	int rc = CAIRN_OK;
	if (!id)
		post_runs(c, q, r, &rc);
	else if (!*rest)
		get_run(a, &c, id, q, r, &rc);
	else
		run_action(c, id, rest, q, r, &rc);
	if (c)
		api_client_give(a, c, rc);
}
