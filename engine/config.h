/*
 * config.h - the worker's configuration: environment variables overridable by
 * flags, parsed and validated once at start. Pure (no I/O but getenv).
 */
#ifndef CAIRN_CONFIG_H
#define CAIRN_CONFIG_H
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "buf.h"
#include "link.h"
#include "seal.h"

#define CONFIG_MAX_GROUPS 16

typedef struct config {
	char *database_url;
	char *http_addr; /* as given: host:port */
	struct sockaddr_storage http_sa;
	socklen_t http_sa_len;
	char *advertise_addr; /* how other runners reach our HTTP endpoint */
	int concurrency;
	int shards; /* 0: use the database's recorded count */
	char *groups_text;
	char *groups[CONFIG_MAX_GROUPS];
	int ngroups;
	int weight;
	int64_t poll_interval_ms;
	int poll_batch;
	int64_t statement_timeout_ms; /* poll and commit connections */
	int64_t shutdown_timeout_ms;
	int log_level, log_format;
	int64_t heartbeat_interval_ms;
	int64_t runner_ttl_ms;
	int64_t rebalance_interval_ms;
	int64_t rebalance_debounce_ms;
	int detach_after;
	int64_t reattach_window_ms;
	int64_t retention_ms;
	int64_t singleton_backoff_ms;
	int64_t unknown_workflow_timeout_ms;
	int poison_after;
	int metrics_max_workflows;   /* workflows with a label of their own (metrics.h) */
	int64_t backlog_interval_ms; /* how often cairn.backlog reads the backlog */
	size_t max_payload_bytes;
	size_t journal_cache_bytes; /* the journals of recent runs kept in memory (jcache.h) */
	char *plugins;              /* colon-separated .so paths */
	char *code_version;         /* recorded on the runs this worker starts; "": none */
	char *http_allow;           /* the http built-in's exceptions (netpolicy.h) */
	char *http_proxy;           /* the http built-in's proxy URL; "": none */
	char *http_token;           /* bearer token of the endpoint's pages but probes; "": none */
	char *http_hosts;  /* names the endpoint answers to besides IPs, localhost (http.h) */
	char *signing_key; /* of signal links (link.h), base64; "": links are off */
	unsigned char link_key[LINK_KEY_BYTES]; /* signing_key decoded, when it is set */
	char *encryption_keys;                  /* ID=BASE64,...; only from the environment */
	char *encryption_keys_file;             /* or a file of them */
	seal_keys *keys; /* either, parsed; NULL: payloads are written in plaintext */
	/* OpenTelemetry traces (trace.h): the standard OTEL_* variables. */
	char *otel_endpoint;        /* OTEL_EXPORTER_OTLP_ENDPOINT: a base URL */
	char *otel_traces_endpoint; /* OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: the URL itself */
	char *otel_protocol, *otel_traces_protocol; /* only http/protobuf is spoken */
	char *otel_headers;                         /* k=v,... sent with every export */
	char *otel_service_name;
	char *otel_resource_attributes;
	int otel_timeout_ms;     /* OTEL_EXPORTER_OTLP_TIMEOUT */
	int otel_delay_ms;       /* OTEL_BSP_SCHEDULE_DELAY */
	int otel_queue_max;      /* OTEL_BSP_MAX_QUEUE_SIZE */
	int otel_batch_max;      /* OTEL_BSP_MAX_EXPORT_BATCH_SIZE */
	char *otel_traces_url;   /* derived: where spans go; "": tracing is off */
} config;

/*
 * Fills cfg from the environment, then from flags in argv (--name value or
 * --name=value, the variable's name without CAIRN_, lowercased, '_' -> '-';
 * --db for DATABASE_URL). Unknown flags and bad values return -1 with the
 * message in err; the flags the caller handles itself (--help, --version,
 * --check-config) are left to it and ignored here.
 */
int config_load(config *cfg, int argc, char **argv, buf *err);
/*
 * Fills cfg for an embedded worker: defaults, the environment if from_env,
 * then settings ("NAME=value" by variable name, NULL-terminated; may be
 * NULL), then database_url (if not NULL). Errors as config_load.
 */
int config_load_settings(config *cfg, const char *database_url, const char *const *settings,
                         int from_env, buf *err);
void config_free(config *cfg);
/* The value of the text setting name ("CAIRN_HTTP_ALLOW"), or NULL. */
const char *config_text(const config *cfg, const char *name);
/* One "NAME=value" line per setting; of the database, only where it
 * connects (config_describe_db), of a proxy URL not its password. */
void config_describe(const config *cfg, buf *out);
/* The help text listing every variable, its flag, default and meaning. */
void config_help(buf *out);
/* Of a URL or conninfo, only host, hostaddr, port, dbname and user, as
 * "host=db port=5432 dbname=cairn user=app". */
void config_describe_db(const char *url, buf *out);
#endif
