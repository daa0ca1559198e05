/*
 * status.c - the worker's face to operators (DESIGN section 7): /healthz,
 * /readyz, /metrics (Prometheus text format 0.0.4) and /status (JSON),
 * GET and HEAD; the wake relay's POSTs; the signal links; and the /v1 API
 * (api.c). route.c
 * decides which a request asks for; each page is built from the modules'
 * read APIs (no module's fields are read directly) and the worker's state
 * through status_env (status.h), and never touches the database.
 */
#include "status.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "client.h"
#include "clock.h"
#include "link.h"
#include "route.h"

static void healthz(const status_env *e, http_reply *r)
{
	const char *stale = watchdog_stale(e->dog);
	r->status = stale ? 503 : 200;
	if (stale)
		buf_printf(&r->body, "unhealthy: loop %s is stuck\n", stale);
	else
		buf_puts(&r->body, "ok\n");
}

/* Whether the worker is ready; why not in reason. Holds e->mu. */
static int ready_locked(const status_env *e, const status_view *v, const char **reason)
{
	if (v->not_ready[0])
		*reason = v->not_ready;
	else if (v->stopping)
		*reason = "stopping";
	else if (!v->db_connected)
		*reason = "database not connected";
	else if (!dispatch_claiming(e->dispatch))
		*reason = "the poller has not claimed yet";
	else
		return 1;
	return 0;
}

int status_ready(const status_env *e)
{
	const char *why;
	status_view v;
	pthread_mutex_lock(e->mu);
	e->view(e->arg, &v);
	int ready = ready_locked(e, &v, &why);
	pthread_mutex_unlock(e->mu);
	return ready;
}

static void readyz(const status_env *e, http_reply *r)
{
	const char *why;
	status_view v;
	pthread_mutex_lock(e->mu);
	e->view(e->arg, &v);
	int ready = ready_locked(e, &v, &why);
	if (ready)
		buf_puts(&r->body, "ready\n");
	else
		buf_printf(&r->body, "not ready: %s\n", why);
	pthread_mutex_unlock(e->mu);
	r->status = ready ? 200 : 503;
}

static void metric(buf *b, const char *name, const char *type, const char *help, const char *labels,
                   double value)
{
	metrics_sample(b, name, type, help, labels, value);
}

static void metrics_page(const status_env *e, http_reply *r)
{
	buf *b = &r->body;
	const metrics *m = e->m;
	status_view v;
	const char *why;
	pthread_mutex_lock(e->mu);
	e->view(e->arg, &v);
	int connected = v.db_connected, ready = ready_locked(e, &v, &why);
	pthread_mutex_unlock(e->mu);
	char labels[160];
	snprintf(labels, sizeof labels, "{version=\"%s\"}", CAIRN_VERSION);
	metric(b, "cairn_build_info", "gauge", "Build information; the value is always 1.", labels,
	       1);
	metric(b, "cairn_uptime_seconds", "gauge", "Seconds since this worker started.", NULL,
	       (double)(clock_mono_ms() - e->start_mono_ms) / 1000.0);
	metric(b, "cairn_db_connected", "gauge", "1 while the database connection is up.", NULL,
	       connected);
	metric(b, "cairn_ready", "gauge", "1 while /readyz answers 200 (see its reason when 0).",
	       NULL, ready);
	metric(b, "cairn_db_reconnects_total", "counter", "Database reconnections after a loss.",
	       NULL, (double)atomic_load(&m->db_reconnects));
	metric(b, "cairn_shards_owned", "gauge", "Shards this worker holds a lease on.", NULL,
	       shardmap_owned(e->map));
	metric(b, "cairn_rebalances_total", "counter", "Rebalance rounds that changed ownership.",
	       NULL, (double)atomic_load(&m->rebalances));
	metric(b, "cairn_members_told_total", "counter",
	       "Membership changes the wake relay told this worker of (each hastens a rebalance).",
	       NULL, (double)atomic_load(&m->members_told));
	metric(b, "cairn_poller_limits", "gauge",
	       "1 while the poller claims with limits (cairn limit): some exist, so each claim "
	       "applies them; 0 while none exist and claims admit every due run.",
	       NULL, atomic_load(&m->claim_limits));
	metric(b, "cairn_poller_busy_total", "counter",
	       "Times the poller went busy: it claims back to back and writers do not wake it.",
	       NULL, (double)atomic_load(&m->poller_busy));
	metric(b, "cairn_poller_idle_deferred_total", "counter",
	       "Times the busy poller could not go idle yet: a writer that may have read it busy "
	       "had not committed, so it claimed again a moment later.",
	       NULL, (double)atomic_load(&m->idle_deferred));
	buf_printf(b,
	           "# HELP cairn_claims_total Claims the poller made: of all that is due in its "
	           "shards, or of the runs a wake-up named.\n# TYPE cairn_claims_total counter\n"
	           "cairn_claims_total{of=\"shards\"} %" PRIu64 "\n"
	           "cairn_claims_total{of=\"runs\"} %" PRIu64 "\n",
	           (uint64_t)atomic_load(&m->claims_all), (uint64_t)atomic_load(&m->claims_runs));
	metric(b, "cairn_claims_new_run_total", "counter",
	       "Of the claims of runs a wake-up named, those of a new run (pending, never "
	       "executed, nothing journaled or waiting for it), made with one short statement.",
	       NULL, (double)atomic_load(&m->claims_new_run));
	metric(b, "cairn_runs_pushed_total", "counter",
	       "Runs an enqueue handed to this idle worker from inside its own transaction: read "
	       "and started with no claim of their own.",
	       NULL, (double)atomic_load(&m->runs_pushed));
	metric(b, "cairn_runs_pushed_stale_total", "counter",
	       "Notifications of hand-overs that no longer stood when read (a claim had taken "
	       "the run, or they were sent again or forged): their runs are claimed by id.",
	       NULL, (double)atomic_load(&m->runs_pushed_stale));
	metric(b, "cairn_claims_given_back_total", "counter",
	       "Runs a claim took that did not execute here, mostly of a shard being handed over: "
	       "the execution the claim counted and the slot it took were given back.",
	       NULL, (double)atomic_load(&m->claims_given_back));
	metric(b, "cairn_flow_held_back_total", "counter",
	       "Due runs a claim left for a limit (cairn limit): no free slot of their key, or "
	       "their rate used up.",
	       NULL, (double)atomic_load(&m->flow_held_back));
	metric(b, "cairn_flow_released_total", "counter",
	       "Held runs let go because their concurrency key had a free slot.", NULL,
	       (double)atomic_load(&m->flow_released));
	metric(b, "cairn_lease_losses_total", "counter",
	       "Shard leases lost without releasing them.", NULL,
	       (double)atomic_load(&m->lease_losses));
	metric(b, "cairn_shards_held_by_outsiders", "gauge",
	       "Shards this worker wants whose locks are held by a backend that is not a live "
	       "runner's lease backend and that its role may not terminate (0 when none).",
	       NULL, atomic_load(&m->shards_held_by_outsiders));
	metric(b, "cairn_outsiders_terminated_total", "counter",
	       "Backends that held shards this worker wanted, were not a live runner's lease "
	       "backend, and that it terminated.",
	       NULL, (double)atomic_load(&m->outsiders_terminated));
	metric(b, "cairn_detachments_total", "counter", "Times this worker detached from storage.",
	       NULL, (double)atomic_load(&m->detachments));
	metric(b, "cairn_singleton_restarts_total", "counter",
	       "Singleton restarts after a failure.", NULL,
	       (double)atomic_load(&m->singleton_restarts));
	metric(b, "cairn_health_checks_total", "counter",
	       "Rounds of the runner health checker run here.", NULL,
	       (double)atomic_load(&m->health_checks));
	metric(b, "cairn_runs_continued_total", "counter",
	       "Runs that ended by continuing as new (cairn_continue_as_new).", NULL,
	       (double)atomic_load(&m->runs_continued));
	metric(b, "cairn_journal_cache_hits_total", "counter",
	       "Claims that loaded only the journal entries after those this worker had cached.",
	       NULL, (double)atomic_load(&m->journal_cache_hits));
	metric(b, "cairn_journal_loads_total", "counter",
	       "Claims that loaded a run's whole journal (none of it cached here).", NULL,
	       (double)atomic_load(&m->journal_loads));
	metric(b, "cairn_journal_cache_runs", "gauge",
	       "Runs whose journals this worker keeps (CAIRN_JOURNAL_CACHE).", NULL,
	       atomic_load(&m->journal_cache_runs));
	metric(b, "cairn_journal_cache_bytes", "gauge",
	       "Bytes of memory the journals this worker keeps hold (CAIRN_JOURNAL_CACHE).", NULL,
	       (double)atomic_load(&m->journal_cache_bytes));
	metric(b, "cairn_runs_locked_total", "counter",
	       "Executions left alone: the run is encrypted with a key this worker lacks.", NULL,
	       (double)atomic_load(&m->runs_locked));
	int64_t longest;
	int overdue;
	dispatch_steps(e->dispatch, &longest, &overdue);
	metric(b, "cairn_steps_timed_out_total", "counter",
	       "Step attempts that ran past their timeout (their results discarded).", NULL,
	       (double)atomic_load(&m->steps_timed_out));
	metric(b, "cairn_replayed_entries_total", "counter",
	       "Journal entries executions replayed (returned from the journal, not run again).",
	       NULL, (double)atomic_load(&m->replayed_entries));
	metric(b, "cairn_schedule_fires_total", "counter",
	       "Runs this worker's scheduler started for schedules.", NULL,
	       (double)atomic_load(&m->schedule_fires));
	metric(b, "cairn_steps_overdue", "gauge",
	       "Steps running now past their timeout (C cannot stop them: see /status).", NULL,
	       overdue);
	metric(b, "cairn_step_longest_running_seconds", "gauge",
	       "How long the longest step running now has run.", NULL, longest / 1000.0);
	cJSON *slots = cJSON_CreateObject();
	char lab[256];
	dispatch_flow(e->dispatch, slots);
	buf_puts(b, "# HELP cairn_flow_slots_in_use Runs this worker executes under a workflow's "
	            "limits (cairn limit).\n# TYPE cairn_flow_slots_in_use gauge\n");
	for (const cJSON *it = slots ? slots->child : NULL; it; it = it->next)
		buf_printf(b, "cairn_flow_slots_in_use{workflow=\"%s\"} %g\n",
		           metrics_label(it->string, lab), it->valuedouble);
	cJSON_Delete(slots);
	metric(b, "cairn_queue_depth", "gauge", "Runs dispatched and waiting for an executor.",
	       NULL, atomic_load(&m->queue_depth));
	metric(b, "cairn_executors_idle", "gauge",
	       "Executors waiting for a run (CAIRN_CONCURRENCY in all).", NULL,
	       dispatch_executors_idle(e->dispatch));
	metrics_family(b, "cairn_otel_spans_dropped_total", "counter",
	               "Spans the OpenTelemetry exporter dropped: its queue was full "
	               "(OTEL_BSP_MAX_QUEUE_SIZE), or their export failed.");
	buf_printf(b, "cairn_otel_spans_dropped_total{reason=\"queue_full\"} %" PRIu64 "\n",
	           atomic_load(&m->otel_spans_dropped_full));
	buf_printf(b, "cairn_otel_spans_dropped_total{reason=\"export_failed\"} %" PRIu64 "\n",
	           atomic_load(&m->otel_spans_dropped_failed));
	metric(b, "cairn_otel_spans_exported_total", "counter",
	       "Spans the OpenTelemetry exporter sent and its collector accepted.", NULL,
	       (double)atomic_load(&m->otel_spans_exported));
	metric(b, "cairn_otel_export_failures_total", "counter",
	       "Tries to export a batch of spans that failed (the collector unreachable, slow or "
	       "refusing), whether or not a later try succeeded.",
	       NULL, (double)atomic_load(&m->otel_export_failures));
	metric(b, "cairn_otel_export_retries_total", "counter",
	       "Exports of a batch of spans tried again after a retryable failure (HTTP 429, "
	       "502, 503, 504, or no answer).",
	       NULL, (double)atomic_load(&m->otel_export_retries));
	metric(b, "cairn_otel_queue_length", "gauge", "Spans waiting for the exporter.", NULL,
	       atomic_load(&m->otel_queue_length));
	metric(b, "cairn_otel_queue_capacity", "gauge",
	       "Spans the exporter's queue holds (OTEL_BSP_MAX_QUEUE_SIZE); 0: tracing is off.",
	       NULL, atomic_load(&m->otel_queue_capacity));
	metrics_render_flows(m, b);
	if (e->backlog)
		backlog_render(e->backlog, b);
	r->status = 200;
	r->type = "text/plain; version=0.0.4; charset=utf-8";
}

/* The configuration without secrets (see config_describe). */
static void add_config(const status_env *e, cJSON *o)
{
	cJSON *cfg = cJSON_AddObjectToObject(o, "config");
	buf text = BUF_INIT;
	pthread_mutex_lock(e->mu); /* the advertised address may be rewritten at start */
	config_describe(e->cfg, &text);
	pthread_mutex_unlock(e->mu);
	char *save = NULL;
	for (char *line = text.data ? strtok_r(text.data, "\n", &save) : NULL; line;
	     line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '=');
		if (!eq)
			continue;
		*eq = '\0';
		cJSON_AddStringToObject(cfg, line, eq + 1);
	}
	buf_free(&text);
}

static void status_page(const status_env *e, http_reply *r)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *runner = cJSON_AddObjectToObject(o, "runner");
	int64_t id = e->lease ? lease_runner_id(e->lease) : 0;
	if (id)
		cJSON_AddNumberToObject(runner, "id", (double)id);
	else
		cJSON_AddNullToObject(runner, "id");
	cJSON_AddStringToObject(runner, "name", e->runner_name);
	cJSON_AddStringToObject(o, "version", CAIRN_VERSION);
	const char *why;
	status_view v;
	pthread_mutex_lock(e->mu);
	e->view(e->arg, &v);
	cJSON_AddStringToObject(runner, "address", e->cfg->advertise_addr);
	cJSON_AddStringToObject(o, "state", v.state);
	cJSON_AddBoolToObject(o, "ready", ready_locked(e, &v, &why));
	if (v.not_ready[0])
		cJSON_AddStringToObject(o, "not_ready_reason", v.not_ready);
	cJSON_AddBoolToObject(o, "db_connected", v.db_connected);
	pthread_mutex_unlock(e->mu);
	cJSON_AddNumberToObject(o, "uptime_seconds",
	                        (double)(clock_mono_ms() - e->start_mono_ms) / 1000.0);
	cJSON_AddNumberToObject(o, "shards_per_group", shardmap_shards(e->map));
	add_config(e, o);
	shardmap_status(e->map, cJSON_AddArrayToObject(o, "shards"));
	dispatch_status(e->dispatch, cJSON_AddArrayToObject(o, "in_flight"));
	cJSON *flow = cJSON_AddObjectToObject(o, "flow");
	dispatch_flow(e->dispatch, cJSON_AddObjectToObject(flow, "slots_in_use"));
	cJSON_AddNumberToObject(flow, "held_back_total",
	                        (double)atomic_load(&e->m->flow_held_back));
	cJSON_AddNumberToObject(flow, "released_total", (double)atomic_load(&e->m->flow_released));
	singletons_status(e->singletons, cJSON_AddArrayToObject(o, "singletons"));
	cJSON *hist = cJSON_AddArrayToObject(o, "rebalances");
	if (e->lease)
		lease_history(e->lease, hist);
	char *s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	if (!s) {
		r->status = 500;
		buf_puts(&r->body, "out of memory\n");
		return;
	}
	buf_puts(&r->body, s);
	buf_puts(&r->body, "\n");
	cJSON_free(s);
	r->status = 200;
	r->type = "application/json";
}

/*
 * POST /wake[/cancel][/RUNS] and /members/FINGERPRINT: the wake relay (the
 * cairn.relay singleton) tells this worker that its shards got work (RUNS:
 * that these runs did, "1,2,3"), that a run of its may have been
 * cancelled, or that the live runners changed. Each only hastens what the
 * worker would do anyway (a claim, a look at cancelled runs, a rebalance),
 * so a stray request costs a query at most.
 */
static void poked(const status_env *e, const route *rt)
{
	if (rt->kind == ROUTE_WAKE)
		dispatch_wake_runs(e->dispatch, rt->cancel, rt->runs, rt->nruns);
	else
		e->members_changed(e->arg, rt->arg);
}

int status_poke(const status_env *e, const char *path)
{
	route rt;
	if (route_poke(path, &rt) < 0)
		return -1;
	poked(e, &rt);
	return 0;
}

/*
 * POST /signal/TOKEN: a signal link (link.h, `cairn signal-link`). The token
 * is the credential: 403 when it is not ours, has expired or names a run
 * that does not exist, 409 when a link used once was used or the run has
 * finished, 413 for a body over HTTP_BODY_MAX, 400 for a body that is not
 * JSON cairn accepts (parse_check_json_n: UTF-8, no NUL byte, no \u0000; an
 * empty one is null); else the signal is written, once, and 202.
 */
static void signal_link(const status_env *e, const http_request *q, const char *token,
                        http_reply *r)
{
	char why[512];
	link_claims c;
	if (strcmp(q->method, "POST") != 0) {
		r->allow = "POST";
		api_error(r, 405, "a signal link takes POST with the signal's JSON payload");
		return;
	}
	if (!e->cfg->signing_key[0]) {
		api_error(r, 404, "signal links are off here: CAIRN_SIGNING_KEY is not set");
		return;
	}
	int rc = link_open(e->cfg->link_key, token, clock_unix_ms() / 1000, &c, why, sizeof why);
	if (rc < 0) {
		api_error(r, 403, why);
		return;
	}
	if (q->body_too_big) {
		snprintf(why, sizeof why, "the body is larger than %d bytes", HTTP_BODY_MAX);
		api_error(r, 413, why);
		return;
	}
	if (q->body_len && api_check_body(q, "signal payload", r) < 0)
		return;
	cairn_client *cl = api_client_take(e->api, why, sizeof why);
	if (!cl) {
		api_error(r, 503, why);
		return;
	}
	rc = client_signal_once(cl, c.run_id, c.signal, q->body_len ? q->body : "null",
	                        c.nonce[0] ? c.nonce : NULL);
	snprintf(why, sizeof why, "%s", cairn_client_errmsg(cl));
	api_client_give(e->api, cl, rc);
	if (rc == CAIRN_OK) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "run", (double)c.run_id);
		cJSON_AddStringToObject(o, "signal", c.signal);
		cJSON_AddBoolToObject(o, "delivered", 1);
		api_reply(r, 202, o);
	} else {
		/* A run that does not exist is the token's fault: 403, as a bad token. */
		api_error(r, rc == CAIRN_ENOTFOUND ? 403 : api_status_of(rc), why);
	}
}

/* The request as route_request sees it (route.h says which page needs
 * the bearer token), answered. */
void status_handle(void *arg, const http_request *q, http_reply *r)
{
	const status_env *e = arg;
	route rt;
	route_request(q->method, q->path, q->authorization, e->cfg->http_token, &rt);
	switch (rt.kind) {
	case ROUTE_SIGNAL: signal_link(e, q, rt.arg, r); break;
	case ROUTE_API: api_handle(e->api, q, rt.arg, r); break;
	case ROUTE_API_OFF:
		api_error(r, 403, "the HTTP API (/v1) is off: it needs CAIRN_HTTP_TOKEN to be set");
		break;
	case ROUTE_API_UNAUTHORIZED:
		r->bearer = 1;
		api_error(r, 401,
		          "the HTTP API needs \"Authorization: Bearer TOKEN\" with the "
		          "worker's CAIRN_HTTP_TOKEN");
		break;
	case ROUTE_UNAUTHORIZED:
		r->status = 401;
		r->bearer = 1;
		buf_printf(&r->body,
		           "%s needs \"Authorization: Bearer TOKEN\" with the worker's "
		           "CAIRN_HTTP_TOKEN (only /healthz and /readyz do not)\n",
		           q->path);
		break;
	case ROUTE_WAKE:
	case ROUTE_MEMBERS:
		poked(e, &rt);
		r->status = 204;
		break;
	case ROUTE_BAD_POST:
		r->status = 405;
		r->allow = "GET, HEAD";
		buf_printf(&r->body,
		           "method POST not allowed here: POST /wake or /wake/cancel, each "
		           "optionally followed by /RUN,RUN,... (at most %d run ids), or "
		           "/members/FINGERPRINT, or GET the other pages\n",
		           CAIRN_WAKE_RUNS);
		break;
	case ROUTE_BAD_METHOD:
		r->status = 405;
		r->allow = "GET, HEAD, POST";
		buf_printf(&r->body, "method %s not allowed: use GET, HEAD or POST\n", q->method);
		break;
	case ROUTE_HEALTHZ: healthz(e, r); break;
	case ROUTE_READYZ: readyz(e, r); break;
	case ROUTE_METRICS: metrics_page(e, r); break;
	case ROUTE_STATUS: status_page(e, r); break;
	case ROUTE_NOT_FOUND:
		buf_puts(&r->body, "not found: try /healthz, /readyz, /metrics or /status\n");
		break;
	}
}
