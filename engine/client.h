/* client.h - the client handle's insides, shared by client.c and migrate.c. */
#ifndef CAIRN_CLIENT_H
#define CAIRN_CLIENT_H
#include <libpq-fe.h>
#include <stddef.h>

#include "buf.h"
#include "cairn.h"
#include "db.h"
#include "seal.h"

/* The newest migration this build embeds (migrate.c). */
int migrate_newest_version(void);
/* What one migration pass did (`cairn migrate --json`): the newest applied
 * version when it began and when it ended (0: none), and the versions it
 * applied itself, in order (another migrator may have applied others). */
typedef struct migrate_report {
	int before, after;
	int *versions;
	size_t n;
} migrate_report;
/* cairn_migrate, reporting into out (cleared first, even on an error);
 * free it with migrate_report_clear. */
int migrate_apply(cairn_client *c, const char *dir, int shards_per_group, migrate_report *out);
void migrate_report_clear(migrate_report *r);
/* What `cairn migrate --citus` found and did: cairn's tables distributed
 * by part (colocated with cairn.runs) and reference tables, after it, how
 * many of them it made now, and the parts. */
typedef struct migrate_citus_report {
	int distributed, reference, made_now, parts;
} migrate_citus_report;
/* On the coordinator of a Citus cluster, after migrate_apply: makes the
 * parts (once), the reference tables and the distributed tables that
 * pg_dist_partition does not list yet, in one transaction under the
 * migrators' lock; CAIRN_OK, or a failure that changed nothing. */
int migrate_citus(cairn_client *c, migrate_citus_report *out);
/* The newest migration applied to c's database, read with its settings
 * (client_shards); 0 when they cannot be read (no schema). */
int client_schema_version(cairn_client *c);

#define CAIRN_DEFAULT_MAX_PAYLOAD (1024 * 1024)
#define CAIRN_DEFAULT_GROUP       "default"
#define CAIRN_DEFAULT_SHARDS      4096
/* Notifications the wake relay listens to (maint.c): on CAIRN_WAKE_CHANNEL
 * the payload is a runner id, followed by CAIRN_WAKE_CANCEL when a run in
 * flight there may have been cancelled, then by a space and the id of the
 * run that got work, when the write knows it (a run that was enqueued,
 * signalled, cancelled or retried), then by CAIRN_WAKE_HANDED when the
 * enqueue handed the run to that runner (client.c, ST_ENQUEUE_PUSH); on
 * CAIRN_MEMBERS_CHANNEL it is the live runners' fingerprint. The relay
 * forwards at most CAIRN_WAKE_RUNS run ids in one wake-up; more make it a
 * wake-up for every due run. */
#define CAIRN_WAKE_CHANNEL    "cairn_wake"
#define CAIRN_WAKE_CANCEL     "/cancel"
#define CAIRN_WAKE_HANDED     " +"
#define CAIRN_WAKE_RUNS       16
#define CAIRN_MEMBERS_CHANNEL "cairn_members"
/* The live runners' fingerprint, over a relation of them with columns id
 * and healthy: the heartbeat's (lease.c) and the relay's (maint.c) must be
 * the same expression. */
#define CAIRN_MEMBERS_FP   "coalesce(md5(string_agg(id || ':' || healthy, ',' ORDER BY id)), '')"
#define CAIRN_DONE_CHANNEL "cairn_done"
/* A run published an event (payload: its id). */
#define CAIRN_EVENT_CHANNEL "cairn_event"

/* Adds run to the set runs[0..*n) of at most CAIRN_WAKE_RUNS ids, once: 0,
 * or -1 when it is not there and the set is full (the wake-up is then for
 * every due run). The relay's and the poller's set. */
static inline int wake_runs_add(int64_t *runs, int *n, int64_t run)
{
	for (int i = 0; i < *n; i++)
		if (runs[i] == run)
			return 0;
	if (*n == CAIRN_WAKE_RUNS)
		return -1;
	runs[(*n)++] = run;
	return 0;
}

/* The statements a client prepares on its session (client.c), and the
 * state of each. */
#define CLIENT_NSTMTS 12
/* The schema (migration 0030) from which an enqueue hands the new run to
 * its idle owner from inside its own transaction (cairn.push_owner). */
#define PUSH_SCHEMA 30
/* A client wakes from inside its enqueue's transaction only when its last
 * enqueue of one run ended at least this long ago (ms): see client.c,
 * ST_ENQUEUE_PUSH. */
#define CLIENT_WAKE_IN_GAP_MS 5
enum { STMT_UNPREPARED, STMT_PREPARED, STMT_TEXT };

/* A route a client used (client.c, route_cached): runs of workflow
 * enqueued with group asked ("": none) and prefer ("": none) went to
 * group at at_ms (monotonic; 0: empty), with warning ("": none, served). */
#define CLIENT_ROUTES       8
#define CLIENT_ROUTE_TTL_MS 1000
typedef struct client_route {
	char workflow[129], asked[129], prefer[129], group[129];
	char warning[768];
	int64_t at_ms;
} client_route;

struct cairn_client {
	PGconn *conn;
	unsigned char stmt[CLIENT_NSTMTS]; /* STMT_*, per statement */
	buf err;
	buf warning; /* of the last enqueue: cairn_client_warning */
	size_t max_payload;
	db_settings settings;  /* cairn.settings, read once; settings.shards is 0 until read */
	int jit_off;           /* this session will not JIT-compile (see enqueue) */
	const char *errfield;  /* static: the field a CAIRN_EINVAL rejected, or NULL */
	const seal_keys *keys; /* what it seals with (seal.h); NULL: plaintext */
	client_route routes[CLIENT_ROUTES];
	unsigned next_route;
	char routed[129];        /* the group the last routed enqueue of one run chose */
	seal_keys *own_keys;     /* keys it parsed itself, which it frees */
	int64_t last_enqueue_ms; /* monotonic: when its last enqueue of one run ended */
};

/* Sets the handle's error message (and no error field) and returns code. */
int client_fail(cairn_client *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Sets the message and the rejected field (a string literal, as spelled in
 * cairn.h) and returns CAIRN_EINVAL. */
int client_invalid(cairn_client *c, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Lets go the held runs that have free slots and wakes their owners
 * (migration 0010), after a commit that held a run or freed a slot: of the
 * keys p[1] (a text[]) of workflow p[0], of the key of run p[0], or of every
 * key of workflow p[0]. */
typedef enum { CLIENT_RELEASE_KEYS, CLIENT_RELEASE_RUN, CLIENT_RELEASE_WORKFLOW } client_release_of;
int client_release(cairn_client *c, client_release_of what, const char *const *p);

/* After a statement failed (c's error set): CAIRN_ESCHEMA when the schema is
 * missing, else CAIRN_EDB. */
int client_db_fail(cairn_client *c);
/* Makes c seal and open with k, which the caller keeps until c is freed
 * (the worker's own clients share its configuration's keys). */
void client_use_keys(cairn_client *c, const seal_keys *k);
/* Where client_unseal marks a field of a record (cairn.h) it cannot open:
 * the record's locked and unauthentic bits and their keys (SEAL_ID_MAX + 1
 * bytes each). */
typedef struct client_lock {
	unsigned *locked, *unauthentic;
	char *locked_key, *unauthentic_key;
} client_lock;
#define CLIENT_LOCK(rec)                                                                           \
	((client_lock){&(rec)->locked, &(rec)->unauthentic, (rec)->locked_key,                     \
	               (rec)->unauthentic_key})
/* Replaces *v, as read from a field f, by its plaintext: 0. A value that
 * does not open becomes NULL, and 0 too, so that the rest of its record
 * still reads: under a key c lacks, with bit set in *l.locked and the key
 * in l.locked_key; under a key c has but failing to authenticate (other
 * key bytes, or altered) or malformed, in *l.unauthentic and
 * l.unauthentic_key as well. CAIRN_ENOMEM (the message naming what). */
int client_unseal(cairn_client *c, seal_field f, char **v, unsigned bit, client_lock l,
                  const char *what);
/* Adds "unreadable": {NAME: {"key": K, "cause": C, "reason": R}, ...} to
 * obj for the fields of a record that did not open (nothing when none), C
 * and R as cairn_unreadable_why gives them, names[i] naming the field of
 * bit 1 << i (NULL: input, output, error). The one shape of every JSON
 * document that shows a record (docs/security.md). */
struct cJSON;
void client_json_unreadable(struct cJSON *obj, unsigned locked, unsigned unauthentic,
                            const char *locked_key, const char *unauthentic_key,
                            const char *const names[3]);
#define CLIENT_JSON_UNREADABLE(obj, rec, names)                                                    \
	client_json_unreadable(obj, (rec)->locked, (rec)->unauthentic, (rec)->locked_key,          \
	                       (rec)->unauthentic_key, names)
/* A timestamp column as Unix ms, for SQL text. */
#define MS(col) "(extract(epoch FROM " col ") * 1000)::bigint"

/* Where a run that a worker claimed but does not serve goes (served.c). */
typedef struct client_placed {
	char to[129];    /* a group other than its own with a live worker that serves its
	                    workflow; "" when none */
	int here;        /* a live worker of its own group serves it (not the shard's owner) */
	int served;      /* a worker has ever served it */
	int64_t gone_ms; /* since no worker serving it anywhere is live; negative while one
	                    is (served only) */
	char seen[192];  /* "never served", or "last seen 5m ago in group python" */
} client_placed;
/* client_placed of workflow's runs in group, live judged with ttl_ms. */
int client_placement(cairn_client *c, const char *workflow, const char *group, int64_t ttl_ms,
                     client_placed *out);

/* Reads cairn.settings once (cached) and gives shards_per_group. */
int client_shards(cairn_client *c, int *shards);
/* The key of the part (cairn.parts, migration 0025) that holds the rows of
 * shard, from the settings client_shards read. */
int client_part(const cairn_client *c, int shard);
/* The part of run id into *part (client.c: from the id, or read for a run
 * older than migration 0025): CAIRN_OK or an error. */
int client_run_part(cairn_client *c, int64_t id, int *part);
/* The texts of the client's enqueue of one run to a group it routed:
 * without a concurrency key, and with one on a database with parts, held
 * or not ($14) (tests/test_citus.c explains both on Citus). */
const char *client_sql_enqueue_values(void);
const char *client_sql_enqueue_held(void);
/* The texts of the client's signal ($1 run, $2 name, $3 payload, $4 the most
 * pending signals, $5 nonce, $6 part) and cancel ($1 run, $2 part). */
const char *client_sql_signal(void);
const char *client_sql_cancel(void);
/* What client_signal_once says of a nonce used before. */
#define CLIENT_NONCE_USED "this link was used already"
/* What a write to a run reports it did (`cairn signal --json`, `cairn
 * cancel --json`): at most this many bytes with the NUL. */
#define CLIENT_OUTCOME_MAX      16
#define CLIENT_SIGNAL_DELIVERED "delivered"
/* cairn_signal; *delivered says whether the run was waiting for this signal
 * when it came (it is woken to take it) or not (it is kept until the run
 * awaits it). */
int client_signal_outcome(cairn_client *c, int64_t run_id, const char *name, const char *payload,
                          int *delivered);
/* cairn_cancel; status (CLIENT_OUTCOME_MAX bytes; may be NULL) gets the
 * run's status right after it: "cancelled" when it ended at once, else the
 * status it keeps until its next durable call. */
int client_cancel_outcome(cairn_client *c, int64_t run_id, char *status);
/* -1 with msg (PARSE_ERR_MAX bytes) when json (a value given as what) is a
 * string that starts with the prefix of sealed values (SEAL_PREFIX), which
 * is reserved; else 0. */
int client_check_unsealed(const char *what, const char *json, char *msg);
/* cairn_enqueue of one run as a child of parent (0: none), whose end then
 * signals the parent (exec.h, EXEC_CHILD_SIGNAL). With o->group NULL it is
 * routed with prefer (the starting run's group; NULL: none) first among
 * the groups that serve the workflow, and to prefer when none ever did. */
int client_enqueue_child(cairn_client *c, const char *workflow, const cairn_enqueue_opts *o,
                         int64_t parent, const char *prefer, cairn_enqueued *out);
/* The group a child of workflow goes to, routed as client_enqueue_child
 * routes it (prefer: the parent's group), into group (size bytes), and
 * the route's warning (malloc'ed; NULL: served), with the client's cached
 * routes: CAIRN_OK, or the client's error. */
int client_route_child(cairn_client *c, const char *workflow, const char *prefer, char *group,
                       size_t size, char **warning);
/* cairn_signal, and with nonce (a signal link used once, link.h) only if
 * that nonce was never used: it is recorded with the signal, and a second
 * use is CAIRN_ESTATE ("this link was used already"). */
int client_signal_once(cairn_client *c, int64_t run_id, const char *name, const char *payload,
                       const char *nonce);

/* The parameters of a run filter (cairn_list_filter), validated, for
 * CLIENT_LIST_WHERE: $1 workflow, $2 status, $3 code version, $4 key, $5 and
 * $6 the creation range (Unix ms); then for a page $7 before_id, $8 the
 * limit. */
typedef struct client_list_args {
	const char *p[8];
	char from[24], to[24], before[24], limit[24];
	int parts; /* the database has parts (Citus): CLIENT_LIST_WHERE_PARTS */
} client_list_args;
/* A key without a workflow is looked up in the (workflow, key) index once
 * per workflow, the workflows found by a skip scan of runs_workflow: a few
 * index probes per workflow, however many runs there are. Citus refuses a
 * recursive CTE over a distributed table: on a database with parts the
 * key is looked for in every part (CLIENT_LIST_WHERE_PARTS), a scan of
 * each part's runs on its node, all of them at once. */
#define CLIENT_WORKFLOWS                                                                           \
	"WITH RECURSIVE w AS (SELECT min(workflow) AS w FROM cairn.runs UNION ALL "                \
	"  SELECT (SELECT min(workflow) FROM cairn.runs WHERE workflow > w.w) FROM w "             \
	"  WHERE w.w IS NOT NULL) SELECT w FROM w WHERE w IS NOT NULL"
#define CLIENT_LIST_WHERE_OF(any_workflow)                                                         \
	"($1::text IS NULL OR workflow = $1) AND ($2::text IS NULL OR status = $2) "               \
	"AND ($3::text IS NULL OR code_version = $3) AND ($4::text IS NULL OR (key = $4 AND "      \
	"  ($1::text IS NOT NULL OR " any_workflow "))) "                                          \
	"AND ($5::bigint IS NULL OR created_at >= to_timestamp($5::bigint / 1000.0)) "             \
	"AND ($6::bigint IS NULL OR created_at < to_timestamp($6::bigint / 1000.0)) "
#define CLIENT_LIST_WHERE       CLIENT_LIST_WHERE_OF("workflow = ANY (ARRAY(" CLIENT_WORKFLOWS "))")
#define CLIENT_LIST_WHERE_PARTS CLIENT_LIST_WHERE_OF("true")
/* Fills a from f, or returns CAIRN_EINVAL naming the field. */
int client_list_params(cairn_client *c, const cairn_list_filter *f, client_list_args *a);
#endif
