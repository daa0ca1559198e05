/*
 * http.c - the worker's face to operators, served by libmicrohttpd on its own
 * internal polling thread: /healthz, /readyz, /metrics (Prometheus text
 * format 0.0.4), /status (JSON). Only GET and HEAD; limits on connections,
 * per-IP connections, memory per connection and idle time keep a slow or
 * hostile client from stalling it. Reads worker state under w->mu; never
 * touches the database.
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <stdio.h>
#include <string.h>

#include "worker.h"

typedef struct reply {
	unsigned status;
	const char *type;
	buf body;
} reply;

/* A loop is stale after three intervals plus a second of grace. */
static const char *stale_loop(cairn_worker *w)
{
	int64_t now = worker_now_ms();
	for (int i = 0; i < w->nloops; i++) {
		int64_t stamp = atomic_load(&w->loops[i].stamp_ms);
		if (stamp && now - stamp > 3 * w->loops[i].interval_ms + 1000)
			return w->loops[i].name;
	}
	return NULL;
}

static void healthz(cairn_worker *w, reply *r)
{
	const char *stale = stale_loop(w);
	r->status = stale ? 503 : 200;
	if (stale)
		buf_printf(&r->body, "unhealthy: loop %s is stuck\n", stale);
	else
		buf_puts(&r->body, "ok\n");
}

static void readyz(cairn_worker *w, reply *r)
{
	pthread_mutex_lock(&w->mu);
	int ready = w->db_connected && !w->not_ready[0] && !w->stopping;
	if (ready)
		buf_puts(&r->body, "ready\n");
	else
		buf_printf(&r->body, "not ready: %s\n",
		           w->not_ready[0] ? w->not_ready : "stopping");
	pthread_mutex_unlock(&w->mu);
	r->status = ready ? 200 : 503;
}

static void metric(buf *b, const char *name, const char *type, const char *help, const char *labels,
                   double value)
{
	buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s%s %.17g\n", name, help, name, type, name,
	           labels ? labels : "", value);
}

static void metrics(cairn_worker *w, reply *r)
{
	buf *b = &r->body;
	const worker_metrics *m = &w->m;
	pthread_mutex_lock(&w->mu);
	int connected = w->db_connected;
	pthread_mutex_unlock(&w->mu);
	char labels[160];
	snprintf(labels, sizeof labels, "{version=\"%s\"}", CAIRN_VERSION);
	metric(b, "cairn_build_info", "gauge", "Build information; the value is always 1.", labels,
	       1);
	metric(b, "cairn_uptime_seconds", "gauge", "Seconds since this worker started.", NULL,
	       (double)(worker_now_ms() - w->start_mono_ms) / 1000.0);
	metric(b, "cairn_db_connected", "gauge", "1 while the database connection is up.", NULL,
	       connected);
	metric(b, "cairn_db_reconnects_total", "counter", "Database reconnections after a loss.",
	       NULL, (double)atomic_load(&m->db_reconnects));
	metric(b, "cairn_shards_owned", "gauge", "Shards this worker holds a lease on.", NULL,
	       atomic_load(&m->shards_owned));
	metric(b, "cairn_rebalances_total", "counter", "Rebalance rounds that changed ownership.",
	       NULL, (double)atomic_load(&m->rebalances));
	metric(b, "cairn_lease_losses_total", "counter",
	       "Shard leases lost without releasing them.", NULL,
	       (double)atomic_load(&m->lease_losses));
	metric(b, "cairn_detachments_total", "counter", "Times this worker detached from storage.",
	       NULL, (double)atomic_load(&m->detachments));
	metric(b, "cairn_singleton_restarts_total", "counter",
	       "Singleton restarts after a failure.", NULL,
	       (double)atomic_load(&m->singleton_restarts));
	metric(b, "cairn_health_checks_total", "counter",
	       "Rounds of the runner health checker run here.", NULL,
	       (double)atomic_load(&m->health_checks));
	metric(b, "cairn_runs_started_total", "counter", "Run executions started.", NULL,
	       (double)atomic_load(&m->runs_started));
	metric(b, "cairn_runs_completed_total", "counter", "Runs that completed.", NULL,
	       (double)atomic_load(&m->runs_completed));
	metric(b, "cairn_runs_failed_total", "counter", "Runs that failed for good.", NULL,
	       (double)atomic_load(&m->runs_failed));
	metric(b, "cairn_queue_depth", "gauge", "Runs dispatched and waiting for an executor.",
	       NULL, atomic_load(&m->queue_depth));
	buf_puts(b, "# HELP cairn_step_duration_seconds Duration of executed workflow steps.\n"
	            "# TYPE cairn_step_duration_seconds histogram\n");
	for (int i = 0; i < STEP_BUCKETS; i++)
		buf_printf(b, "cairn_step_duration_seconds_bucket{le=\"%g\"} %" PRIu64 "\n",
		           WORKER_STEP_BOUNDS_S[i], atomic_load(&m->step_buckets[i]));
	uint64_t count = atomic_load(&m->step_count);
	buf_printf(b, "cairn_step_duration_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n", count);
	buf_printf(b, "cairn_step_duration_seconds_sum %.6f\n",
	           (double)atomic_load(&m->step_sum_us) / 1e6);
	buf_printf(b, "cairn_step_duration_seconds_count %" PRIu64 "\n", count);
	r->status = 200;
	r->type = "text/plain; version=0.0.4; charset=utf-8";
}

static void status(cairn_worker *w, reply *r)
{
	cJSON *o = cJSON_CreateObject();
	pthread_mutex_lock(&w->mu);
	cJSON *runner = cJSON_AddObjectToObject(o, "runner");
	if (w->runner_id)
		cJSON_AddNumberToObject(runner, "id", (double)w->runner_id);
	else
		cJSON_AddNullToObject(runner, "id");
	cJSON_AddStringToObject(runner, "name", w->name);
	cJSON_AddStringToObject(runner, "address", w->cfg.advertise_addr);
	cJSON_AddStringToObject(o, "version", CAIRN_VERSION);
	cJSON_AddStringToObject(o, "state", w->state);
	cJSON_AddBoolToObject(o, "ready", w->db_connected && !w->not_ready[0] && !w->stopping);
	if (w->not_ready[0])
		cJSON_AddStringToObject(o, "not_ready_reason", w->not_ready);
	cJSON_AddBoolToObject(o, "db_connected", w->db_connected);
	cJSON_AddNumberToObject(o, "uptime_seconds",
	                        (double)(worker_now_ms() - w->start_mono_ms) / 1000.0);
	cJSON_AddNumberToObject(o, "shards_per_group", w->shards);
	pthread_mutex_unlock(&w->mu);
	/* Configuration without secrets: the database URL is masked. */
	cJSON *cfg = cJSON_AddObjectToObject(o, "config");
	buf text = BUF_INIT;
	config_describe(&w->cfg, &text);
	char *save = NULL;
	for (char *line = strtok_r(text.data, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '=');
		if (!eq)
			continue;
		*eq = '\0';
		cJSON_AddStringToObject(cfg, line, eq + 1);
	}
	buf_free(&text);
	/* Owned shards with their epochs, one object per group. */
	cJSON *shards = cJSON_AddArrayToObject(o, "shards");
	for (int g = 0; g < w->nown; g++) {
		cJSON *grp = cJSON_CreateObject();
		cJSON_AddStringToObject(grp, "group", w->own[g].name);
		cJSON *list = cJSON_AddArrayToObject(grp, "owned");
		for (int s = 0; s < w->shards; s++) {
			int64_t e = worker_epoch(w, g, s);
			if (!e)
				continue;
			cJSON *it = cJSON_CreateObject();
			cJSON_AddNumberToObject(it, "shard", s);
			cJSON_AddNumberToObject(it, "epoch", (double)e);
			cJSON_AddItemToArray(list, it);
		}
		cJSON_AddNumberToObject(grp, "count", cJSON_GetArraySize(list));
		cJSON_AddItemToArray(shards, grp);
	}
	buf part = BUF_INIT;
	dispatch_status(w, &part);
	cJSON_AddItemToObject(o, "in_flight", cJSON_Parse(buf_str(&part)));
	buf_reset(&part);
	singletons_status(w, &part);
	cJSON_AddItemToObject(o, "singletons", cJSON_Parse(buf_str(&part)));
	buf_free(&part);
	cJSON *hist = cJSON_AddArrayToObject(o, "rebalances");
	pthread_mutex_lock(&w->mu);
	int first = w->nhistory > REBALANCE_HISTORY ? w->nhistory - REBALANCE_HISTORY : 0;
	for (int i = w->nhistory - 1; i >= first; i--) {
		const rebalance_rec *rec = &w->history[i % REBALANCE_HISTORY];
		cJSON *it = cJSON_CreateObject();
		cJSON_AddNumberToObject(it, "unix_ms", (double)rec->unix_ms);
		cJSON_AddStringToObject(it, "group", rec->group);
		cJSON_AddNumberToObject(it, "acquired", rec->acquired);
		cJSON_AddNumberToObject(it, "released", rec->released);
		cJSON_AddStringToObject(it, "acquired_shards", rec->acquired_shards);
		cJSON_AddStringToObject(it, "released_shards", rec->released_shards);
		cJSON_AddNumberToObject(it, "live_runners", rec->live_runners);
		cJSON_AddStringToObject(it, "why", rec->why);
		cJSON_AddItemToArray(hist, it);
	}
	pthread_mutex_unlock(&w->mu);
	char *s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	if (s) {
		buf_puts(&r->body, s);
		buf_puts(&r->body, "\n");
		cJSON_free(s);
	}
	r->status = 200;
	r->type = "application/json";
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_size, void **con_cls)
{
	cairn_worker *w = cls;
	reply r = {404, "text/plain; charset=utf-8", BUF_INIT};
	int head = strcmp(method, "HEAD") == 0;
	if (!head && strcmp(method, "GET") != 0) {
		r.status = 405;
		buf_printf(&r.body, "method %s not allowed: use GET or HEAD\n", method);
	} else if (strcmp(url, "/healthz") == 0) {
		healthz(w, &r);
	} else if (strcmp(url, "/readyz") == 0) {
		readyz(w, &r);
	} else if (strcmp(url, "/metrics") == 0) {
		metrics(w, &r);
	} else if (strcmp(url, "/status") == 0) {
		status(w, &r);
	} else {
		buf_puts(&r.body, "not found: try /healthz, /readyz, /metrics or /status\n");
	}
	struct MHD_Response *resp = MHD_create_response_from_buffer(
	    r.body.len, r.body.data ? r.body.data : (void *)"", MHD_RESPMEM_MUST_COPY);
	buf_free(&r.body);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", r.type);
	MHD_add_response_header(resp, "Cache-Control", "no-store");
	if (r.status == 405)
		MHD_add_response_header(resp, "Allow", "GET, HEAD");
	enum MHD_Result ret = MHD_queue_response(conn, r.status, resp);
	MHD_destroy_response(resp);
	return ret;
}

int http_start(cairn_worker *w)
{
	w->http = MHD_start_daemon(
	    MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO |
	        (w->cfg.http_sa.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0),
	    0, NULL, NULL, handle, w, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&w->cfg.http_sa,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned)64, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
	    (unsigned)16, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
	    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)64 * 1024, MHD_OPTION_END);
	if (!w->http) {
		buf_reset(&w->err);
		buf_printf(&w->err, "cannot listen on %s (in use, or not an address of this host)",
		           w->cfg.http_addr);
		return -1;
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(w->http, MHD_DAEMON_INFO_BIND_PORT);
	w->http_port = info ? info->port : 0;
	return 0;
}

void http_stop(cairn_worker *w)
{
	if (w->http)
		MHD_stop_daemon(w->http);
	w->http = NULL;
}
