/*
 * config.c - one table describes every setting (variable, flag, kind,
 * default, range, help), so parsing, validation, --help and --check-config
 * can never disagree. Durations are stored in milliseconds and sizes in
 * bytes, with the unit in the field name.
 */
#include "config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <curl/curl.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "db.h"
#include "log.h"
#include "netpolicy.h"
#include "parse.h"
#include "trace.h"

enum kind { K_STR, K_INT, K_DUR, K_SIZE, K_LEVEL, K_FORMAT };

typedef struct setting {
	const char *env;
	enum kind kind;
	size_t off;
	const char *def;
	int64_t min, max;
	const char *help;
} setting;

#define OFF(f) offsetof(config, f)
#define DAY    (86400000LL)
static const setting SETTINGS[] = {
    {"DATABASE_URL", K_STR, OFF(database_url), "", 0, 0, "PostgreSQL URL or conninfo (flag --db)"},
    {"CAIRN_HTTP_ADDR", K_STR, OFF(http_addr), "127.0.0.1:8080", 0, 0,
     "health/readiness/metrics/status endpoint, HOST:PORT"},
    {"CAIRN_ADVERTISE_ADDR", K_STR, OFF(advertise_addr), "", 0, 0,
     "HOST:PORT other runners use to reach the endpoint (default: CAIRN_HTTP_ADDR; "
     "required when that listens on every interface)"},
    {"CAIRN_CONCURRENCY", K_INT, OFF(concurrency), "16", 1, 1024, "executor threads"},
    {"CAIRN_SHARDS", K_INT, OFF(shards), "0", 0, 65536,
     "shards per group; 0 uses the count recorded by `cairn migrate`"},
    {"CAIRN_SHARD_GROUPS", K_STR, OFF(groups_text), "default", 0, 0,
     "comma-separated shard groups this worker serves"},
    {"CAIRN_WEIGHT", K_INT, OFF(weight), "100", 1, 10000,
     "share of shards relative to other runners"},
    {"CAIRN_POLL_INTERVAL", K_DUR, OFF(poll_interval_ms), "5s", 10, DAY,
     "look for due messages at least this often (a fallback: notifications and the next due "
     "time wake the poller)"},
    {"CAIRN_POLL_BATCH", K_INT, OFF(poll_batch), "256", 1, 10000, "messages claimed per poll"},
    {"CAIRN_STATEMENT_TIMEOUT", K_DUR, OFF(statement_timeout_ms), "10s", 100, 3600000,
     "claims and commits running longer are cancelled (lock waits after half of it); a "
     "commit unanswered a second longer makes /healthz fail"},
    {"CAIRN_SHUTDOWN_TIMEOUT", K_DUR, OFF(shutdown_timeout_ms), "30s", 0, DAY,
     "how long a drain waits for in-flight work"},
    {"CAIRN_LOG_LEVEL", K_LEVEL, OFF(log_level), "info", 0, 0, "error, warn, info or debug"},
    {"CAIRN_LOG_FORMAT", K_FORMAT, OFF(log_format), "logfmt", 0, 0, "logfmt or json"},
    {"CAIRN_HEARTBEAT_INTERVAL", K_DUR, OFF(heartbeat_interval_ms), "1s", 50, 60000,
     "heartbeat of the two oldest runners, which watch the membership for the others (who "
     "beat every third of CAIRN_RUNNER_TTL); database check interval"},
    {"CAIRN_RUNNER_TTL", K_DUR, OFF(runner_ttl_ms), "10s", 200, DAY,
     "a runner whose heartbeat is older is dead"},
    {"CAIRN_REBALANCE_INTERVAL", K_DUR, OFF(rebalance_interval_ms), "30s", 50, 600000,
     "recompute shard ownership at least this often (a fallback: a membership change "
     "triggers it at once)"},
    {"CAIRN_REBALANCE_DEBOUNCE", K_DUR, OFF(rebalance_debounce_ms), "250ms", 0, 600000,
     "wait after a change before the next rebalance round"},
    {"CAIRN_DETACH_AFTER", K_INT, OFF(detach_after), "3", 1, 100,
     "consecutive failed heartbeats before detaching"},
    {"CAIRN_REATTACH_WINDOW", K_DUR, OFF(reattach_window_ms), "2s", 0, 600000,
     "storage must be healthy this long before re-attaching"},
    {"CAIRN_RETENTION", K_DUR, OFF(retention_ms), "7d", 1000, 3650 * DAY,
     "finished runs older than this are deleted (the janitor looks every minute, or every "
     "CAIRN_RETENTION if shorter)"},
    {"CAIRN_SINGLETON_BACKOFF", K_DUR, OFF(singleton_backoff_ms), "1s", 10, 600000,
     "base of a failed singleton's restart backoff"},
    {"CAIRN_UNKNOWN_WORKFLOW_TIMEOUT", K_DUR, OFF(unknown_workflow_timeout_ms), "1m", 0, 30 * DAY,
     "a run no live worker serves fails after waiting this long from when it was due"},
    {"CAIRN_POISON_AFTER", K_INT, OFF(poison_after), "3", 1, 1000,
     "a run whose worker stopped this many times without progress fails"},
    {"CAIRN_METRICS_MAX_WORKFLOWS", K_INT, OFF(metrics_max_workflows), "100", 0, 10000,
     "workflows counted under their own workflow label in /metrics, in the order they "
     "register; the others share the label workflow=other"},
    {"CAIRN_BACKLOG_INTERVAL", K_DUR, OFF(backlog_interval_ms), "15s", 100, 3600000,
     "how often the cairn.backlog singleton reads the database's backlog for /metrics"},
    {"CAIRN_MAX_PAYLOAD", K_SIZE, OFF(max_payload_bytes), "1MiB", 1, 1 << 30,
     "largest input, output or signal payload"},
    {"CAIRN_JOURNAL_CACHE", K_SIZE, OFF(journal_cache_bytes), "64MiB", 0, (int64_t)1 << 40,
     "memory for the journals of runs this worker executed recently, so that a run that "
     "wakes loads only its new journal entries (at most 256 runs; 0: none)"},
    {"CAIRN_PLUGINS", K_STR, OFF(plugins), "", 0, 0,
     "colon-separated workflow plugins (.so) to load (flag --plugin, repeatable)"},
    {"CAIRN_CODE_VERSION", K_STR, OFF(code_version), "", 0, 0,
     "the version of this worker's workflow code (a deploy's name or commit), recorded on "
     "the runs it starts (`cairn list --code-version`)"},
    {"CAIRN_HTTP_ALLOW", K_STR, OFF(http_allow), "", 0, 0,
     "addresses, CIDRs and host names (.example for every name under it) the http built-in "
     "may reach although they are loopback, private, link-local or otherwise not public; "
     "comma-separated"},
    {"CAIRN_HTTP_HOSTS", K_STR, OFF(http_hosts), "", 0, 0,
     "host names the endpoint answers to, comma-separated, besides IP addresses, localhost "
     "and CAIRN_ADVERTISE_ADDR's host: a request naming any other host is refused with 421 "
     "(DNS rebinding)"},
    {"CAIRN_HTTP_TOKEN", K_STR, OFF(http_token), "", 0, 0,
     "bearer token every page of the endpoint but /healthz and /readyz requires (16 to 256 "
     "of A-Z a-z 0-9 - . _ ~ + / =); the same on every worker of a fleet; unset, the HTTP "
     "API (/v1/) is off"},
    {"CAIRN_SIGNING_KEY", K_STR, OFF(signing_key), "", 0, 0,
     "base64 of 32 random bytes: the key of signal links (`cairn signal-link`); unset, "
     "POST /signal/TOKEN is off"},
    {"CAIRN_ENCRYPTION_KEYS", K_STR, OFF(encryption_keys), "", 0, 0,
     "keys that encrypt payloads at rest: ID=BASE64 of 32 random bytes, comma-separated, the "
     "first for new writes, the others to read older values; environment only"},
    {"CAIRN_ENCRYPTION_KEYS_FILE", K_STR, OFF(encryption_keys_file), "", 0, 0,
     "or a file of such keys, one per line (# comments); not both"},
    {"CAIRN_HTTP_PROXY", K_STR, OFF(http_proxy), "", 0, 0,
     "proxy URL for the http built-in (http://, https://, socks5://...); the proxy environment "
     "variables are ignored"},
    {"OTEL_EXPORTER_OTLP_ENDPOINT", K_STR, OFF(otel_endpoint), "", 0, 0,
     "OpenTelemetry collector (OTLP/HTTP) base URL: spans go to it + /v1/traces; unset (and "
     "no OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), tracing is off"},
    {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", K_STR, OFF(otel_traces_endpoint), "", 0, 0,
     "or the full URL spans are sent to (wins over OTEL_EXPORTER_OTLP_ENDPOINT)"},
    {"OTEL_EXPORTER_OTLP_PROTOCOL", K_STR, OFF(otel_protocol), "http/protobuf", 0, 0,
     "the export's encoding: http/protobuf (the only one spoken)"},
    {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", K_STR, OFF(otel_traces_protocol), "", 0, 0,
     "the same for traces (wins over OTEL_EXPORTER_OTLP_PROTOCOL)"},
    {"OTEL_EXPORTER_OTLP_HEADERS", K_STR, OFF(otel_headers), "", 0, 0,
     "headers sent with every export, key=value comma-separated, values percent-encoded "
     "(api-key=abc); environment only"},
    {"OTEL_EXPORTER_OTLP_TIMEOUT", K_INT, OFF(otel_timeout_ms), "10000", 100, 600000,
     "milliseconds an export may take before it fails (its spans are dropped)"},
    {"OTEL_SERVICE_NAME", K_STR, OFF(otel_service_name), "", 0, 0,
     "the traces' service.name (default: service.name of OTEL_RESOURCE_ATTRIBUTES, else "
     "cairn-worker)"},
    {"OTEL_RESOURCE_ATTRIBUTES", K_STR, OFF(otel_resource_attributes), "", 0, 0,
     "more attributes of the traces' resource, key=value comma-separated, values "
     "percent-encoded (deployment.environment=prod)"},
    {"OTEL_BSP_SCHEDULE_DELAY", K_INT, OFF(otel_delay_ms), "5000", 1, 3600000,
     "milliseconds between two exports of the spans queued (sooner when a batch is full)"},
    {"OTEL_BSP_MAX_QUEUE_SIZE", K_INT, OFF(otel_queue_max), "2048", 1, 1000000,
     "spans waiting for export; past it spans are dropped and counted "
     "(cairn_otel_spans_dropped_total), never waited for"},
    {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", K_INT, OFF(otel_batch_max), "512", 1, 1000000,
     "spans per export, at most OTEL_BSP_MAX_QUEUE_SIZE"},
};
#define NSETTINGS (sizeof SETTINGS / sizeof SETTINGS[0])

static const char *KIND_ACCEPTS[] = {[K_STR] = "text",
                                     [K_INT] = "an integer",
                                     [K_DUR] = "a duration like 500ms, 2s or 1m",
                                     [K_SIZE] = "a size like 512KiB or 1MiB",
                                     [K_LEVEL] = "error, warn, info or debug",
                                     [K_FORMAT] = "logfmt or json"};

/* "CAIRN_POLL_INTERVAL" -> "poll-interval"; DATABASE_URL -> "db". */
static void flag_name(const setting *s, char *out, size_t n)
{
	if (strcmp(s->env, "DATABASE_URL") == 0) {
		snprintf(out, n, "db");
		return;
	}
	if (strcmp(s->env, "CAIRN_PLUGINS") == 0) {
		snprintf(out, n, "plugin");
		return;
	}
	/* OTEL_SERVICE_NAME -> "otel-service-name". */
	const char *p = strncmp(s->env, "OTEL_", 5) == 0 ? s->env : s->env + 6;
	size_t i = 0;
	for (; *p && i + 1 < n; p++)
		out[i++] = *p == '_' ? '-' : (char)tolower((unsigned char)*p);
	out[i] = '\0';
}

static void range_text(const setting *s, char *out, size_t n)
{
	if (s->kind == K_INT)
		snprintf(out, n, "%s from %" PRId64 " to %" PRId64, KIND_ACCEPTS[s->kind], s->min,
		         s->max);
	else if (s->kind == K_DUR)
		snprintf(out, n, "%s, from %" PRId64 "ms to %" PRId64 "ms", KIND_ACCEPTS[s->kind],
		         s->min, s->max);
	else
		snprintf(out, n, "%s", KIND_ACCEPTS[s->kind]);
}

static int set_value(config *cfg, const setting *s, const char *source, const char *v, buf *err)
{
	char perr[PARSE_ERR_MAX], accepts[160];
	void *field = (char *)cfg + s->off;
	int64_t n;
	size_t sz;
	int ok = 0;
	range_text(s, accepts, sizeof accepts);
	switch (s->kind) {
	case K_STR: {
		char **f = field;
		if (s->off == OFF(otel_headers) && strcmp(source, "flag") == 0) {
			buf_reset(err);
			buf_puts(err,
			         "--otel-exporter-otlp-headers is not accepted: every user of the "
			         "machine can read a command line; set OTEL_EXPORTER_OTLP_HEADERS");
			return -CAIRN_EINVAL;
		}
		if (s->off == OFF(encryption_keys) && strcmp(source, "flag") == 0) {
			buf_reset(err);
			buf_puts(err,
			         "--encryption-keys is not accepted: every user of the machine "
			         "can read a command line; set CAIRN_ENCRYPTION_KEYS or "
			         "--encryption-keys-file FILE");
			return -CAIRN_EINVAL;
		}
		if (s->off == OFF(plugins) && *f && **f && strcmp(source, "env") != 0) {
			/* --plugin repeats: append. */
			buf b = BUF_INIT;
			buf_printf(&b, "%s:%s", *f, v);
			free(*f);
			*f = buf_detach(&b);
		} else {
			free(*f);
			*f = strdup(v);
		}
		if (*f)
			return 0;
		buf_reset(err);
		buf_printf(err, "out of memory reading %s", s->env);
		return -CAIRN_ENOMEM;
	}
	case K_INT:
		ok = parse_int(v, s->min, s->max, &n, perr) == 0;
		if (ok)
			*(int *)field = (int)n;
		break;
	case K_DUR:
		ok = parse_duration_ms(v, &n, perr) == 0 && n >= s->min && n <= s->max;
		if (ok)
			*(int64_t *)field = n;
		break;
	case K_SIZE:
		ok = parse_size_bytes(v, &sz, perr) == 0 && sz >= (size_t)s->min &&
		     sz <= (size_t)s->max;
		if (ok)
			*(size_t *)field = sz;
		break;
	case K_LEVEL: ok = log_parse_level(v, field) == 0; break;
	case K_FORMAT: ok = log_parse_format(v, field) == 0; break;
	}
	if (ok)
		return 0;
	char flag[64];
	flag_name(s, flag, sizeof flag);
	buf_reset(err);
	if (strcmp(source, "env") == 0)
		buf_printf(err, "invalid value for %s: \"%s\": expected %s", s->env, v, accepts);
	else
		buf_printf(err, "invalid value for --%s: \"%s\": expected %s", flag, v, accepts);
	return -CAIRN_EINVAL;
}

/* The encryption keys (either setting) into cfg->keys. */
static int check_keys(config *cfg, buf *err)
{
	seal_keys_free(cfg->keys);
	cfg->keys = NULL;
	buf_reset(err);
	return seal_keys_load(cfg->encryption_keys, cfg->encryption_keys_file, &cfg->keys, err) < 0
	           ? -CAIRN_EINVAL
	           : 0;
}

/* CAIRN_HTTP_ALLOW parses, CAIRN_HTTP_HOSTS names hosts, CAIRN_HTTP_TOKEN is a
 * token, and CAIRN_HTTP_PROXY is empty or a proxy URL. */
static int check_http(config *cfg, buf *err)
{
	char why[512];
	netpolicy *p;
	if (netpolicy_parse(cfg->http_allow, &p, why, sizeof why) < 0) {
		buf_reset(err);
		buf_printf(err, "invalid value for CAIRN_HTTP_ALLOW: %s", why);
		return -CAIRN_EINVAL;
	}
	netpolicy_free(p);
	char perr[PARSE_ERR_MAX];
	if (parse_check_hosts("CAIRN_HTTP_HOSTS", cfg->http_hosts, perr) < 0) {
		buf_reset(err);
		buf_puts(err, perr);
		return -CAIRN_EINVAL;
	}
	size_t tn = strlen(cfg->http_token);
	if (tn && (tn < 16 || tn > 256 ||
	           strspn(cfg->http_token, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	                                   "0123456789-._~+/=") != tn)) {
		buf_reset(err);
		buf_printf(
		    err,
		    "invalid value for CAIRN_HTTP_TOKEN (%zu characters, not shown): expected "
		    "16 to 256 of A-Z a-z 0-9 - . _ ~ + / =, for example from `openssl rand "
		    "-base64 32`",
		    tn);
		return -CAIRN_EINVAL;
	}
	if (cfg->signing_key[0] &&
	    link_key_parse(cfg->signing_key, cfg->link_key, why, sizeof why) < 0) {
		buf_reset(err);
		buf_printf(err, "invalid value for CAIRN_SIGNING_KEY: %s", why);
		return -CAIRN_EINVAL;
	}
	static const char *const schemes[] = {"http",    "https",  "socks4",
	                                      "socks4a", "socks5", "socks5h"};
	const char *u = cfg->http_proxy;
	if (!*u)
		return 0;
	CURLU *h = curl_url();
	char *scheme = NULL, *host = NULL;
	int ok = h && curl_url_set(h, CURLUPART_URL, u, 0) == CURLUE_OK &&
	         curl_url_get(h, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
	         curl_url_get(h, CURLUPART_HOST, &host, 0) == CURLUE_OK && *host;
	int known = 0;
	for (size_t i = 0; ok && i < sizeof schemes / sizeof schemes[0]; i++)
		known |= strcmp(scheme, schemes[i]) == 0;
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(h);
	if (ok && known)
		return 0;
	buf_reset(err);
	buf_printf(err,
	           "invalid value for CAIRN_HTTP_PROXY: \"%s\": expected a proxy URL like "
	           "http://proxy:3128 or socks5://proxy:1080 (http, https, socks4, socks4a, "
	           "socks5 or socks5h), or nothing for no proxy",
	           u);
	return -CAIRN_EINVAL;
}

/* The OTEL_* variables: the endpoints are http(s) URLs, the protocol is
 * http/protobuf, headers and attributes are key=value lists, a batch fits
 * in the queue; and the URL spans go to (cfg->otel_traces_url). */
static int check_otel(config *cfg, buf *err)
{
	char why[PARSE_ERR_MAX];
	const char *const urls[] = {"OTEL_EXPORTER_OTLP_ENDPOINT", cfg->otel_endpoint,
	                            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	                            cfg->otel_traces_endpoint};
	const char *const protos[] = {"OTEL_EXPORTER_OTLP_PROTOCOL", cfg->otel_protocol,
	                              "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	                              cfg->otel_traces_protocol};
	buf_reset(err);
	for (int i = 0; i < 4; i += 2)
		if (*urls[i + 1] && trace_check_url(urls[i + 1], why) < 0) {
			buf_printf(err, "invalid value for %s: %s", urls[i], why);
			return -CAIRN_EINVAL;
		}
	for (int i = 0; i < 4; i += 2)
		if (*protos[i + 1] && strcmp(protos[i + 1], "http/protobuf") != 0) {
			buf_printf(
			    err,
			    "invalid value for %s: \"%s\": expected http/protobuf (cairn "
			    "exports OTLP over HTTP in protobuf; point it at the collector's "
			    "OTLP/HTTP port, 4318 by default)",
			    protos[i], protos[i + 1]);
			return -CAIRN_EINVAL;
		}
	if (trace_check_pairs("OTEL_EXPORTER_OTLP_HEADERS", cfg->otel_headers, why) < 0 ||
	    trace_check_pairs("OTEL_RESOURCE_ATTRIBUTES", cfg->otel_resource_attributes, why) < 0) {
		buf_puts(err, why);
		return -CAIRN_EINVAL;
	}
	if (cfg->otel_batch_max > cfg->otel_queue_max) {
		buf_printf(err,
		           "invalid value for OTEL_BSP_MAX_EXPORT_BATCH_SIZE: %d: expected at most "
		           "OTEL_BSP_MAX_QUEUE_SIZE (%d)",
		           cfg->otel_batch_max, cfg->otel_queue_max);
		return -CAIRN_EINVAL;
	}
	buf url = BUF_INIT;
	if (*cfg->otel_traces_endpoint) {
		buf_puts(&url, cfg->otel_traces_endpoint);
	} else if (*cfg->otel_endpoint) {
		size_t n = strlen(cfg->otel_endpoint);
		while (n && cfg->otel_endpoint[n - 1] == '/')
			n--;
		buf_append(&url, cfg->otel_endpoint, n);
		buf_puts(&url, "/v1/traces");
	}
	free(cfg->otel_traces_url);
	cfg->otel_traces_url = buf_detach(&url);
	if (!cfg->otel_traces_url && !(cfg->otel_traces_url = strdup(""))) {
		buf_puts(err, "out of memory reading OTEL_EXPORTER_OTLP_ENDPOINT");
		return -CAIRN_ENOMEM;
	}
	return 0;
}

/* CAIRN_HTTP_ADDR into cfg->http_sa (parse_listen_addr). */
static int parse_addr(config *cfg, int *wildcard, buf *err)
{
	if (parse_listen_addr(cfg->http_addr, &cfg->http_sa, &cfg->http_sa_len, wildcard) == 0)
		return 0;
	buf_reset(err);
	buf_printf(
	    err,
	    "invalid value for CAIRN_HTTP_ADDR: \"%s\": expected HOST:PORT with an IP address "
	    "(127.0.0.1:8080, [::1]:8080, :8080) and a port from 0 to 65535",
	    cfg->http_addr);
	return -CAIRN_EINVAL;
}

/* CAIRN_ADVERTISE_ADDR is HOST:PORT another runner can call: a host name, an
 * IPv4 address or a bracketed IPv6 address, none of them a wildcard, and a
 * port from 0 to 65535 (0: the port the endpoint was given). */
static int check_advertise(const char *a, buf *err)
{
	const char *colon = strrchr(a, ':');
	char host[256], perr[PARSE_ERR_MAX];
	int64_t port;
	size_t hl = colon ? (size_t)(colon - a) : 0;
	int ok =
	    colon && hl > 0 && hl < sizeof host && parse_int(colon + 1, 0, 65535, &port, perr) == 0;
	if (ok) {
		memcpy(host, a, hl);
		host[hl] = '\0';
	}
	if (ok && host[0] == '[') {
		struct in6_addr a6;
		ok = hl > 2 && host[hl - 1] == ']';
		if (ok) {
			host[hl - 1] = '\0';
			ok = inet_pton(AF_INET6, host + 1, &a6) == 1 &&
			     !IN6_IS_ADDR_UNSPECIFIED(&a6);
		}
	} else if (ok) {
		for (const char *p = host; ok && *p; p++)
			ok = isalnum((unsigned char)*p) || *p == '-' || *p == '.' || *p == '_';
		struct in_addr a4;
		if (ok && inet_pton(AF_INET, host, &a4) == 1)
			ok = a4.s_addr != htonl(INADDR_ANY);
	}
	if (ok)
		return 0;
	buf_reset(err);
	buf_printf(err,
	           "invalid value for CAIRN_ADVERTISE_ADDR: \"%s\": expected HOST:PORT that other "
	           "runners can call (worker-1:8080, 10.0.0.5:8080, [fd00::5]:8080): a host name "
	           "or an IP address, not a wildcard (0.0.0.0, [::], empty), and a port from 0 "
	           "to 65535",
	           a);
	return -CAIRN_EINVAL;
}

static int parse_groups(config *cfg, buf *err)
{
	char perr[PARSE_ERR_MAX];
	char *copy = strdup(cfg->groups_text), *save = NULL;
	cfg->ngroups = 0;
	if (!copy) {
		buf_reset(err);
		buf_puts(err, "out of memory reading CAIRN_SHARD_GROUPS");
		return -CAIRN_ENOMEM;
	}
	for (char *g = strtok_r(copy, ",", &save); g; g = strtok_r(NULL, ",", &save)) {
		while (*g == ' ')
			g++;
		if (parse_check_name("group", g, perr) < 0 || cfg->ngroups == CONFIG_MAX_GROUPS) {
			buf_reset(err);
			buf_printf(err, "invalid value for CAIRN_SHARD_GROUPS: \"%s\": %s",
			           cfg->groups_text,
			           cfg->ngroups == CONFIG_MAX_GROUPS
			               ? "at most 16 groups are accepted"
			               : perr);
			free(copy);
			return -CAIRN_EINVAL;
		}
		int dup = 0;
		for (int i = 0; i < cfg->ngroups; i++)
			dup |= strcmp(cfg->groups[i], g) == 0;
		if (!dup && !(cfg->groups[cfg->ngroups++] = strdup(g))) {
			free(copy);
			buf_reset(err);
			buf_puts(err, "out of memory reading CAIRN_SHARD_GROUPS");
			return -CAIRN_ENOMEM;
		}
	}
	free(copy);
	if (cfg->ngroups == 0) {
		buf_reset(err);
		buf_printf(err,
		           "invalid value for CAIRN_SHARD_GROUPS: \"%s\": expected at least one "
		           "group name",
		           cfg->groups_text);
		return -CAIRN_EINVAL;
	}
	return 0;
}

static int is_own_flag(const char *arg)
{
	return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0 ||
	       strcmp(arg, "--version") == 0 || strcmp(arg, "--check-config") == 0;
}

/* Every setting at its default, then the environment when asked. */
static int load_base(config *cfg, int from_env, buf *err)
{
	int rc;
	memset(cfg, 0, sizeof *cfg);
	for (size_t i = 0; i < NSETTINGS; i++)
		if ((rc = set_value(cfg, &SETTINGS[i], "default", SETTINGS[i].def, err)) < 0)
			return rc;
	for (size_t i = 0; from_env && i < NSETTINGS; i++) {
		const char *v = getenv(SETTINGS[i].env);
		if (v && (rc = set_value(cfg, &SETTINGS[i], "env", v, err)) < 0)
			return rc;
	}
	return 0;
}

/* Checks what no single setting can check alone and derives the rest. */
static int finish(config *cfg, buf *err)
{
	if (!cfg->database_url[0]) {
		buf_reset(err);
		buf_puts(err, "DATABASE_URL is not set: set it or pass --db URL");
		return -CAIRN_EINVAL;
	}
	char *perr = NULL;
	PQconninfoOption *opts = PQconninfoParse(cfg->database_url, &perr);
	if (!opts) {
		buf_reset(err);
		size_t pl = perr ? strlen(perr) : 0;
		while (pl && perr[pl - 1] == '\n')
			perr[--pl] = '\0';
		buf_puts(err, "invalid value for DATABASE_URL: ");
		db_scrub(cfg->database_url, perr ? perr : "out of memory", err);
		PQfreemem(perr);
		return -CAIRN_EINVAL;
	}
	PQconninfoFree(opts);
	int rc, wildcard = 0;
	if ((rc = parse_addr(cfg, &wildcard, err)) < 0 || (rc = parse_groups(cfg, err)) < 0)
		return rc;
	/* Other runners' health checkers call the advertised address; an
	 * address that listens everywhere names no host to call. */
	if (!cfg->advertise_addr[0] && wildcard) {
		buf_reset(err);
		buf_printf(err,
		           "CAIRN_ADVERTISE_ADDR is not set and CAIRN_HTTP_ADDR \"%s\" listens on "
		           "every interface, which is no address other runners can call: set "
		           "CAIRN_ADVERTISE_ADDR to HOST:PORT where they reach this worker "
		           "(worker-1:8080, 10.0.0.5:8080), or CAIRN_HTTP_ADDR to one address "
		           "(10.0.0.5:8080)",
		           cfg->http_addr);
		return -CAIRN_EINVAL;
	}
	if (cfg->advertise_addr[0] && (rc = check_advertise(cfg->advertise_addr, err)) < 0)
		return rc;
	if (!cfg->advertise_addr[0]) {
		free(cfg->advertise_addr);
		if (!(cfg->advertise_addr = strdup(cfg->http_addr))) {
			buf_reset(err);
			buf_puts(err, "out of memory reading CAIRN_ADVERTISE_ADDR");
			return -CAIRN_ENOMEM;
		}
	}
	if ((rc = check_http(cfg, err)) < 0 || (rc = check_keys(cfg, err)) < 0 ||
	    (rc = check_otel(cfg, err)) < 0)
		return rc;
	if (cfg->runner_ttl_ms < 2 * cfg->heartbeat_interval_ms) {
		buf_reset(err);
		buf_printf(err,
		           "invalid value for CAIRN_RUNNER_TTL: %" PRId64
		           "ms: must be at least twice "
		           "CAIRN_HEARTBEAT_INTERVAL (%" PRId64 "ms)",
		           cfg->runner_ttl_ms, cfg->heartbeat_interval_ms);
		return -CAIRN_EINVAL;
	}
	return 0;
}

int config_load(config *cfg, int argc, char **argv, buf *err)
{
	int rc = load_base(cfg, 1, err);
	if (rc < 0)
		return rc;
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		if (is_own_flag(arg))
			continue;
		if (strncmp(arg, "--", 2) != 0) {
			buf_reset(err);
			buf_printf(err, "unexpected argument \"%s\" (see --help)", arg);
			return -CAIRN_EINVAL;
		}
		const char *name = arg + 2, *eq = strchr(name, '=');
		size_t len = eq ? (size_t)(eq - name) : strlen(name);
		const setting *s = NULL;
		for (size_t k = 0; k < NSETTINGS && !s; k++) {
			char flag[64];
			flag_name(&SETTINGS[k], flag, sizeof flag);
			if (strlen(flag) == len && strncmp(flag, name, len) == 0)
				s = &SETTINGS[k];
		}
		if (!s) {
			buf_reset(err);
			buf_printf(err, "unknown option \"%.*s\" (see --help)", (int)len + 2, arg);
			return -CAIRN_EINVAL;
		}
		const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
		if (!v) {
			buf_reset(err);
			buf_printf(err, "option --%.*s needs a value", (int)len, name);
			return -CAIRN_EINVAL;
		}
		if ((rc = set_value(cfg, s, "flag", v, err)) < 0)
			return rc;
	}
	return finish(cfg, err);
}

int config_load_settings(config *cfg, const char *database_url, const char *const *settings,
                         int from_env, buf *err)
{
	int rc = load_base(cfg, from_env, err);
	if (rc < 0)
		return rc;
	for (size_t i = 0; settings && settings[i]; i++) {
		const char *eq = strchr(settings[i], '=');
		size_t len = eq ? (size_t)(eq - settings[i]) : strlen(settings[i]);
		const setting *s = NULL;
		for (size_t k = 0; k < NSETTINGS && !s; k++)
			if (strlen(SETTINGS[k].env) == len &&
			    strncmp(SETTINGS[k].env, settings[i], len) == 0)
				s = &SETTINGS[k];
		if (!eq || !s) {
			buf_reset(err);
			buf_printf(err,
			           "invalid setting \"%s\": expected NAME=value with a NAME "
			           "from `cairn-worker --help`",
			           settings[i]);
			return -CAIRN_EINVAL;
		}
		if ((rc = set_value(cfg, s, "env", eq + 1, err)) < 0)
			return rc;
	}
	if (database_url && (rc = set_value(cfg, &SETTINGS[0], "env", database_url, err)) < 0)
		return rc;
	return finish(cfg, err);
}

/* A proxy URL with its password, if any, replaced by "****". */
static void mask_proxy(const char *url, buf *out)
{
	CURLU *h = *url ? curl_url() : NULL;
	char *pw = NULL, *masked = NULL;
	if (h && curl_url_set(h, CURLUPART_URL, url, 0) == CURLUE_OK &&
	    curl_url_get(h, CURLUPART_PASSWORD, &pw, 0) == CURLUE_OK &&
	    curl_url_set(h, CURLUPART_PASSWORD, "****", 0) == CURLUE_OK &&
	    curl_url_get(h, CURLUPART_URL, &masked, 0) == CURLUE_OK)
		buf_puts(out, masked);
	else
		buf_puts(out, url); /* no password (or empty) */
	curl_free(pw);
	curl_free(masked);
	curl_url_cleanup(h);
}

const char *config_text(const config *cfg, const char *name)
{
	for (size_t i = 0; i < NSETTINGS; i++)
		if (SETTINGS[i].kind == K_STR && strcmp(SETTINGS[i].env, name) == 0)
			return *(char *const *)((const char *)cfg + SETTINGS[i].off);
	return NULL;
}

void config_free(config *cfg)
{
	if (cfg->encryption_keys)
		sodium_memzero(cfg->encryption_keys, strlen(cfg->encryption_keys));
	seal_keys_free(cfg->keys);
	for (size_t i = 0; i < NSETTINGS; i++)
		if (SETTINGS[i].kind == K_STR)
			free(*(char **)((char *)cfg + SETTINGS[i].off));
	for (int i = 0; i < cfg->ngroups; i++)
		free(cfg->groups[i]);
	free(cfg->otel_traces_url);
	sodium_memzero(cfg->link_key, sizeof cfg->link_key);
	memset(cfg, 0, sizeof *cfg);
}

void config_describe_db(const char *url, buf *out)
{
	/* libpq parses both URL and key=value forms without connecting. Only
	 * where it connects shows: the password, sslpassword, key files and
	 * every other option stay out of pages and logs. */
	static const char *const shown[] = {"host", "hostaddr", "port", "dbname", "user"};
	PQconninfoOption *opts = PQconninfoParse(url, NULL);
	if (!opts) {
		buf_puts(out, "(unparseable)");
		return;
	}
	int n = 0;
	for (size_t k = 0; k < sizeof shown / sizeof shown[0]; k++)
		for (PQconninfoOption *o = opts; o->keyword; o++)
			if (strcmp(o->keyword, shown[k]) == 0 && o->val && *o->val)
				buf_printf(out, "%s%s=%s", n++ ? " " : "", o->keyword, o->val);
	PQconninfoFree(opts);
}

/* The key ids, the current one first: "k2,k1 (keys not shown)". */
static void describe_keys(const seal_keys *k, buf *out)
{
	if (!k) {
		buf_puts(out, "****");
		return;
	}
	for (int i = 0; i < seal_keys_count(k); i++)
		buf_printf(out, "%s%s", i ? "," : "", seal_key_id(k, i));
	buf_puts(out, " (keys not shown)");
}

void config_describe(const config *cfg, buf *out)
{
	for (size_t i = 0; i < NSETTINGS; i++) {
		const setting *s = &SETTINGS[i];
		const void *f = (const char *)cfg + s->off;
		buf_printf(out, "%s=", s->env);
		switch (s->kind) {
		case K_STR:
			if (s->off == OFF(database_url))
				config_describe_db(*(char *const *)f, out);
			else if (s->off == OFF(http_proxy))
				mask_proxy(*(char *const *)f, out);
			else if (s->off == OFF(http_token) || s->off == OFF(signing_key) ||
			         s->off == OFF(otel_headers))
				buf_puts(out, **(char *const *)f ? "****" : "");
			else if (s->off == OFF(encryption_keys) && **(char *const *)f)
				describe_keys(cfg->keys, out);
			else
				buf_puts(out, *(char *const *)f);
			break;
		case K_INT: buf_printf(out, "%d", *(const int *)f); break;
		case K_DUR: buf_printf(out, "%" PRId64 "ms", *(const int64_t *)f); break;
		case K_SIZE: buf_printf(out, "%zu", *(const size_t *)f); break;
		case K_LEVEL: {
			static const char *const l[] = {"error", "warn", "info", "debug"};
			buf_puts(out, l[*(const int *)f]);
			break;
		}
		case K_FORMAT:
			buf_puts(out, *(const int *)f == LOG_JSON ? "json" : "logfmt");
			break;
		}
		buf_puts(out, "\n");
	}
}

void config_help(buf *out)
{
	for (size_t i = 0; i < NSETTINGS; i++) {
		const setting *s = &SETTINGS[i];
		char flag[64];
		flag_name(s, flag, sizeof flag);
		buf_printf(out, "  %-31s --%-26s %s", s->env, flag, s->help);
		if (s->def[0])
			buf_printf(out, " (default %s)", s->def);
		buf_puts(out, "\n");
	}
}
