/*
 * ui.c - `cairn ui`: the operator console. A libmicrohttpd server (the
 * engine's http module, with its limits on slow clients) that serves the page, its
 * script and style (cli/ui/, embedded at build time) and a JSON API under
 * /api/ read straight from the database through the client API, so it
 * works with no worker running. Owns one cairn_client, used by one of the
 * server's handler threads at a time.
 *
 * Security: it listens on loopback unless told otherwise, and anywhere else
 * only with a token (--token or CAIRN_UI_TOKEN), given as a bearer token or
 * as the cookie the login form sets. Every action is a POST that must carry
 * the header X-Cairn-Console: 1 (a cross-site form cannot set it, and a
 * cross-site script cannot without a CORS preflight, which is never
 * granted) and, when the browser names an Origin, come from this origin.
 * Every reply forbids framing and inline scripts (Content-Security-Policy)
 * and is never cached. A request whose Host names anything but an IP
 * address, localhost or a name of --hosts is refused (421) before it gets
 * here: a page of another site rebound to this address names that site.
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cairn.h"
#include "cli.h"
#include "commands.h"
#include "form.h"
#include "http.h"
#include "parse.h"
#include "state.h"

/* The files of cli/ui/, generated into build/gen/ui_assets.c. */
typedef struct ui_asset {
	const char *name;
	const unsigned char *data;
	unsigned len;
} ui_asset;
extern const ui_asset cairn_ui_assets[];
extern const size_t cairn_ui_assets_count;

/* A bulk action touches at most this many runs; narrow the filter for more. */
#define BULK_MAX     10000
#define RUNNER_TTL   10000
#define COOKIE       "cairn_ui"
#define LIST_MAX     1000
#define RECENT_MOVES 20

/* The monotonic clock in milliseconds, for the server time of a reply. */
static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

typedef struct ui {
	cairn_client *c;
	const char *token;  /* NULL: no token needed (loopback) */
	pthread_mutex_t mu; /* the server has several handler threads; c is one session */
} ui;

/* ------------------------------------------------------------- replies */

static void reply_json(http_reply *r, unsigned status, cJSON *doc)
{
	char *s = doc ? cJSON_PrintUnformatted(doc) : NULL;
	cJSON_Delete(doc);
	r->status = s ? status : 500;
	r->type = "application/json";
	buf_puts(&r->body, s ? s : "{\"error\":\"out of memory\"}");
	free(s);
}

static void reply_error(http_reply *r, unsigned status, const char *field, const char *msg)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "error", msg);
	if (field)
		cJSON_AddStringToObject(o, "field", field);
	reply_json(r, status, o);
}

/* A client error as a reply: 400 naming the query parameter for bad input. */
static void reply_client(http_reply *r, cairn_client *c, int rc)
{
	static const struct {
		const char *field, *param;
	} map[] = {{"workflow", "workflow"},
	           {"status", "status"},
	           {"key", "key"},
	           {"limit", "limit"},
	           {"created_from_unix_ms", "from"},
	           {"created_to_unix_ms", "to"},
	           {"before_id", "before"},
	           {"signal", "name"},
	           {"payload", "body"},
	           {"run", "id"}};
	unsigned status = rc == CAIRN_EINVAL      ? 400
	                  : rc == CAIRN_ENOTFOUND ? 404
	                  : rc == CAIRN_ESTATE    ? 409
	                                          : 500;
	const char *field = rc == CAIRN_EINVAL ? cairn_client_errfield(c) : NULL;
	for (size_t i = 0; field && i < sizeof map / sizeof map[0]; i++)
		if (strcmp(map[i].field, field) == 0)
			field = map[i].param;
	reply_error(r, status, field, cairn_client_errmsg(c));
}

/* -------------------------------------------------------- query params */

typedef struct param_check {
	const char *const *allowed;
	char bad[160];
} param_check;

static int check_one(void *arg, const char *name, const char *value)
{
	param_check *p = arg;
	if (!*name) /* "?&a=1": nothing there */
		return 0;
	for (const char *const *a = p->allowed; *a; a++)
		if (strcmp(*a, name) == 0)
			return 0;
	snprintf(p->bad, sizeof p->bad, "%.100s", name);
	return 1;
}

/* 0, or 400 naming the first parameter that is not in allowed. */
static int check_params(const http_request *q, http_reply *r, const char *const *allowed)
{
	param_check p = {allowed, ""};
	if (!http_query_each(q, check_one, &p))
		return 0;
	char msg[400];
	int n = snprintf(msg, sizeof msg, "unknown query parameter \"%s\": expected", p.bad);
	for (const char *const *a = allowed; *a && n < (int)sizeof msg - 40; a++)
		n +=
		    snprintf(msg + n, sizeof msg - (size_t)n, "%s %s", a == allowed ? "" : ",", *a);
	reply_error(r, 400, p.bad, msg);
	return -1;
}

/* The parameter, or NULL when absent or empty. */
static const char *param(const http_request *q, const char *name)
{
	const char *v = http_query(q, name);
	return v && *v ? v : NULL;
}

/* An integer parameter in [min, max] into *out (untouched when absent). */
static int int_param(const http_request *q, http_reply *r, const char *name, int64_t min,
                     int64_t max, int64_t *out)
{
	const char *v = param(q, name);
	char err[PARSE_ERR_MAX], msg[PARSE_ERR_MAX + 64];
	if (!v)
		return 0;
	if (parse_int(v, min, max, out, err) == 0)
		return 0;
	snprintf(msg, sizeof msg, "%s: %s", name, err);
	reply_error(r, 400, name, msg);
	return -1;
}

static int time_param(const http_request *q, http_reply *r, const char *name, int64_t *out)
{
	const char *v = param(q, name);
	char err[PARSE_ERR_MAX], msg[PARSE_ERR_MAX + 64];
	if (!v || parse_timestamp_ms(v, out, err) == 0)
		return 0;
	snprintf(msg, sizeof msg, "%s: %s", name, err);
	reply_error(r, 400, name, msg);
	return -1;
}

#define FILTER_PARAMS "workflow", "status", "key", "from", "to"

/* The run filter of the query (the client validates the names). */
static int filter_params(const http_request *q, http_reply *r, cairn_list_filter *f)
{
	int64_t limit = 50;
	memset(f, 0, sizeof *f);
	f->workflow = param(q, "workflow");
	f->status = param(q, "status");
	f->key = param(q, "key");
	if (time_param(q, r, "from", &f->created_from_unix_ms) ||
	    time_param(q, r, "to", &f->created_to_unix_ms) ||
	    int_param(q, r, "before", 1, INT64_MAX, &f->before_id) ||
	    int_param(q, r, "limit", 1, LIST_MAX, &limit))
		return -1;
	f->limit = (int)limit;
	return 0;
}

/* ---------------------------------------------------------------- runs */

static cJSON *run_json(const cairn_run *x)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "id", (double)x->id);
	cJSON_AddStringToObject(o, "workflow", x->workflow);
	cJSON_AddStringToObject(o, "key", x->key);
	cJSON_AddStringToObject(o, "group", x->group);
	cJSON_AddNumberToObject(o, "shard", x->shard);
	cJSON_AddStringToObject(o, "status", x->status);
	cJSON_AddNumberToObject(o, "attempt", x->attempt);
	cJSON_AddNumberToObject(o, "max_attempts", x->max_attempts);
	cJSON_AddBoolToObject(o, "cancel_requested", x->cancel_requested);
	if (x->parent_id)
		cJSON_AddNumberToObject(o, "parent_id", (double)x->parent_id);
	/* A chain of runs that continued as new: the runs before and after. */
	if (x->continued_from)
		cJSON_AddNumberToObject(o, "continued_from", (double)x->continued_from);
	if (x->continued_to)
		cJSON_AddNumberToObject(o, "continued_to", (double)x->continued_to);
	if (x->code_version)
		cJSON_AddStringToObject(o, "code_version", x->code_version);
	if (x->concurrency_key)
		cJSON_AddStringToObject(o, "concurrency_key", x->concurrency_key);
	cJSON_AddNumberToObject(o, "priority", x->priority);
	cJSON_AddBoolToObject(o, "held", x->held);
	if (x->waiting_for)
		cJSON_AddStringToObject(o, "waiting_for", x->waiting_for);
	if (x->runtime)
		cJSON_AddStringToObject(o, "runtime", x->runtime);
	if (x->unserved)
		cJSON_AddStringToObject(o, "unserved", x->unserved);
	cli_json_add_raw(o, "input", x->input);
	cli_json_add_raw(o, "output", x->output);
	if (x->error)
		cJSON_AddStringToObject(o, "error", x->error);
	else
		cJSON_AddNullToObject(o, "error");
	cli_json_add_unreadable(o, CLI_LOCK(x), NULL);
	const struct {
		const char *name;
		int64_t ms;
	} t[] = {{"created_at", x->created_unix_ms},
	         {"scheduled_at", x->scheduled_unix_ms},
	         {"started_at", x->started_unix_ms},
	         {"updated_at", x->updated_unix_ms},
	         {"finished_at", x->finished_unix_ms}};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (t[i].ms)
			cJSON_AddNumberToObject(o, t[i].name, (double)t[i].ms);
		else
			cJSON_AddNullToObject(o, t[i].name);
	return o;
}

static void api_runs(ui *u, const http_request *q, http_reply *r)
{
	double t0 = now_ms();
	static const char *const allowed[] = {FILTER_PARAMS, "before", "limit", NULL};
	cairn_list_filter f;
	if (check_params(q, r, allowed) || filter_params(q, r, &f))
		return;
	cairn_run *runs;
	size_t n;
	int rc = cairn_run_list(u->c, &f, &runs, &n);
	if (rc)
		return reply_client(r, u->c, rc);
	cJSON *doc = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(doc, "runs");
	for (size_t i = 0; i < n; i++)
		cJSON_AddItemToArray(a, run_json(&runs[i]));
	if (n == (size_t)f.limit)
		cJSON_AddNumberToObject(doc, "next_before", (double)runs[n - 1].id);
	else
		cJSON_AddNullToObject(doc, "next_before");
	cairn_run_list_free(runs, n);
	cJSON_AddNumberToObject(doc, "server_ms", now_ms() - t0);
	reply_json(r, 200, doc);
}

static void api_counts(ui *u, const http_request *q, http_reply *r)
{
	static const char *const allowed[] = {FILTER_PARAMS, NULL};
	cairn_list_filter f;
	int64_t counts[CAIRN_RUN_STATUSES];
	if (check_params(q, r, allowed) || filter_params(q, r, &f))
		return;
	int rc = cairn_run_counts(u->c, &f, counts);
	if (rc)
		return reply_client(r, u->c, rc);
	cJSON *doc = cJSON_CreateObject(), *o = cJSON_AddObjectToObject(doc, "counts");
	int64_t total = 0;
	for (int i = 0; i < CAIRN_RUN_STATUSES; i++) {
		cJSON_AddNumberToObject(o, run_status_name((run_status)i), (double)counts[i]);
		total += counts[i];
	}
	cJSON_AddNumberToObject(doc, "total", (double)total);
	reply_json(r, 200, doc);
}

/* Whether the bulk action applies to runs of status i: cancel to the
 * unfinished, retry to the failed and cancelled. */
static int bulk_applies(int retry, int i)
{
	return retry ? i == RUN_FAILED || i == RUN_CANCELLED : !run_status_finished((run_status)i);
}

/* Cancels or retries every run of status of f, a page at a time. */
static void bulk_status(ui *u, cairn_list_filter f, const char *status, int retry, int64_t *done,
                        int64_t *skipped)
{
	f.status = status;
	f.limit = 500;
	f.before_id = 0;
	for (;;) {
		cairn_run *runs;
		size_t n;
		if (cairn_run_list(u->c, &f, &runs, &n))
			return;
		for (size_t i = 0; i < n; i++) {
			int rc =
			    retry ? cairn_retry(u->c, runs[i].id) : cairn_cancel(u->c, runs[i].id);
			*(rc ? skipped : done) += 1;
		}
		f.before_id = n ? runs[n - 1].id : 0;
		cairn_run_list_free(runs, n);
		if (n < (size_t)f.limit)
			return;
	}
}

static void api_bulk(ui *u, const http_request *q, http_reply *r)
{
	static const char *const allowed[] = {FILTER_PARAMS, "action", "expect", NULL};
	cairn_list_filter f;
	int64_t counts[CAIRN_RUN_STATUSES], expect = -1;
	if (check_params(q, r, allowed) || filter_params(q, r, &f) ||
	    int_param(q, r, "expect", 0, INT64_MAX, &expect))
		return;
	const char *action = param(q, "action");
	if (!action || (strcmp(action, "cancel") != 0 && strcmp(action, "retry") != 0))
		return reply_error(r, 400, "action", "action: expected cancel or retry");
	if (expect < 0)
		return reply_error(
		    r, 400, "expect",
		    "expect: the number of runs the confirmation showed is required");
	int retry = action[0] == 'r', rc = cairn_run_counts(u->c, &f, counts);
	if (rc)
		return reply_client(r, u->c, rc);
	int64_t n = 0;
	for (int i = 0; i < CAIRN_RUN_STATUSES; i++)
		if (bulk_applies(retry, i) &&
		    (!f.status || strcmp(f.status, run_status_name((run_status)i)) == 0))
			n += counts[i];
	char msg[200];
	if (n != expect) {
		snprintf(msg, sizeof msg,
		         "the filter now selects %" PRId64 " runs to %s, not %" PRId64
		         ": confirm again",
		         n, action, expect);
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "error", msg);
		cJSON_AddNumberToObject(o, "count", (double)n);
		return reply_json(r, 409, o);
	}
	if (n > BULK_MAX) {
		snprintf(msg, sizeof msg,
		         "the filter selects %" PRId64
		         " runs; a bulk %s touches at most %d: narrow it",
		         n, action, BULK_MAX);
		return reply_error(r, 400, NULL, msg);
	}
	int64_t done = 0, skipped = 0;
	for (int i = 0; i < CAIRN_RUN_STATUSES; i++)
		if (bulk_applies(retry, i) && counts[i] &&
		    (!f.status || strcmp(f.status, run_status_name((run_status)i)) == 0))
			bulk_status(u, f, run_status_name((run_status)i), retry, &done, &skipped);
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "touched", (double)done);
	cJSON_AddNumberToObject(o, "skipped", (double)skipped);
	reply_json(r, 200, o);
}

/* ----------------------------------------------------------------- a run */

static cJSON *steps_json(const cairn_run *x)
{
	cJSON *a = cJSON_CreateArray();
	for (size_t i = 0; i < x->nsteps; i++) {
		const cairn_step_info *s = &x->steps[i];
		cJSON *o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "seq", s->seq);
		cJSON_AddStringToObject(o, "name", s->name);
		cJSON_AddStringToObject(o, "kind", s->kind);
		cJSON_AddStringToObject(o, "status", s->status);
		cJSON_AddNumberToObject(o, "attempts", s->attempts);
		cJSON_AddNumberToObject(o, "started_at", (double)s->started_unix_ms);
		if (s->finished_unix_ms)
			cJSON_AddNumberToObject(o, "finished_at", (double)s->finished_unix_ms);
		else
			cJSON_AddNullToObject(o, "finished_at");
		cli_json_add_raw(o, "output", s->output);
		if (s->error)
			cJSON_AddStringToObject(o, "error", s->error);
		cli_json_add_unreadable(o, CLI_LOCK(s), NULL);
		cJSON_AddItemToArray(a, o);
	}
	return a;
}

/* The names of the fields of signals and events, by bit (cairn.h). */
static const char *const PAYLOAD[3] = {"payload", NULL, NULL};
static const char *const VALUE[3] = {NULL, "value", NULL};

static int run_extras(ui *u, cJSON *doc, const cairn_run *x)
{
	cJSON *k = cJSON_AddArrayToObject(doc, "children");
	for (size_t i = 0; i < x->nchildren; i++) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "id", (double)x->children[i].id);
		cJSON_AddStringToObject(o, "workflow", x->children[i].workflow);
		cJSON_AddStringToObject(o, "status", x->children[i].status);
		cJSON_AddItemToArray(k, o);
	}
	cairn_signal_info *sg;
	cairn_event_info *ev;
	size_t ns, ne;
	int rc = cairn_signal_list(u->c, x->id, &sg, &ns);
	if (rc)
		return rc;
	cJSON *a = cJSON_AddArrayToObject(doc, "signals");
	for (size_t i = 0; i < ns; i++) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "id", (double)sg[i].id);
		cJSON_AddStringToObject(o, "name", sg[i].name);
		cli_json_add_raw(o, "payload", sg[i].payload);
		cli_json_add_unreadable(o, CLI_LOCK(&sg[i]), PAYLOAD);
		cJSON_AddNumberToObject(o, "created_at", (double)sg[i].created_unix_ms);
		if (sg[i].consumed_by_seq >= 0)
			cJSON_AddNumberToObject(o, "consumed_by_seq", sg[i].consumed_by_seq);
		else
			cJSON_AddNullToObject(o, "consumed_by_seq");
		cJSON_AddItemToArray(a, o);
	}
	cairn_signal_list_free(sg, ns);
	if ((rc = cairn_event_list(u->c, x->id, &ev, &ne)))
		return rc;
	a = cJSON_AddArrayToObject(doc, "events");
	for (size_t i = 0; i < ne; i++) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "key", ev[i].key);
		cli_json_add_raw(o, "value", ev[i].value);
		cli_json_add_unreadable(o, CLI_LOCK(&ev[i]), VALUE);
		cJSON_AddNumberToObject(o, "updated_at", (double)ev[i].updated_unix_ms);
		cJSON_AddItemToArray(a, o);
	}
	cairn_event_list_free(ev, ne);
	return CAIRN_OK;
}

static int run_id_param(const http_request *q, http_reply *r, int64_t *id)
{
	*id = 0;
	if (int_param(q, r, "id", 1, INT64_MAX, id))
		return -1;
	if (*id)
		return 0;
	reply_error(r, 400, "id", "id: a run id (1 or more) is required");
	return -1;
}

static void api_run(ui *u, const http_request *q, http_reply *r)
{
	static const char *const allowed[] = {"id", NULL};
	int64_t id;
	cairn_run *x;
	if (check_params(q, r, allowed) || run_id_param(q, r, &id))
		return;
	int rc = cairn_run_get(u->c, id, &x);
	if (rc)
		return reply_client(r, u->c, rc);
	cJSON *doc = run_json(x);
	cJSON_AddItemToObject(doc, "steps", steps_json(x));
	rc = run_extras(u, doc, x);
	cairn_run_free(x);
	if (rc) {
		cJSON_Delete(doc);
		return reply_client(r, u->c, rc);
	}
	reply_json(r, 200, doc);
}

static void api_run_action(ui *u, const http_request *q, http_reply *r, const char *action)
{
	static const char *const allowed[] = {"id", "name", NULL};
	int64_t id;
	if (check_params(q, r, allowed) || run_id_param(q, r, &id))
		return;
	int rc;
	if (strcmp(action, "signal") == 0) {
		const char *name = param(q, "name");
		if (!name)
			return reply_error(r, 400, "name", "name: the signal's name is required");
		if (q->body_too_big)
			return reply_error(r, 413, "body",
			                   "body: the payload is larger than 64KiB");
		/* The body's length is known here, not to the client: a NUL
		 * byte inside it would cut the payload short. */
		char err[PARSE_ERR_MAX];
		if (q->body_len && parse_check_json_n("body", q->body, q->body_len,
		                                      http_body_max(q->path), err) < 0)
			return reply_error(r, 400, "body", err);
		rc = cairn_signal(u->c, id, name, q->body_len ? q->body : NULL);
	} else {
		rc = action[0] == 'c' ? cairn_cancel(u->c, id) : cairn_retry(u->c, id);
	}
	if (rc)
		return reply_client(r, u->c, rc);
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "id", (double)id);
	cJSON_AddStringToObject(o, "done", action);
	reply_json(r, 200, o);
}

static void api_cancel(ui *u, const http_request *q, http_reply *r)
{
	api_run_action(u, q, r, "cancel");
}

static void api_retry(ui *u, const http_request *q, http_reply *r)
{
	api_run_action(u, q, r, "retry");
}

static void api_signal(ui *u, const http_request *q, http_reply *r)
{
	api_run_action(u, q, r, "signal");
}

/* -------------------------------------------------------------- the fleet */

static int fleet_runners(ui *u, cJSON *doc)
{
	cairn_runner_info *v;
	size_t n;
	int rc = cairn_runner_list(u->c, RUNNER_TTL, &v, &n);
	if (rc)
		return rc;
	cJSON *a = cJSON_AddArrayToObject(doc, "runners");
	for (size_t i = 0; i < n; i++) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "id", (double)v[i].id);
		cJSON_AddStringToObject(o, "name", v[i].name);
		cJSON_AddStringToObject(o, "address", v[i].address);
		cJSON_AddStringToObject(o, "version", v[i].version);
		cJSON_AddStringToObject(o, "groups", v[i].groups);
		cJSON_AddNumberToObject(o, "weight", v[i].weight);
		cJSON_AddBoolToObject(o, "healthy", v[i].healthy);
		cJSON_AddBoolToObject(o, "live", v[i].live);
		cJSON_AddNumberToObject(o, "heartbeat_age_ms", (double)v[i].heartbeat_age_ms);
		cJSON_AddNumberToObject(o, "started_at", (double)v[i].started_unix_ms);
		cJSON_AddNumberToObject(o, "shards", v[i].shards);
		cJSON_AddStringToObject(o, "runtimes", v[i].runtimes);
		cJSON_AddItemToArray(a, o);
	}
	cairn_runner_list_free(v, n);
	return CAIRN_OK;
}

/* ------------------------------------------------------------ workflows */

/* workflows: what `cairn workflows --json` shows, one entry per (workflow,
 * group), with times as Unix ms. */
static void api_workflows(ui *u, const http_request *q, http_reply *r)
{
	static const char *const allowed[] = {NULL};
	if (check_params(q, r, allowed))
		return;
	cairn_workflow_info *v;
	size_t n;
	int rc = cairn_workflow_list(u->c, RUNNER_TTL, &v, &n);
	if (rc)
		return reply_client(r, u->c, rc);
	cJSON *doc = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(doc, "workflows");
	for (size_t i = 0; i < n; i++) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "workflow", v[i].workflow);
		cJSON_AddStringToObject(o, "group", v[i].group);
		if (v[i].runtime)
			cJSON_AddStringToObject(o, "runtime", v[i].runtime);
		else
			cJSON_AddNullToObject(o, "runtime");
		cJSON_AddBoolToObject(o, "served", v[i].served);
		cJSON *rs = cJSON_AddArrayToObject(o, "runners");
		for (size_t k = 0; k < v[i].nrunners; k++) {
			cJSON *x = cJSON_CreateObject();
			cJSON_AddNumberToObject(x, "id", (double)v[i].runners[k].id);
			cJSON_AddStringToObject(x, "name", v[i].runners[k].name);
			cJSON_AddStringToObject(x, "runtime", v[i].runners[k].runtime);
			cJSON_AddItemToArray(rs, x);
		}
		cJSON_AddNumberToObject(o, "group_live_runners", v[i].group_live_runners);
		cJSON_AddNumberToObject(o, "last_seen", (double)v[i].last_seen_unix_ms);
		cJSON_AddNumberToObject(o, "last_seen_age_ms", (double)v[i].last_seen_age_ms);
		cJSON_AddNumberToObject(o, "waiting", (double)v[i].waiting);
		cJSON_AddItemToArray(a, o);
	}
	cairn_workflow_list_free(v, n);
	reply_json(r, 200, doc);
}

static int moved_later(const void *a, const void *b)
{
	const cairn_shard_info *x = *(cairn_shard_info *const *)a,
	                       *y = *(cairn_shard_info *const *)b;
	return (x->acquired_unix_ms < y->acquired_unix_ms) -
	       (x->acquired_unix_ms > y->acquired_unix_ms);
}

/* shards: {group: [[shard, owner, epoch], ...]}; moves: the latest
 * acquisitions (each one a rebalance's or a restart's doing). */
static int fleet_shards(ui *u, cJSON *doc)
{
	cairn_shard_info *v;
	size_t n;
	int rc = cairn_shard_list(u->c, NULL, &v, &n);
	if (rc)
		return rc;
	cJSON *g = cJSON_AddObjectToObject(doc, "shards"), *cur = NULL;
	cairn_shard_info **order = n ? malloc(n * sizeof *order) : NULL;
	for (size_t i = 0; i < n; i++) {
		if (!cur || strcmp(v[i].group, v[i - 1].group) != 0)
			cur = cJSON_AddArrayToObject(g, v[i].group);
		cJSON *row = cJSON_CreateArray();
		cJSON_AddItemToArray(row, cJSON_CreateNumber(v[i].shard));
		cJSON_AddItemToArray(row, cJSON_CreateNumber((double)v[i].owner));
		cJSON_AddItemToArray(row, cJSON_CreateNumber((double)v[i].epoch));
		cJSON_AddItemToArray(cur, row);
		if (order)
			order[i] = &v[i];
	}
	cJSON *m = cJSON_AddArrayToObject(doc, "moves");
	if (order) {
		qsort(order, n, sizeof *order, moved_later);
		for (size_t i = 0; i < n && i < RECENT_MOVES && order[i]->acquired_unix_ms; i++) {
			cJSON *o = cJSON_CreateObject();
			cJSON_AddStringToObject(o, "group", order[i]->group);
			cJSON_AddNumberToObject(o, "shard", order[i]->shard);
			cJSON_AddNumberToObject(o, "owner", (double)order[i]->owner);
			cJSON_AddNumberToObject(o, "epoch", (double)order[i]->epoch);
			cJSON_AddNumberToObject(o, "acquired_at",
			                        (double)order[i]->acquired_unix_ms);
			cJSON_AddItemToArray(m, o);
		}
	}
	free(order);
	cairn_shard_list_free(v, n);
	return CAIRN_OK;
}

static int fleet_rest(ui *u, cJSON *doc)
{
	cairn_singleton_info *s;
	cairn_schedule_info *sc;
	size_t n;
	int rc = cairn_singleton_list(u->c, &s, &n);
	if (rc)
		return rc;
	cJSON *a = cJSON_AddArrayToObject(doc, "singletons");
	for (size_t i = 0; i < n; i++) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "name", s[i].name);
		cJSON_AddNumberToObject(o, "shard", s[i].shard);
		cJSON_AddNumberToObject(o, "owner", (double)s[i].owner);
		if (s[i].owner_name)
			cJSON_AddStringToObject(o, "owner_name", s[i].owner_name);
		cJSON_AddItemToArray(a, o);
	}
	cairn_singleton_list_free(s, n);
	if ((rc = cairn_schedule_list(u->c, &sc, &n)))
		return rc;
	a = cJSON_AddArrayToObject(doc, "schedules");
	for (size_t i = 0; i < n; i++) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "name", sc[i].name);
		cJSON_AddStringToObject(o, "cron", sc[i].cron);
		cJSON_AddStringToObject(o, "tz", sc[i].tz);
		cJSON_AddStringToObject(o, "workflow", sc[i].workflow);
		cJSON_AddBoolToObject(o, "paused", sc[i].paused);
		cJSON_AddNumberToObject(o, "next_at", (double)sc[i].next_unix_ms);
		cJSON_AddNumberToObject(o, "last_at", (double)sc[i].last_unix_ms);
		cJSON_AddNumberToObject(o, "last_run_id", (double)sc[i].last_run_id);
		cJSON_AddNumberToObject(o, "fires", (double)sc[i].fires);
		cJSON_AddItemToArray(a, o);
	}
	cairn_schedule_list_free(sc, n);
	return CAIRN_OK;
}

static void api_fleet(ui *u, const http_request *q, http_reply *r)
{
	static const char *const allowed[] = {NULL};
	if (check_params(q, r, allowed))
		return;
	cJSON *doc = cJSON_CreateObject();
	int rc = fleet_runners(u, doc);
	if (!rc)
		rc = fleet_shards(u, doc);
	if (!rc)
		rc = fleet_rest(u, doc);
	if (rc) {
		cJSON_Delete(doc);
		return reply_client(r, u->c, rc);
	}
	reply_json(r, 200, doc);
}

static void api_stats(ui *u, const http_request *q, http_reply *r)
{
	static const char *const allowed[] = {NULL};
	cairn_run_stats s;
	if (check_params(q, r, allowed))
		return;
	int rc = cairn_run_stats_get(u->c, &s);
	if (rc)
		return reply_client(r, u->c, rc);
	cJSON *doc = cJSON_CreateObject(), *m = cJSON_AddArrayToObject(doc, "minutes");
	for (int i = 0; i < CAIRN_STATS_MINUTES; i++) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "at", (double)s.minute_unix_ms[i]);
		cJSON_AddNumberToObject(o, "completed", (double)s.completed[i]);
		cJSON_AddNumberToObject(o, "failed", (double)s.failed[i]);
		cJSON_AddItemToArray(m, o);
	}
	cJSON *l = cJSON_AddObjectToObject(doc, "latency_ms");
	cJSON_AddNumberToObject(l, "p50", s.latency_p50_ms);
	cJSON_AddNumberToObject(l, "p90", s.latency_p90_ms);
	cJSON_AddNumberToObject(l, "p99", s.latency_p99_ms);
	cJSON_AddNumberToObject(l, "samples", (double)s.latency_samples);
	cJSON_AddNumberToObject(doc, "queue_depth", (double)s.queue_depth);
	reply_json(r, 200, doc);
}

/* --------------------------------------------------------------- routing */

/* 1 when the request carries the token (bearer, or the login cookie). */
static int authorized(const ui *u, const http_request *q)
{
	if (!u->token)
		return 1;
	size_t tl = strlen(u->token);
	const char *a = q->authorization;
	if (a && strncasecmp(a, "Bearer ", 7) == 0 && strlen(a + 7) == tl &&
	    sodium_memcmp(a + 7, u->token, tl) == 0)
		return 1;
	size_t vl;
	const char *c = form_cookie(http_header(q, "Cookie"), COOKIE, &vl);
	return c && vl == tl && sodium_memcmp(c, u->token, tl) == 0;
}

/* The cross-site defence of a POST: NULL, or why it is refused. */
static const char *cross_site(const http_request *q)
{
	const char *mark = http_header(q, "X-Cairn-Console");
	if (!mark || strcmp(mark, "1") != 0)
		return "refused: an action needs the header X-Cairn-Console: 1";
	const char *origin = http_header(q, "Origin"), *host = http_header(q, "Host");
	if (origin &&
	    (!host || strncmp(origin, "http://", 7) != 0 || strcmp(origin + 7, host) != 0))
		return "refused: the request comes from another origin";
	return NULL;
}

static void serve_asset(http_reply *r, const char *name)
{
	static const struct {
		const char *ext, *type;
	} types[] = {{".html", "text/html; charset=utf-8"},
	             {".js", "text/javascript; charset=utf-8"},
	             {".css", "text/css; charset=utf-8"}};
	for (size_t i = 0; i < cairn_ui_assets_count; i++) {
		if (strcmp(cairn_ui_assets[i].name, name) != 0)
			continue;
		const char *dot = strrchr(name, '.');
		r->status = 200;
		for (size_t k = 0; dot && k < sizeof types / sizeof types[0]; k++)
			if (strcmp(dot, types[k].ext) == 0)
				r->type = types[k].type;
		buf_append(&r->body, (const char *)cairn_ui_assets[i].data, cairn_ui_assets[i].len);
		return;
	}
	r->status = 404;
	buf_puts(&r->body, "not found\n");
}

/* POST /login with token=T (a form): sets the cookie when T is right. */
static void login(const ui *u, const http_request *q, http_reply *r)
{
	char tok[512];
	int n = form_value(q->body, "token", tok, sizeof tok);
	if (!u->token || n < 0 || (size_t)n != strlen(u->token) ||
	    sodium_memcmp(tok, u->token, (size_t)n) != 0) {
		r->status = 401;
		buf_puts(&r->body, "wrong token\n");
		return;
	}
	buf_printf(&r->headers, "Set-Cookie: " COOKIE "=%s; Path=/; HttpOnly; SameSite=Strict\n",
	           u->token);
	buf_puts(&r->headers, "Location: /\n");
	r->status = 303;
}

static void handle_locked(ui *u, const http_request *q, http_reply *r);

/* One request at a time: they share the console's one client. */
static void handle(void *arg, const http_request *q, http_reply *r)
{
	ui *u = arg;
	pthread_mutex_lock(&u->mu);
	handle_locked(u, q, r);
	pthread_mutex_unlock(&u->mu);
}

static void handle_locked(ui *u, const http_request *q, http_reply *r)
{
	int post = strcmp(q->method, "POST") == 0, get = strcmp(q->method, "GET") == 0;
	buf_puts(
	    &r->headers,
	    "Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; "
	    "img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; "
	    "frame-ancestors 'none'\n"
	    "X-Content-Type-Options: nosniff\nX-Frame-Options: DENY\n"
	    "Referrer-Policy: no-referrer\n");
	const char *path = q->path;
	int api = strncmp(path, "/api/", 5) == 0;
	if (strcmp(path, "/login") == 0 && u->token) {
		if (post)
			return login(u, q, r);
		return serve_asset(r, "login.html");
	}
	if (!authorized(u, q)) {
		if (api)
			return reply_error(
			    r, 401, NULL,
			    "a token is required: Authorization: Bearer TOKEN, or log in");
		r->status = 303;
		buf_puts(&r->headers, "Location: /login\n");
		return;
	}
	if (!get && !post) {
		r->status = 405;
		r->allow = "GET, POST";
		return;
	}
	const char *why = post ? cross_site(q) : NULL;
	if (why)
		return reply_error(r, 403, NULL, why);
	static const struct {
		const char *path;
		int post;
		void (*fn)(ui *, const http_request *, http_reply *);
	} routes[] = {{"/api/runs", 0, api_runs},           {"/api/runs/counts", 0, api_counts},
	              {"/api/runs/bulk", 1, api_bulk},      {"/api/run", 0, api_run},
	              {"/api/run/cancel", 1, api_cancel},   {"/api/run/retry", 1, api_retry},
	              {"/api/run/signal", 1, api_signal},   {"/api/fleet", 0, api_fleet},
	              {"/api/workflows", 0, api_workflows}, {"/api/stats", 0, api_stats}};
	for (size_t i = 0; api && i < sizeof routes / sizeof routes[0]; i++) {
		if (strcmp(routes[i].path, path) != 0)
			continue;
		if (routes[i].post != post) {
			r->allow = routes[i].post ? "POST" : "GET";
			return reply_error(r, 405, NULL,
			                   routes[i].post ? "use POST for an action" : "use GET");
		}
		return routes[i].fn(u, q, r);
	}
	if (api)
		return reply_error(r, 404, NULL, "no such endpoint (see docs/console.md)");
	if (post)
		return reply_error(r, 405, NULL, "nothing to POST here");
	serve_asset(r, strcmp(path, "/") == 0 ? "index.html" : path + 1);
}

/* ------------------------------------------------------------- command */

static const char HELP[] =
    "usage: cairn ui [--listen HOST:PORT] [--token TOKEN] [--hosts NAMES] [--db URL]\n"
    "\n"
    "Serves the operator console: runs (filters, counts per status, bulk\n"
    "cancel and retry), each run's journal as a timeline with its signals,\n"
    "children and events, the fleet (runners, shard ownership, moves,\n"
    "singletons, schedules) and the last hour's throughput and latency, read\n"
    "straight from the database (no worker needed), with a JSON API under\n"
    "/api/. Runs until SIGINT or SIGTERM.\n"
    "\n"
    "  --listen HOST:PORT  address (default 127.0.0.1:8090; port 0 picks one);\n"
    "                      anything but loopback requires a token\n"
    "  --token TOKEN       required as \"Authorization: Bearer TOKEN\" or through\n"
    "                      the login form (default: $CAIRN_UI_TOKEN)\n"
    "  --hosts NAMES       host names the console answers to, comma-separated, besides\n"
    "                      IP addresses and localhost (default: $CAIRN_UI_HOSTS); a\n"
    "                      request naming another host is refused with 421 (DNS\n"
    "                      rebinding)\n" COMMON_HELP "\n"
    "Encrypted values that do not open show as \"unreadable\" and why: their key\n"
    "is not in CAIRN_ENCRYPTION_KEYS (or CAIRN_ENCRYPTION_KEYS_FILE), or they do\n"
    "not authenticate under it.\n";

const cli_opt UI_OPTS[] = {{"listen", 1}, {"token", 1}, {"hosts", 1},
                           {"db", 1},     {"help", 0},  {NULL, 0}};

int cmd_ui(int argc, char **argv)
{
	cli_args a = {UI_OPTS, {0}, {0}, 0};
	if (cli_parse("ui", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(HELP, stdout), EXIT_OK;
	if (a.npos)
		return cli_error("ui", EXIT_USAGE, "unexpected argument \"%s\"", a.pos[0]);
	const char *listen = cli_has(&a, "listen") ? cli_get(&a, "listen") : "127.0.0.1:8090";
	const char *token = cli_has(&a, "token") ? cli_get(&a, "token") : getenv("CAIRN_UI_TOKEN");
	if (token && !*token)
		token = NULL;
	const char *hosts = cli_has(&a, "hosts") ? cli_get(&a, "hosts") : getenv("CAIRN_UI_HOSTS");
	char perr[PARSE_ERR_MAX];
	if (hosts && parse_check_hosts("--hosts", hosts, perr) < 0)
		return cli_error("ui", EXIT_USAGE, "%s", perr);
	struct sockaddr_storage sa;
	socklen_t salen;
	int wildcard;
	if (parse_listen_addr(listen, &sa, &salen, &wildcard) < 0)
		return cli_error(
		    "ui", EXIT_USAGE,
		    "--listen \"%s\": expected HOST:PORT with an IP address "
		    "(127.0.0.1:8090, [::1]:8090, 0.0.0.0:8090) and a port from 0 to 65535",
		    listen);
	if (!parse_addr_loopback(&sa) && !token)
		return cli_error("ui", EXIT_USAGE,
		                 "--listen \"%s\" is not a loopback address: set --token or "
		                 "CAIRN_UI_TOKEN (or listen on 127.0.0.1)",
		                 listen);
	if (token && (strlen(token) < 16 || strlen(token) > 256 || strpbrk(token, " ;,\"\\\r\n")))
		return cli_error("ui", EXIT_USAGE,
		                 "--token: expected 16 to 256 characters without spaces, quotes, "
		                 "commas, semicolons or backslashes (openssl rand -hex 24)");
	ui u = {.c = NULL, .token = token, .mu = PTHREAD_MUTEX_INITIALIZER};
	int code = cli_open("ui", &a, &u.c);
	if (code)
		return code;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL); /* the server's thread inherits it */
	http_server *srv;
	int port;
	if (http_start(&sa, hosts, handle, &u, &srv, &port) < 0) {
		cairn_client_free(u.c);
		return cli_error("ui", EXIT_RUNTIME, "cannot listen on \"%s\"", listen);
	}
	char host[64];
	const char *colon = strrchr(listen, ':');
	snprintf(host, sizeof host, "%.*s", (int)(colon - listen), listen);
	printf("cairn ui: listening on http://%s:%d/\n", !host[0] || wildcard ? "0.0.0.0" : host,
	       port);
	fflush(stdout);
	int sig;
	sigwait(&set, &sig);
	http_stop(srv);
	cairn_client_free(u.c);
	return EXIT_OK;
}
