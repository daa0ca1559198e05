/*
 * client.c - the public client API: open a connection, enqueue runs, send
 * signals, cancel, retry, read runs and wait for results, and list runners and
 * shard leases. The `cairn` CLI is a thin layer over these functions. Owns one
 * PGconn per handle. Every input is validated before anything is written,
 * and a rejected one names its field (cairn_client_errfield) so callers such
 * as the CLI need not validate again; every write is one statement, so a
 * rejected or failed call leaves nothing behind.
 */
#include "client.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "db.h"
#include "hash.h"
#include "parse.h"
#include "pgarr.h"
#include "state.h"
#include "trace.h"

const char *cairn_strstatus(int status)
{
	switch (status) {
	case CAIRN_OK: return "ok";
	case CAIRN_EINVAL: return "invalid input";
	case CAIRN_ENOTFOUND: return "not found";
	case CAIRN_EDB: return "database error";
	case CAIRN_ENOMEM: return "out of memory";
	case CAIRN_ETIMEOUT: return "timed out";
	case CAIRN_ESTATE: return "wrong state";
	case CAIRN_ESCHEMA: return "schema error";
	case CAIRN_SUSPENDED: return "suspended";
	case CAIRN_CANCELLED: return "cancelled";
	case CAIRN_ERETRY: return "retryable failure";
	case CAIRN_EFAIL: return "failed";
	case CAIRN_ENONDET: return "non-determinism";
	case CAIRN_ESTOP: return "handed over";
	case CAIRN_EINTR: return "interrupted";
	case CAIRN_CONTINUED: return "continued as new";
	default: return "unknown status";
	}
}

int client_fail(cairn_client *c, int code, const char *fmt, ...)
{
	buf_reset(&c->err);
	c->errfield = NULL;
	va_list ap;
	va_start(ap, fmt);
	buf_vprintf(&c->err, fmt, ap);
	va_end(ap);
	return code;
}

int client_invalid(cairn_client *c, const char *field, const char *fmt, ...)
{
	buf_reset(&c->err);
	c->errfield = field;
	va_list ap;
	va_start(ap, fmt);
	buf_vprintf(&c->err, fmt, ap);
	va_end(ap);
	return CAIRN_EINVAL;
}

/* After db_exec failed: the error is in c->err already; classify it. */
int client_db_fail(cairn_client *c)
{
	c->errfield = NULL;
	if (!db_ok(c->conn))
		return CAIRN_EDB;
	const char *st = db_last_sqlstate();
	if (strcmp(st, "3F000") == 0 || strcmp(st, "42P01") == 0) /* no schema / table */
		return client_fail(c, CAIRN_ESCHEMA,
		                   "the database has no cairn schema: run `cairn migrate` first");
	return CAIRN_EDB;
}

int cairn_client_open(const char *conninfo, cairn_client **out)
{
	*out = NULL;
	if (sodium_init() < 0)
		return CAIRN_ENOMEM;
	cairn_client *c = calloc(1, sizeof *c);
	if (!c)
		return CAIRN_ENOMEM;
	c->max_payload = CAIRN_DEFAULT_MAX_PAYLOAD;
	*out = c;
	if (!conninfo)
		conninfo = getenv("DATABASE_URL");
	if (!conninfo || !*conninfo)
		return client_fail(c, CAIRN_EINVAL,
		                   "no database given: set DATABASE_URL or pass --db URL");
	c->conn = db_connect(conninfo, "cairn", &c->err);
	return c->conn ? CAIRN_OK : CAIRN_EDB;
}

void cairn_client_free(cairn_client *c)
{
	if (!c)
		return;
	if (c->conn)
		PQfinish(c->conn);
	buf_free(&c->err);
	buf_free(&c->warning);
	seal_keys_free(c->own_keys);
	free(c);
}

const char *cairn_client_errmsg(const cairn_client *c)
{
	return c ? buf_str(&c->err) : "out of memory";
}

const char *cairn_client_errfield(const cairn_client *c)
{
	return c ? c->errfield : NULL;
}

const char *cairn_client_warning(const cairn_client *c)
{
	return c && c->warning.len && !c->warning.oom ? buf_str(&c->warning) : NULL;
}

void cairn_client_set_max_payload(cairn_client *c, size_t bytes)
{
	c->max_payload = bytes;
}

void client_use_keys(cairn_client *c, const seal_keys *k)
{
	seal_keys_free(c->own_keys);
	c->own_keys = NULL;
	c->keys = k;
}

static int take_keys(cairn_client *c, int rc, seal_keys *k)
{
	if (rc) {
		c->errfield = "keys";
		return rc == -CAIRN_ENOMEM ? CAIRN_ENOMEM : CAIRN_EINVAL;
	}
	client_use_keys(c, k);
	c->own_keys = k;
	return CAIRN_OK;
}

int cairn_client_set_keys(cairn_client *c, const char *spec)
{
	char why[512];
	seal_keys *k;
	int rc = seal_keys_parse(spec, &k, why, sizeof why);
	if (rc)
		client_fail(c, 0, "invalid encryption keys: %s", why);
	return take_keys(c, rc, k);
}

int cairn_client_keys_from_env(cairn_client *c)
{
	seal_keys *k;
	buf_reset(&c->err);
	int rc = seal_keys_from_env(&k, &c->err);
	return take_keys(c, rc, k);
}

int client_unseal(cairn_client *c, seal_field f, char **v, unsigned bit, client_lock l,
                  const char *what)
{
	if (!*v || !seal_is_sealed(f, *v, NULL))
		return CAIRN_OK;
	buf plain = BUF_INIT;
	char id[SEAL_ID_MAX + 1];
	int rc = seal_open(c->keys, f, *v, &plain, id);
	if (rc == -CAIRN_ENOMEM) {
		buf_free(&plain);
		return client_fail(c, CAIRN_ENOMEM, "out of memory decrypting %s", what);
	}
	free(*v);
	*v = rc == 0 ? buf_detach(&plain) : NULL;
	if (rc == 0)
		return *v ? CAIRN_OK
		          : client_fail(c, CAIRN_ENOMEM, "out of memory decrypting %s", what);
	/* One value that does not open hides only itself: the record reads. */
	buf_free(&plain);
	*l.locked |= bit;
	if (rc == SEAL_NOKEY) {
		memcpy(l.locked_key, id, sizeof id);
	} else {
		*l.unauthentic |= bit;
		memcpy(l.unauthentic_key, id, sizeof id);
	}
	return CAIRN_OK;
}

void client_json_unreadable(cJSON *obj, unsigned locked, unsigned unauthentic,
                            const char *locked_key, const char *unauthentic_key,
                            const char *const names[3])
{
	static const char *const fields[3] = {"input", "output", "error"};
	if (!locked)
		return;
	cJSON *u = cJSON_AddObjectToObject(obj, "unreadable");
	for (unsigned i = 0; i < 3; i++) {
		char why[CAIRN_UNREADABLE_MAX];
		const char *key = NULL, *name = (names ? names : fields)[i];
		const char *cause =
		    cairn_unreadable_why(locked, unauthentic, locked_key, unauthentic_key, 1u << i,
		                         why, sizeof why, &key);
		if (!cause || !name)
			continue;
		cJSON *o = cJSON_AddObjectToObject(u, name);
		cJSON_AddStringToObject(o, "key", key);
		cJSON_AddStringToObject(o, "cause", cause);
		cJSON_AddStringToObject(o, "reason", why);
	}
}

/* What is written for value (JSON text or a message) in a field f: the
 * value sealed under c's current key (in out, valid until it changes), or,
 * without keys, value itself; NULL when out of memory. */
static const char *seal_for(const cairn_client *c, seal_field f, const char *value, buf *out)
{
	if (!c->keys)
		return value;
	buf_reset(out);
	return seal_value(c->keys, f, value, out) == 0 ? buf_str(out) : NULL;
}

/* A JSON string that starts as an encrypted value would be read as one. */
int client_check_unsealed(const char *what, const char *json, char *msg)
{
	json += strspn(json, " \t\r\n");
	if (strncmp(json, "\"" SEAL_PREFIX, sizeof SEAL_PREFIX) != 0)
		return 0;
	snprintf(msg, PARSE_ERR_MAX,
	         "invalid %s: a string that starts with \"" SEAL_PREFIX
	         "\" is reserved for encrypted values",
	         what);
	return -1;
}

int client_shards(cairn_client *c, int *shards)
{
	if (c->settings.shards <= 0) {
		int rc = db_read_settings(c->conn, &c->settings, &c->err);
		if (rc)
			return -rc;
	}
	*shards = c->settings.shards;
	return CAIRN_OK;
}

int client_part(const cairn_client *c, int shard)
{
	return db_part_key(&c->settings, shard);
}

int client_schema_version(cairn_client *c)
{
	int shards;
	return client_shards(c, &shards) == CAIRN_OK ? c->settings.schema_version : 0;
}

/* ---------------------------------------------------------------- enqueue */

/*
 * Wake-ups. A write that gives a shard work is followed, in a transaction
 * of its own sent in the same round trip (db_exec_then), by one
 * notification per owner of those shards on cairn_wake, whose payload is
 * the owner's runner id (then "" or CAIRN_WAKE_CANCEL, then the run's id
 * when there is one run to name). Only the wake relay listens (maint.c,
 * cairn.relay), and it pokes that owner alone, so a run costs the same
 * whatever the size of the fleet; a wake-up that names its run lets the
 * owner claim that run by id instead of looking through all its shards. The notification is not
 * part of the write's transaction: PostgreSQL serialises the commits of
 * notifying transactions on one lock, held until the commit is on disk.
 * The wake-up's own commit does not wait for the disk (a wake-up lost in a
 * crash of the database is one the poll fallback makes up for), so it holds
 * that lock only for moments, and a write that has no owner to wake
 * notifies nobody and commits nothing. An owner that is not idle
 * (runners.idle, migration 0007: its poller is busy claiming and claims
 * again before it sleeps) is not woken either, except to look for cancelled
 * runs in flight. It reads the owner after the write committed: an owner
 * that takes a shard later claims its due work as it takes it, and a shard
 * that has no owner wakes nobody. One run sent by a cached route is the
 * exception: it hands the run to an idle owner from inside its own
 * transaction when no other writer notifies so at the moment
 * (ST_ENQUEUE_PUSH, below).
 */
#define WAKE_NO_DISK "set_config('synchronous_commit', 'off', true)"
/* The owners to wake: idle ones, and every one for a cancel (wake: $n). */
#define WAKE_OWNER(wake) "JOIN cairn.runners w ON w.id = l.owner AND (w.idle OR " wake " <> '') "
/* The run of an enqueue: $1 group (NULL: the group cairn.route gives
 * workflow $4 with $6 preferred, as it gave the enqueue just before), $2
 * shard, $3 "" or CAIRN_WAKE_CANCEL, $4 workflow and $5 key of the run (an
 * existing one, for a key that existed). The lease is found by its key
 * first, as before routing: a statement that found the run by its key
 * first was planned, generically, on the empty table of a fresh database
 * and then read every run (1 ms a wake-up at 10,000 runs); the route reads
 * the small cairn.workflows (10 us). */
#define WAKE_OWNER_3 WAKE_OWNER("$3")
static const db_stmt ST_WAKE_SHARD = {
    "cairn_wake_shard",
    "SELECT count(pg_notify('" CAIRN_WAKE_CHANNEL "', l.owner || $3 || "
    "         coalesce(' ' || (SELECT r.id FROM cairn.runs r WHERE r.workflow = $4 "
    "                          AND r.key = $5), ''))), " WAKE_NO_DISK " "
    "FROM cairn.shard_leases l " WAKE_OWNER_3
    "WHERE l.shard_group = coalesce($1, (SELECT shard_group FROM cairn.route($4, NULL, $6))) "
    "  AND l.shard = $2"};
/* With the group known ($1): as before routing. */
#define WAKE_TO(skip)                                                                              \
	"SELECT count(pg_notify('" CAIRN_WAKE_CHANNEL "', l.owner || $3 || "                       \
	"         coalesce(' ' || (SELECT r.id FROM cairn.runs r WHERE r.workflow = $4 "           \
	"                          AND r.key = $5), ''))), " WAKE_NO_DISK " "                      \
	"FROM cairn.shard_leases l " WAKE_OWNER_3 "WHERE l.shard_group = $1 AND l.shard = $2" skip
static const db_stmt ST_WAKE_TO = {"cairn_wake_to", WAKE_TO("")};
/* Shards: $1 groups (NULL: routed, as the enqueue of workflow $4 routed
 * it: cairn.route gives the same group again), $2 shards, $3 as above; for
 * every due run there. */
static const db_stmt ST_WAKE_SHARDS = {
    "cairn_wake_shards",
    "SELECT count(pg_notify('" CAIRN_WAKE_CHANNEL "', o.owner || $3)), " WAKE_NO_DISK " "
    "FROM (SELECT DISTINCT l.owner FROM unnest($1::text[], $2::int[]) AS x(g, s) "
    "      JOIN cairn.shard_leases l ON l.shard_group = coalesce(x.g, "
    "        (SELECT shard_group FROM cairn.route($4))) AND l.shard = x.s "
    "      " WAKE_OWNER("$3") ") o"};
/* Runs: $1 run ids, $2 "" or CAIRN_WAKE_CANCEL, $3 their part. A function
 * (migration 0025) that reads each run and its owner in the part and
 * notifies by cairn.wake: on Citus its notifications are sent by the
 * coordinator, where the relay listens, not by the node of the part. */
static const db_stmt ST_WAKE_RUNS = {
    "cairn_wake_runs", "SELECT cairn.wake_runs($1::bigint[], $3::int, $2 <> ''), " WAKE_NO_DISK};

/* A new run's id, which carries its shard (migration 0025,
 * cairn.new_run_id, written out so that the statement calls no function).
 * Its part comes from the client (client_part), for each run of a batch
 * too: a batch that read the parts (a reference table) in its statement
 * was, on Citus, a distributed INSERT ... SELECT that Citus sent with its
 * columns mixed up ("operator does not exist: bigint + text"). */
#define NEW_RUN_ID(shard) "(nextval('cairn.runs_id_seq') * " RUN_ID_SHARDS_SQL " + " shard ")"
/* The id of one run enqueued by the statements below (its shard: $4). */
#define NEW_RUN_ID_4 NEW_RUN_ID("$4")

/* When a run starts: $1 at (Unix ms) if set, else now + $2 ms. */
#define START_AT(at, delay)                                                                        \
	"CASE WHEN " at " IS NOT NULL THEN to_timestamp(" at " / 1000.0) "                         \
	"ELSE now() + " delay " * interval '1 millisecond' END"
/* Whether a run of concurrency key ck (NULL: none) is held: the key's
 * active runs (cairn.flow_active, as
 * the statement's snapshot sees them) and those before it in this
 * statement (rank - 1) fill its slots (cairn.flow_cap: the workflow's ($1)
 * key limit, or a fair share). Only an estimate: an enqueue that
 * held releases afterwards, under the key's lock (client_release), and a
 * worker never executes more than the limit whatever is due. */
#define HELD(ck, rank)                                                                             \
	"(" ck " IS NOT NULL AND cairn.flow_active($1, " ck ") + " rank " > cairn.flow_cap($1))"
#define HELD_ONE  HELD("$10::text", "1")
#define HELD_EACH HELD("ckey", "rank")
/* HELD_EACH so, each run's part its own ("part" of the batch's input). */
#define HELD_EACH_IN                                                                               \
	"(ckey IS NOT NULL AND cairn.flow_active_in(part, $1, ckey) + rank > cairn.flow_cap($1))"
#define START_ONE  START_AT("$8::bigint", "$7::bigint")
#define START_EACH START_AT("at_ms", "delay_ms")

/*
 * One run, the common call: a single INSERT, prepared once per session. The
 * run row is its own start (runs.start_at, migration 0006). Its group is
 * cairn.route's (migration 0020: $3 when named, else the group that serves
 * the workflow, $12 preferred; $13 refuses a workflow the group never
 * served), inlined into the statement: one index range of cairn.workflows,
 * whose warning and group come back with the new run. A client sends it
 * only when it has no fresh route of its own (route_cached), so the CTE's
 * cost (10 us of the server's CPU) is paid once a second. A key that exists
 * inserts nothing and returns nothing; ST_ENQUEUED then reads it. The
 * columns, here and below: id, existed, status, for an existing run that
 * has finished, when asked ($3 below), its output and error, held, the
 * warning of a new run and (routed) its group.
 */
static const db_stmt ST_ENQUEUE = {
    "cairn_enqueue",
    "WITH rt AS (SELECT * FROM cairn.route($1, $3, $12, $13)) "
    "INSERT INTO cairn.runs AS r (id, part, workflow, key, shard_group, shard, input, "
    "                             max_attempts, scheduled_at, start_at, parent_id, "
    "                             concurrency_key, priority, held, traceparent) "
    "SELECT " NEW_RUN_ID_4 ", $15, $1, $2, rt.shard_group, $4, $5::jsonb, $6, t.at, "
    "       CASE WHEN h.held THEN NULL ELSE t.at END, $9::bigint, $10, $11, h.held, $14 "
    "FROM rt, (SELECT " START_ONE " AS at) t, (SELECT " HELD_ONE " AS held) h "
    "ON CONFLICT ON CONSTRAINT runs_workflow_key_key DO NOTHING "
    "RETURNING r.id, false, r.status, NULL::text, NULL::text, r.held, "
    "          (SELECT warning FROM rt), r.shard_group"};
/* The same into group $3, which the client routed the workflow to within
 * CLIENT_ROUTE_TTL_MS (see route_cached; the route's warning is the
 * client's to give): the statement of before routing, which reads no other
 * table. */
#define ENQUEUE_TO(held)                                                                           \
	"INSERT INTO cairn.runs AS r (id, part, workflow, key, shard_group, shard, input, "        \
	"                             max_attempts, scheduled_at, start_at, parent_id, "           \
	"                             concurrency_key, priority, held, traceparent) "              \
	"SELECT " NEW_RUN_ID_4 ", $13, $1, $2, $3, $4, $5::jsonb, $6, t.at, "                      \
	"       CASE WHEN h.held THEN NULL ELSE t.at END, $9::bigint, $10, $11, h.held, $12 "      \
	"FROM (SELECT " START_ONE " AS at) t, (SELECT " held " AS held) h "                        \
	"ON CONFLICT ON CONSTRAINT runs_workflow_key_key DO NOTHING "                              \
	"RETURNING r.id, false, r.status, NULL::text, NULL::text, r.held"
static const db_stmt ST_ENQUEUE_TO = {"cairn_enqueue_to", ENQUEUE_TO(HELD_ONE)};
/* The same for a run without a concurrency key (most runs): nothing can
 * hold it, so a plain INSERT ... VALUES, parameters as ST_ENQUEUE_TO's
 * ($10 is NULL). Citus routes it whole to the node of its part ($13) with
 * a generic plan (a fast-path router insert, tests/test_citus.c), where
 * the INSERT ... SELECT above, whose held column calls cairn.flow_active,
 * cannot be planned at all. */
static const db_stmt ST_ENQUEUE_VALUES = {
    "cairn_enqueue_values",
    "INSERT INTO cairn.runs AS r (id, part, workflow, key, shard_group, shard, input, "
    "                             max_attempts, scheduled_at, start_at, parent_id, "
    "                             concurrency_key, priority, traceparent) "
    "VALUES (" NEW_RUN_ID_4 ", $13, $1, $2, $3, $4, $5::jsonb, $6, " START_ONE ", "
    "        " START_ONE ", $9::bigint, $10::text, $11, $12) "
    "ON CONFLICT ON CONSTRAINT runs_workflow_key_key DO NOTHING "
    "RETURNING r.id, false, r.status, NULL::text, NULL::text, r.held"};
const char *client_sql_enqueue_values(void)
{
	return ST_ENQUEUE_VALUES.sql;
}
/*
 * On a database with parts (`cairn migrate --citus`, so migration 0028 is
 * there), a run with a concurrency key: whether it is held (HELD_ONE's
 * estimate, $1 the workflow, $2 the key), its key's active runs counted
 * in the part of its shard ($3), where they all live, by
 * cairn.flow_active_in (on Citus one task on the node of the part;
 * cairn.flow_active, a SQL function over every part, is refused); then
 * the run inserted as ST_ENQUEUE_VALUES inserts, held or not ($14, the
 * answer). Two statements, each one task on Citus: as one INSERT ...
 * SELECT, Citus ran the insert through the coordinator ("pull to
 * coordinator") with a plan made for each execution's values.
 */
static const db_stmt ST_HELD_IN = {"cairn_held_in",
                                   "SELECT $2::text IS NOT NULL "
                                   "  AND cairn.flow_active_in($3::int, $1, $2::text) + 1 > "
                                   "      cairn.flow_cap($1)"};
static const db_stmt ST_ENQUEUE_HELD = {
    "cairn_enqueue_held",
    "INSERT INTO cairn.runs AS r (id, part, workflow, key, shard_group, shard, input, "
    "                             max_attempts, scheduled_at, start_at, parent_id, "
    "                             concurrency_key, priority, traceparent, held) "
    "VALUES (" NEW_RUN_ID_4 ", $13, $1, $2, $3, $4, $5::jsonb, $6, " START_ONE ", "
    "        CASE WHEN $14::bool THEN NULL ELSE " START_ONE " END, $9::bigint, $10::text, "
    "        $11, $12, $14::bool) "
    "ON CONFLICT ON CONSTRAINT runs_workflow_key_key DO NOTHING "
    "RETURNING r.id, false, r.status, NULL::text, NULL::text, r.held"};
const char *client_sql_enqueue_held(void)
{
	return ST_ENQUEUE_HELD.sql;
}
/*
 * ST_ENQUEUE_VALUES that hands the new run to the idle owner of its shard
 * (migration 0030): the run is inserted already claimed for that owner
 * (running, counted, queued_by the owner with no queued_seq), and the
 * notification sent from inside the transaction names the owner and the
 * run, marked handed over (CAIRN_WAKE_HANDED). The owner then reads the
 * run and starts it, without a claim (dispatch.c, ST_PUSHED_TAKE: 0.15 ms
 * at the median, against 0.5 to 0.6 ms for the claim, SQL_CLAIM_NEW,
 * which had been more of the time from the enqueue to the run's first
 * instruction than the relay's hop and the executor's together). Only at
 * low load, where that latency is the figure:
 *  - a client sends it only for a run due now, without a concurrency key,
 *    on one server, and when its last enqueue of one run ended
 *    CLIENT_WAKE_IN_GAP_MS ago or more: clients that enqueue back to
 *    back wake after their commits (8 of them with a worker running
 *    enqueued 0.31x and 0.31x the same run's pgbench INSERT TPS, bench
 *    x8 phase, with a wake-up inside every call, against 0.47x and 0.37x
 *    without, since the writer that notified held PostgreSQL's lock of
 *    notifying commits through its fsync and the others waited behind it);
 *  - cairn.push_owner hands the run over only to an idle owner (none under
 *    load: its owner is busy), when no fleet-wide limit exists, and when
 *    this writer is the one that notifies from inside its transaction at
 *    the moment (cairn.notify_lock); else the run is inserted pending, the
 *    statement says so (PUSH_SETTLED false), and the client wakes the
 *    owner after the commit (ST_WAKE_TO) in a round trip of its own;
 *  - the call ends with its commit when nothing is left to wake (a wake-up
 *    sent after it in the same round trip, which then found nothing to do,
 *    kept the call waiting for its answer all the same).
 * In the release of migration 0030 the notification carried the claim
 * itself, signed by cairn.pushed (a SECURITY DEFINER function: 0.12 ms of
 * the statement's 0.45 ms at one run per 10 ms); since the owner reads the
 * run anyway to know that the hand-over still stands, the read returns
 * the claim.
 * A key that exists inserts nothing and hands nothing over. On one server
 * only (one part): on Citus the INSERT of a CTE is a step through the
 * coordinator, not the router insert of ST_ENQUEUE_VALUES.
 */
/* What an owner o, when there is one, is handed as the run is inserted. */
#define PUSHED_AS(pending, handed) "CASE WHEN o.owner IS NULL THEN " pending " ELSE " handed " END"
/* Into group grp, routed by CTE route (or none); routed: the warning and
 * the group of a run routed so (as ST_ENQUEUE's last two columns). */
#define ENQUEUE_PUSH(route, grp, routed)                                                           \
	"WITH " route "o AS MATERIALIZED (SELECT * FROM cairn.push_owner(" grp ", $4)), "          \
	"n AS (INSERT INTO cairn.runs AS r (id, part, workflow, key, shard_group, shard, "         \
	"             input, max_attempts, scheduled_at, start_at, parent_id, concurrency_key, "   \
	"             priority, traceparent, status, attempt, started_at, claims, queued_by) "     \
	"  SELECT " NEW_RUN_ID_4 ", $13, $1, $2, " grp ", $4, $5::jsonb, $6, " START_ONE ", "      \
	"         " START_ONE ", $9::bigint, $10::text, $11, $12, "                                \
	"         " PUSHED_AS("'pending'", "'running'") ", " PUSHED_AS("0", "1") ", "              \
	"         " PUSHED_AS("NULL", "now()") ", " PUSHED_AS("0", "1") ", o.owner FROM o "        \
	"  ON CONFLICT ON CONSTRAINT runs_workflow_key_key DO NOTHING "                            \
	"  RETURNING r.id, r.status, r.held) "                                                     \
	"SELECT n.id, false, n.status, NULL::text, NULL::text, n.held, " routed ", o.settled, "    \
	"       CASE WHEN o.owner IS NOT NULL THEN pg_notify('" CAIRN_WAKE_CHANNEL "', "           \
	"         o.owner || ' ' || n.id || '" CAIRN_WAKE_HANDED "') IS NULL END "                 \
	"FROM n CROSS JOIN o"
static const db_stmt ST_ENQUEUE_PUSH = {"cairn_enqueue_push",
                                        ENQUEUE_PUSH("", "$3", "NULL::text, NULL::text")};
/* The same routed as ST_ENQUEUE routes ($14 prefer, $15 require), when the
 * client's route has run out (once a second): the enqueue that routes
 * again hands its run over too (a statement of its own, ST_ENQUEUE and a
 * wake-up after it, made the stamp phase's p99 out of the 1 run in 100
 * that routed: 2.2 to 3.5 ms, against 1.4 ms at the median). */
static const db_stmt ST_ENQUEUE_PUSH_ROUTE = {
    "cairn_enqueue_push_route",
    ENQUEUE_PUSH("rt AS MATERIALIZED (SELECT * FROM cairn.route($1, $3, $14, $15)), ",
                 "(SELECT shard_group FROM rt)",
                 "(SELECT warning FROM rt), (SELECT shard_group FROM rt)")};
/* ST_ENQUEUE_PUSH's column that says whether the wake-up after the commit
 * has nothing to do. */
#define PUSH_SETTLED 8
/* On a database with parts, the key of a new run in the part of its key
 * (cairn.run_keys, migration 0038): $1 that part, $2 the workflow, $3 the
 * key, $4 the run. A key another run holds inserts nothing. One task. */
static const db_stmt ST_RUN_KEY = {
    "cairn_run_key",
    "INSERT INTO cairn.run_keys AS k (part, workflow, key, run_id) VALUES ($1, $2, $3, $4) "
    "ON CONFLICT ON CONSTRAINT run_keys_pkey DO NOTHING RETURNING k.run_id"};
/* The same for a batch's new runs ($1 the workflow; $2, $3, $4 their
 * keys' parts, keys and ids): a key another run holds fails it with
 * unique_violation, like ENQUEUE_NEW below. */
static const char SQL_RUN_KEYS[] =
    "INSERT INTO cairn.run_keys (part, workflow, key, run_id) "
    "SELECT k.p, $1, k.k, k.id FROM unnest($2::int[], $3::text[], $4::bigint[]) AS k(p, k, id)";
static const char SQL_ENQUEUED[] =
    "SELECT id, true, status, "
    "       CASE WHEN $3::bool AND finished_at IS NOT NULL THEN output::text END, "
    "       CASE WHEN $3::bool AND finished_at IS NOT NULL THEN error END, held, NULL::text "
    "FROM cairn.runs WHERE workflow = $1 AND key = $2";

/*
 * Many runs: one row per input, in order, with the columns above. A key's
 * runs are held past its free slots, counted in input order (rank: the
 * run's place among the batch's runs of its key). A batch without keys
 * holds nothing and needs no rank: SQL_ENQUEUE_BATCH skips the window
 * that counts it (SQL_ENQUEUE_BATCH_KEYED), which sorts the batch twice (on
 * 10,000 runs from psql, a median of 203 ms against 242 ms, five runs
 * each).
 *
 * Existing runs are looked up one key at a time, and only for keys the
 * insert skipped: a join on workflow alone would read every run of it. The
 * LIMIT keeps it so: without one the planner pulls the subquery up into a
 * join, and with many runs of the workflow it hashed them all (measured:
 * 393 ms for 1,000 runs among 500,000 of their workflow, 28 ms with it).
 *
 * The client has routed the runs ($3: their groups, enqueue's route_to);
 * cairn.route gives each distinct group ($3, '' for none, which a routed
 * batch has not) and require_served ($12) of the batch its warning once.
 * $14: each run's part (client_part). One server only: with parts, a
 * batch that finds a key existing goes run by run (enqueue).
 */
#define ENQUEUE_BATCH(rank)                                                                        \
	"WITH input AS ("                                                                          \
	"  SELECT * FROM unnest($2::text[], $3::text[], $4::int[], $5::text[], $6::int[], "        \
	"                       $7::bigint[], $8::bigint[], $10::text[], $11::int[], "             \
	"                       $12::bool[], $13::text[], $14::int[]) "                            \
	"    WITH ORDINALITY "                                                                     \
	"    AS t(key, grp, shard, input, max_attempts, delay_ms, at_ms, "                         \
	"         ckey, prio, req, tp, part, ord)), "                                              \
	"rt AS (SELECT d.grp, d.req, x.shard_group, x.warning "                                    \
	"  FROM (SELECT DISTINCT coalesce(grp, '') AS grp, req FROM input) d, "                    \
	"  LATERAL cairn.route($1, nullif(d.grp, ''), NULL, d.req) x), "                           \
	"ins AS ("                                                                                 \
	"  INSERT INTO cairn.runs (id, part, workflow, key, shard_group, shard, input, "           \
	"                          max_attempts, scheduled_at, start_at, concurrency_key, "        \
	"                          priority, held, traceparent) "                                  \
	"  SELECT " NEW_RUN_ID(                                                                    \
	    "shard") ", part, $1, key, g, shard, input::jsonb, max_attempts, at, "                 \
	             "         CASE WHEN held THEN NULL ELSE at END, ckey, prio, held, tp "        \
	             "  FROM (SELECT i.*, rt.shard_group AS g, " START_EACH " AS at, " HELD_EACH   \
	             " AS held "                                                                   \
	             "        FROM (SELECT *, " rank " AS rank "                                   \
	             "              FROM input) i "                                                \
	             "        JOIN rt ON rt.grp = coalesce(i.grp, '') AND rt.req = i.req) i "      \
	             "ORDER BY ord "                                                               \
	             "  ON CONFLICT ON CONSTRAINT runs_workflow_key_key DO NOTHING "               \
	             "  RETURNING id, key, status, held) "                                         \
	             "SELECT coalesce(ins.id, r.id), ins.id IS NULL, coalesce(ins.status, "        \
	             "r.status), "                                                                 \
	             "       CASE WHEN $9::bool AND r.finished_at IS NOT NULL THEN "               \
	             "r.output::text END, "                                                        \
	             "       CASE WHEN $9::bool AND r.finished_at IS NOT NULL THEN r.error END, "  \
	             "       coalesce(ins.held, r.held), "                                         \
	             "       CASE WHEN ins.id IS NOT NULL THEN (SELECT rt.warning FROM rt "        \
	             "         WHERE rt.grp = coalesce(i.grp, '') AND rt.req = i.req) END "        \
	             "FROM input i LEFT JOIN ins ON ins.key = i.key "                              \
	             "LEFT JOIN LATERAL (SELECT r.id, r.status, r.finished_at, r.output, "         \
	             "r.error, r.held "                                                            \
	             "  FROM cairn.runs r WHERE ins.id IS NULL AND r.workflow = $1 AND r.key = "   \
	             "i.key "                                                                      \
	             "  LIMIT 1) r ON true "                                                       \
	             "ORDER BY i.ord"
static const char SQL_ENQUEUE_BATCH[] = ENQUEUE_BATCH("0::bigint");
static const char SQL_ENQUEUE_BATCH_KEYED[] =
    ENQUEUE_BATCH("row_number() OVER (PARTITION BY ckey ORDER BY ord)");

/*
 * Many new runs: the batch as a plain INSERT, which fails with
 * unique_violation when a key exists (a batch sent again, a key another
 * batch holds); the batch is then sent as ENQUEUE_BATCH, which finds the
 * existing runs. Most batches are new runs: ON CONFLICT makes PostgreSQL
 * check the unique index before each row it inserts, and the join that
 * puts the inserted and the existing runs back in input order sorts the
 * batch twice more: from psql, 10,000 runs took 105 ms plain against 135
 * ms with ON CONFLICT (median of 6), and the whole of ENQUEUE_BATCH about
 * 2x a bare INSERT ... SELECT of the same rows. The rows are inserted in
 * input order, so their ids, drawn as each is inserted, rise in it: the
 * client puts the rows it gets back in order by id. Parameters as
 * ENQUEUE_BATCH's but $9 (nothing to read back of an existing run) and
 * the last, $11 (the runs' parts). No CTE: Citus ran the INSERT ... SELECT
 * of a CTE over unnest with its columns mixed up (one server inlined the
 * CTE: the same plan).
 */
#define ENQUEUE_NEW(rank, held)                                                                    \
	"INSERT INTO cairn.runs AS r (id, part, workflow, key, shard_group, shard, input, "        \
	"                             max_attempts, scheduled_at, start_at, concurrency_key, "     \
	"                             priority, held) "                                            \
	"SELECT " NEW_RUN_ID(                                                                      \
	    "shard") ", part, $1, key, shard_group, shard, input::jsonb, "                         \
	             "       max_attempts, at, CASE WHEN held THEN NULL ELSE at END, ckey, prio, " \
	             "held "                                                                       \
	             "FROM (SELECT *, " START_EACH " AS at, " held " AS held "                     \
	             "      FROM (SELECT *, " rank " AS rank "                                     \
	             "            FROM unnest($2::text[], $3::text[], $4::int[], $5::text[], "     \
	             "$6::int[], "                                                                 \
	             "                        $7::bigint[], $8::bigint[], $9::text[], "            \
	             "$10::int[], "                                                                \
	             "                        $11::int[]) WITH ORDINALITY "                        \
	             "                 AS t(key, shard_group, shard, input, max_attempts, "        \
	             "delay_ms, at_ms, "                                                           \
	             "                      ckey, prio, part, ord)) i) i ORDER BY ord "            \
	             "RETURNING r.id, false, r.status, NULL::text, NULL::text, r.held"
#define BY_KEY "row_number() OVER (PARTITION BY ckey ORDER BY ord)"
static const char SQL_ENQUEUE_NEW[] = ENQUEUE_NEW("0::bigint", HELD_EACH);
static const char SQL_ENQUEUE_NEW_KEYED[] = ENQUEUE_NEW(BY_KEY, HELD_EACH);
/* On a database with parts (Citus), a key's runs counted in its part. */
static const char SQL_ENQUEUE_NEW_KEYED_IN[] = ENQUEUE_NEW(BY_KEY, HELD_EACH_IN);

/* A row of SQL_ENQUEUE_NEW: its run id and its row number. */
typedef struct new_row {
	int64_t id;
	int row;
} new_row;

static int by_id(const void *a, const void *b)
{
	int64_t x = ((const new_row *)a)->id, y = ((const new_row *)b)->id;
	return (x > y) - (x < y);
}

/* Reads the rows of SQL_ENQUEUE_NEW (freed here) into out, in input order:
 * CAIRN_OK, or a failure (out untouched). The runs' ids rise in input
 * order; RETURNING gives them in the order inserted, so the rows are
 * sorted only when they came otherwise. */
static int read_new(cairn_client *c, PGresult *r, size_t n, cairn_enqueued *out)
{
	new_row *rows = (size_t)PQntuples(r) == n ? malloc(n * sizeof *rows + 1) : NULL;
	if (!rows) {
		int got = PQntuples(r);
		PQclear(r);
		return (size_t)got == n
		           ? client_fail(c, CAIRN_ENOMEM, "out of memory reading the runs")
		           : client_fail(c, CAIRN_EDB,
		                         "the batch's insert returned %d rows for %zu runs", got,
		                         n);
	}
	int sorted = 1;
	for (size_t i = 0; i < n; i++) {
		rows[i] = (new_row){strtoll(PQgetvalue(r, (int)i, 0), NULL, 10), (int)i};
		sorted &= i == 0 || rows[i - 1].id < rows[i].id;
	}
	if (!sorted)
		qsort(rows, n, sizeof *rows, by_id);
	for (size_t i = 0; i < n; i++) {
		int row = rows[i].row;
		cairn_enqueued *e = &out[i];
		cairn_enqueued_clear(e);
		*e = (cairn_enqueued){.id = rows[i].id, .held = db_get_bool(r, row, 5)};
		snprintf(e->status, sizeof e->status, "%s", PQgetvalue(r, row, 2));
	}
	free(rows);
	PQclear(r);
	return CAIRN_OK;
}

/*
 * Letting held runs go (migration 0010): cairn.flow_release for some keys,
 * in one transaction with the wake-up of their owners (cairn.wake, migration
 * 0015: idle ones; a busy owner claims again by itself, and does not go idle
 * before this commits). Called after every commit that held a run or freed a
 * slot; see client_release.
 */
#define RELEASE_WAKE                                                                               \
	"SELECT count(cairn.wake(r.shard_group, r.shard, r.id, false)) "                           \
	"FROM go JOIN cairn.runs r ON r.id = go.id"
/* With parts (Citus), the runs let go are returned and their owners woken
 * by the runs' ids from the coordinator (wake_new): RELEASE_WAKE reads the
 * runs by id alone, and its cairn.wake would run on the nodes. */
#define RELEASE_IDS "SELECT id FROM go"
#define RELEASE_GO_KEYS                                                                            \
	"WITH go AS (SELECT unnest(cairn.flow_release($1, k)) AS id "                              \
	"  FROM (SELECT DISTINCT k FROM unnest($2::text[]) k) x) "
/* The run of CLIENT_RELEASE_RUN ($1, in part $2) is read first, in a CTE
 * of its own: on Citus a function in a statement on one part would run on
 * its node, and cairn.flow_release reads other parts' runs. */
#define RELEASE_GO_RUN                                                                             \
	"WITH k AS MATERIALIZED (SELECT workflow, concurrency_key FROM cairn.runs "                \
	"  WHERE part = $2::int AND id = $1 AND concurrency_key IS NOT NULL), "                    \
	"go AS (SELECT unnest(cairn.flow_release(workflow, concurrency_key)) AS id FROM k) "
#define RELEASE_GO_WORKFLOW "WITH go AS (SELECT unnest(cairn.flow_release_all($1)) AS id) "
#define RELEASE_SQL(go) {go RELEASE_WAKE, go RELEASE_IDS}
static void wake_new(cairn_client *c, size_t n, const cairn_enqueued *out);

int client_release(cairn_client *c, client_release_of what, const char *const *p)
{
	static const char *const sql[][2] = {[CLIENT_RELEASE_KEYS] = RELEASE_SQL(RELEASE_GO_KEYS),
	                                     [CLIENT_RELEASE_RUN] = RELEASE_SQL(RELEASE_GO_RUN),
	                                     [CLIENT_RELEASE_WORKFLOW] =
	                                         RELEASE_SQL(RELEASE_GO_WORKFLOW)};
	int shards, rc = client_shards(c, &shards); /* reads c->settings */
	if (rc)
		return rc;
	int parts = c->settings.nparts > 1;
	PGresult *r =
	    db_exec(c->conn, &c->err, sql[what][parts], what == CLIENT_RELEASE_WORKFLOW ? 1 : 2, p);
	if (!r)
		return client_db_fail(c);
	size_t n = parts ? (size_t)PQntuples(r) : 0;
	cairn_enqueued *go = n ? calloc(n, sizeof *go) : NULL;
	for (size_t i = 0; go && i < n; i++)
		go[i].id = strtoll(PQgetvalue(r, (int)i, 0), NULL, 10);
	PQclear(r);
	if (n && !go)
		return client_fail(c, CAIRN_ENOMEM, "out of memory waking released runs");
	if (n)
		wake_new(c, n, go);
	free(go);
	return CAIRN_OK;
}

/* The statements a client prepares on a session of its own; their states
 * are cairn_client.stmt[], in this order. */
static const db_stmt *const PREPARED[CLIENT_NSTMTS] = {
    &ST_ENQUEUE, &ST_WAKE_SHARD,     &ST_WAKE_SHARDS,  &ST_WAKE_RUNS,          &ST_ENQUEUE_TO,
    &ST_WAKE_TO, &ST_ENQUEUE_VALUES, &ST_ENQUEUE_PUSH, &ST_ENQUEUE_PUSH_ROUTE, &ST_RUN_KEY,
    &ST_HELD_IN, &ST_ENQUEUE_HELD};

/* How to send s: as text while the client does not know that its
 * connection is a session of its own (it learns with cairn.settings),
 * prepared in the same round trip the first time, by name after that. */
static db_send send_how(const cairn_client *c, const db_stmt *s, int *slot)
{
	*slot = -1;
	for (int i = 0; i < CLIENT_NSTMTS; i++)
		if (PREPARED[i] == s)
			*slot = i;
	if (*slot < 0 || c->settings.shards <= 0 || c->settings.pooled)
		return DB_TEXT;
	return c->stmt[*slot] == STMT_UNPREPARED ? DB_PREPARE
	       : c->stmt[*slot] == STMT_PREPARED ? DB_NAMED
	                                         : DB_TEXT;
}

/* After sending a statement how (state: its SQLSTATE when it failed, NULL
 * when that is not known): a prepare that failed sends it as text from then
 * on, unless the session had it already; a named statement the session has
 * lost (DISCARD ALL, say) is prepared again next time. */
static void sent(cairn_client *c, int slot, db_send how, int ok, const char *state)
{
	int lost = !ok && (!state || strcmp(state, "26000") == 0);
	if (slot < 0 || how == DB_TEXT)
		return;
	if (how == DB_PREPARE)
		c->stmt[slot] =
		    ok || (state && strcmp(state, "42P05") == 0) ? STMT_PREPARED : STMT_TEXT;
	else if (lost)
		c->stmt[slot] = STMT_UNPREPARED;
}

/* db_exec_then of s and then, each prepared once per session where it can. */
static PGresult *exec_then(cairn_client *c, const db_stmt *s, int n, const char *const *params,
                           const db_stmt *then, int tn, const char *const *tparams)
{
	int si, ti, then_ok;
	db_send how = send_how(c, s, &si), then_how = send_how(c, then, &ti);
	PGresult *r = db_exec_then(c->conn, &c->err, s, how, n, params, then, then_how, tn, tparams,
	                           &then_ok);
	sent(c, si, how, r != NULL, db_last_sqlstate());
	sent(c, ti, then_how, then_ok, NULL);
	return r;
}

/* s alone, prepared once per session where it can, as exec_then does. */
static PGresult *exec_one(cairn_client *c, const db_stmt *s, int n, const char *const *params)
{
	int slot;
	db_send how = send_how(c, s, &slot);
	if (how == DB_PREPARE) {
		int ok = db_prepare(c->conn, s, 1, &c->err) == 0;
		sent(c, slot, how, ok, ok ? NULL : db_last_sqlstate());
		how = c->stmt[slot] == STMT_PREPARED ? DB_NAMED : DB_TEXT;
	}
	if (how == DB_TEXT)
		return db_exec(c->conn, &c->err, s->sql, n, params);
	PGresult *r = db_exec_prepared(c->conn, &c->err, s->name, n, params);
	sent(c, slot, how, r != NULL, db_last_sqlstate());
	return r;
}

#define MAX_ATTEMPTS_LIMIT 1000

/* Validates one run's options; on an error writes the message into msg and
 * returns the rejected field's name, else NULL. */
static const char *check_opts(const cairn_client *c, const char *workflow,
                              const cairn_enqueue_opts *o, char msg[PARSE_ERR_MAX])
{
	if (parse_check_name("workflow", workflow, msg) < 0)
		return "workflow";
	if (o->key && parse_check_key(o->key, msg) < 0)
		return "key";
	if (o->group && parse_check_name("group", o->group, msg) < 0)
		return "group";
	if (o->concurrency_key && parse_check_key(o->concurrency_key, msg) < 0)
		return "concurrency_key"; /* a run key's rules */
	if (o->priority < -CAIRN_PRIORITY_MAX || o->priority > CAIRN_PRIORITY_MAX) {
		snprintf(
		    msg, PARSE_ERR_MAX,
		    "invalid priority %d: expected an integer from %d to %d (higher starts first)",
		    o->priority, -CAIRN_PRIORITY_MAX, CAIRN_PRIORITY_MAX);
		return "priority";
	}
	if (o->input && (parse_check_json("input", o->input, c->max_payload, msg) < 0 ||
	                 client_check_unsealed("input", o->input, msg) < 0))
		return "input";
	uint8_t tid[16], sid[8], flags;
	if (o->traceparent && trace_parse(o->traceparent, tid, sid, &flags, msg) < 0)
		return "traceparent";
	if (o->max_attempts < 0 || o->max_attempts > MAX_ATTEMPTS_LIMIT) {
		snprintf(msg, PARSE_ERR_MAX,
		         "invalid max_attempts %d: expected an integer from 1 to %d",
		         o->max_attempts, MAX_ATTEMPTS_LIMIT);
		return "max_attempts";
	}
	if (o->delay_ms < 0) {
		snprintf(msg, PARSE_ERR_MAX,
		         "invalid delay_ms %" PRId64 ": expected 0 or more milliseconds",
		         o->delay_ms);
		return "delay_ms";
	}
	if (o->at_unix_ms < 0) {
		snprintf(msg, PARSE_ERR_MAX,
		         "invalid at_unix_ms %" PRId64
		         ": expected Unix milliseconds after 1970, or 0 for unset",
		         o->at_unix_ms);
		return "at_unix_ms";
	}
	if (o->delay_ms && o->at_unix_ms) {
		snprintf(msg, PARSE_ERR_MAX,
		         "delay_ms (%" PRId64 ") and at_unix_ms (%" PRId64
		         ") cannot be used together: set at most one of them",
		         o->delay_ms, o->at_unix_ms);
		return "delay_ms";
	}
	return NULL;
}

/*
 * A fresh unique key: a UUIDv7 (RFC 9562) as 32 hex digits, the time in Unix
 * ms, then 74 random bits (cairn.fresh_key, migration 0017, makes the same).
 * Keys made later sort after those made before, so the runs enqueued
 * without a key of their own are inserted at the end of the unique index on
 * (workflow, key), not on a random page of it: into 1,000,000 runs, pgbench
 * with 8 clients inserted 5 to 19 % more a second, with 38 to 45 % less WAL
 * after a checkpoint, than with random keys.
 */
static void fresh_key(char out[33])
{
	unsigned char raw[16];
	uint64_t ms = (uint64_t)clock_unix_ms();
	for (int i = 0; i < 6; i++)
		raw[i] = (unsigned char)(ms >> (40 - 8 * i));
	randombytes_buf(raw + 6, sizeof raw - 6);
	raw[6] = (unsigned char)(0x70 | (raw[6] & 0x0f)); /* version 7 */
	raw[8] = (unsigned char)(0x80 | (raw[8] & 0x3f)); /* variant 10 */
	sodium_bin2hex(out, 33, raw, sizeof raw);
}

/* Adds a new run's warning to the client's (cairn_client_warning), once:
 * a batch's runs of one group share theirs. */
static void add_warning(cairn_client *c, const char *w)
{
	if (!w || strstr(buf_str(&c->warning), w))
		return;
	buf_printf(&c->warning, "%s%s", c->warning.len ? "; " : "", w);
}

/* Reads the rows of an enqueue into out (as many as n); *missing when a
 * row names no run (its key's run was not found). A new run's warning goes
 * to the client's, and for one run (per_run) to out->warning too. */
static int read_enqueued(cairn_client *c, PGresult *r, size_t n, cairn_enqueued *out, int per_run,
                         int *missing)
{
	int oom = 0;
	*missing = PQntuples(r) == 0;
	c->routed[0] = '\0';
	if (PQntuples(r) == 1 && PQnfields(r) > 7) /* the group a routed enqueue chose */
		snprintf(c->routed, sizeof c->routed, "%s", PQgetvalue(r, 0, 7));
	for (int i = 0; i < PQntuples(r) && (size_t)i < n; i++) {
		if (PQgetisnull(r, i, 0)) {
			*missing = 1;
			continue;
		}
		cairn_enqueued *e = &out[i];
		e->id = db_get_i64(r, i, 0);
		e->existed = db_get_bool(r, i, 1);
		snprintf(e->status, sizeof e->status, "%s", PQgetvalue(r, i, 2));
		cairn_enqueued_clear(e);
		e->output = db_get_str(r, i, 3);
		e->error = db_get_str(r, i, 4);
		e->held = PQnfields(r) > 5 && db_get_bool(r, i, 5);
		int warned = PQnfields(r) > 6 && !PQgetisnull(r, i, 6);
		if (warned)
			add_warning(c, PQgetvalue(r, i, 6));
		e->warning = warned && per_run ? strdup(PQgetvalue(r, i, 6)) : NULL;
		oom |= (!e->output && !PQgetisnull(r, i, 3)) ||
		       (!e->error && !PQgetisnull(r, i, 4)) || (warned && per_run && !e->warning) ||
		       c->warning.oom;
	}
	PQclear(r);
	if (oom)
		return client_fail(c, CAIRN_ENOMEM, "out of memory reading the run's result");
	int rc = CAIRN_OK;
	for (size_t i = 0; i < n && !rc; i++) {
		cairn_enqueued *e = &out[i];
		rc = client_unseal(c, SEAL_RUN_OUTPUT, &e->output, CAIRN_LOCKED_OUTPUT,
		                   CLIENT_LOCK(e), "the run's output");
		if (!rc)
			rc = client_unseal(c, SEAL_RUN_ERROR, &e->error, CAIRN_LOCKED_ERROR,
			                   CLIENT_LOCK(e), "the run's error");
	}
	return rc;
}

/* A run lives in the shard of its concurrency key, if it has one. */
static int run_shard(const cairn_enqueue_opts *o, const char *key, int shards)
{
	return hash_shard(o->concurrency_key ? o->concurrency_key : key, shards);
}

/* After a commit that held runs: client_release of their keys (a text[]). */
static int release_held(cairn_client *c, const char *workflow, pgarr *keys)
{
	if (keys->b.oom)
		return client_fail(c, CAIRN_ENOMEM, "out of memory releasing held runs");
	const char *p[] = {workflow, pgarr_str(keys)};
	return client_release(c, CLIENT_RELEASE_KEYS, p);
}

static int raced(cairn_client *c)
{
	return client_fail(c, CAIRN_EDB, "enqueue raced with a concurrent enqueue; try again");
}

/* After an enqueue statement failed: a run refused because its group never
 * served the workflow (require_served; cairn.unserved raises no_data_found)
 * is CAIRN_ENOTFOUND with the database's words, which name the workflow. */
static int enqueue_failed(cairn_client *c)
{
	if (db_ok(c->conn) && strcmp(db_last_sqlstate(), "P0002") == 0 && *db_last_message())
		return client_fail(c, CAIRN_ENOTFOUND, "%s", db_last_message());
	return client_db_fail(c);
}

/*
 * Routes a client has just used. Routing (cairn.route) reads cairn.workflows
 * in the enqueue's statement, and touching that one more table cost the
 * server 15 to 20 us of CPU per enqueue (about a tenth of it, measured on
 * the worker's backend over 16,000 single enqueues), twice with the wake-up's.
 * So a client reuses the group it routed a workflow to, and the warning
 * that came with it, for CLIENT_ROUTE_TTL_MS, with the statements of before
 * routing: a change of route (a group's workers come or go) reaches a client
 * within that time, and a run it sent meanwhile to a group that no longer
 * serves the workflow is moved by the worker that claims it, or by the
 * janitor. An enqueue that requires the workflow served routes again when
 * the route it has warned (cairn.route refuses it, in its words).
 */
static client_route *route_find(cairn_client *c, const char *workflow, const char *group,
                                const char *prefer)
{
	for (int i = 0; i < CLIENT_ROUTES; i++) {
		client_route *e = &c->routes[i];
		if (e->at_ms && strcmp(e->workflow, workflow) == 0 &&
		    strcmp(e->asked, group ? group : "") == 0 &&
		    strcmp(e->prefer, prefer ? prefer : "") == 0)
			return e;
	}
	return NULL;
}

static client_route *route_cached(cairn_client *c, const char *workflow, const char *group,
                                  const char *prefer, int require)
{
	client_route *e = route_find(c, workflow, group, prefer);
	if (!e || clock_mono_ms() - e->at_ms >= CLIENT_ROUTE_TTL_MS || (require && e->warning[0]))
		return NULL;
	return e;
}

static void route_keep(cairn_client *c, const char *workflow, const char *group, const char *prefer,
                       const char *routed, const char *warning)
{
	if (warning && strlen(warning) >= sizeof c->routes[0].warning)
		return; /* kept only whole */
	client_route *e = route_find(c, workflow, group, prefer);
	if (!e)
		e = &c->routes[c->next_route++ % CLIENT_ROUTES];
	snprintf(e->workflow, sizeof e->workflow, "%s", workflow);
	snprintf(e->asked, sizeof e->asked, "%s", group ? group : "");
	snprintf(e->prefer, sizeof e->prefer, "%s", prefer ? prefer : "");
	snprintf(e->group, sizeof e->group, "%s", routed);
	snprintf(e->warning, sizeof e->warning, "%s", warning ? warning : "");
	e->at_ms = clock_mono_ms();
}

/* cairn.route (migrations 0020 and 0028), in a statement of its own: a
 * PL/pgSQL function since 0028, which Citus runs on the coordinator (its
 * read of cairn.workflows, a reference table, planned as a statement of
 * its own), where it refused the SQL function that 0020 made. */
static const char SQL_ROUTE[] =
    "SELECT shard_group, warning FROM cairn.route($1, $2, $3, $4::bool)";

/* The route of workflow's runs asked into group (NULL: none) with prefer
 * (NULL: none), a cached one or cairn.route's, kept: CAIRN_OK with *out,
 * or the client's error (require: CAIRN_ENOTFOUND for a workflow the
 * group never served, in cairn.route's words). */
static int route_to(cairn_client *c, const char *workflow, const char *group, const char *prefer,
                    int require, const client_route **out)
{
	if ((*out = route_cached(c, workflow, group, prefer, require)))
		return CAIRN_OK;
	const char *p[] = {workflow, group, prefer, require ? "t" : "f"};
	PGresult *r = db_exec(c->conn, &c->err, SQL_ROUTE, 4, p);
	if (!r)
		return enqueue_failed(c);
	route_keep(c, workflow, group, prefer, PQgetvalue(r, 0, 0),
	           PQgetisnull(r, 0, 1) ? NULL : PQgetvalue(r, 0, 1));
	PQclear(r);
	/* Not kept: a warning longer than a route holds, which names of at
	 * most 128 bytes do not make. */
	return (*out = route_find(c, workflow, group, prefer))
	           ? CAIRN_OK
	           : client_fail(c, CAIRN_EDB, "cannot keep the route of %s", workflow);
}

/* A new run sent by a cached route that warned: its warning, as the
 * statement that routed would have given it. */
static int cached_warning(cairn_client *c, cairn_enqueued *out, const char *warning)
{
	add_warning(c, warning);
	out->warning = strdup(warning);
	return out->warning && !c->warning.oom
	           ? CAIRN_OK
	           : client_fail(c, CAIRN_ENOMEM, "out of memory reading the run's warning");
}

/* How an enqueue places its runs, besides their options: the run that
 * starts them (0: none; a child's parent), and the group preferred among
 * those that serve the workflow (NULL: none; the starting run's group). */
typedef struct enqueue_from {
	int64_t parent;
	const char *prefer;
} enqueue_from;

/* One run: the prepared INSERT, then (a key that exists) a read of its run.
 * The INSERT waits for a concurrent enqueue of the same key to commit, so
 * the read sees that run, unless it was deleted in between: then the key
 * is free again, and the INSERT is tried once more. */
/* o's traceparent as it is stored (version 00, trace.h) into tp, or NULL. */
static const char *traceparent_of(const cairn_enqueue_opts *o, char *tp)
{
	uint8_t tid[16], sid[8], flags;
	char why[PARSE_ERR_MAX];
	if (!o->traceparent || trace_parse(o->traceparent, tid, sid, &flags, why) < 0)
		return NULL;
	trace_format(tp, tid, sid, flags);
	return tp;
}

static void wake_run(cairn_client *c, int64_t id, const char *wake, const char *part);

/* With parts, the run of parameters p (ST_ENQUEUE_TO's 13), by
 * ST_ENQUEUE_VALUES, or with a concurrency key by ST_HELD_IN then
 * ST_ENQUEUE_HELD. */
static PGresult *enqueue_in_part(cairn_client *c, const char *const *p)
{
	if (!p[9])
		return exec_one(c, &ST_ENQUEUE_VALUES, 13, p);
	const char *hp[] = {p[0], p[9], p[12]};
	PGresult *h = exec_one(c, &ST_HELD_IN, 3, hp);
	if (!h)
		return NULL;
	const char *ph[14];
	memcpy(ph, p, 13 * sizeof *p);
	ph[13] = PQgetvalue(h, 0, 0);
	PGresult *r = exec_one(c, &ST_ENQUEUE_HELD, 14, ph);
	PQclear(h);
	return r;
}

/*
 * With parts, the run of parameters p (enqueue_in_part) and its key in
 * the part of the key, key_part (ST_RUN_KEY), in one transaction: two
 * tasks, on one node or two. Their parts differ when the run has a
 * concurrency key. A key that a run holds, in its part or in another,
 * inserts nothing: the answer is then one without rows, as the insert's
 * for a key that exists, and the caller reads that run. NULL: a statement
 * failed (rolled back, db_last_sqlstate its).
 */
static PGresult *enqueue_keyed(cairn_client *c, const char *const *p, const char *key_part)
{
	if (db_cmd(c->conn, &c->err, "BEGIN", 0, NULL) < 0)
		return NULL;
	PGresult *r = enqueue_in_part(c, p), *k = NULL;
	if (r && PQntuples(r) == 1) {
		const char *kp[] = {key_part, p[0], p[1], PQgetvalue(r, 0, 0)};
		if (!(k = exec_one(c, &ST_RUN_KEY, 4, kp))) {
			PQclear(r);
			r = NULL;
		}
	}
	int kept = k && PQntuples(k) == 1;
	PQclear(k);
	if (kept && db_cmd(c->conn, &c->err, "COMMIT", 0, NULL) == 0)
		return r;
	db_rollback(c->conn);
	if (!r || kept) { /* kept: the commit failed */
		PQclear(r);
		return NULL;
	}
	PQclear(r);
	return PQmakeEmptyPGresult(c->conn, PGRES_TUPLES_OK);
}

static int enqueue_one(cairn_client *c, const char *workflow, const cairn_enqueue_opts *o,
                       const char *key, int shards, int want_result, enqueue_from from,
                       cairn_enqueued *out)
{
	int64_t parent = from.parent;
	char shard[24], maxa[24], delay[24], at[24], par[24], prio[24], part[24];
	char tp[TRACEPARENT_LEN + 1];
	int sh = run_shard(o, key, shards);
	buf sealed = BUF_INIT;
	const char *input = seal_for(c, SEAL_RUN_INPUT, o->input ? o->input : "null", &sealed);
	if (!input) {
		buf_free(&sealed);
		return client_fail(c, CAIRN_ENOMEM, "out of memory encrypting the input");
	}
	const char *p[] = {workflow,
	                   key,
	                   o->group,
	                   db_i64(shard, sh),
	                   input,
	                   db_i64(maxa, o->max_attempts ? o->max_attempts : 3),
	                   db_i64(delay, o->delay_ms),
	                   o->at_unix_ms ? db_i64(at, o->at_unix_ms) : NULL,
	                   parent ? db_i64(par, parent) : NULL,
	                   o->concurrency_key,
	                   db_i64(prio, o->priority),
	                   from.prefer,
	                   o->require_served ? "t" : "f",
	                   traceparent_of(o, tp),
	                   db_i64(part, client_part(c, sh))};
	char key_part[24]; /* with parts: the part of its key (run_keys) */
	/* ST_ENQUEUE_TO's parameters: the first 11, the traceparent and the
	 * part. */
	const char *pto[] = {p[0], p[1], p[2], p[3],  p[4],  p[5], p[6],
	                     p[7], p[8], p[9], p[10], p[13], p[14]};
	/* ST_ENQUEUE_PUSH_ROUTE's: ST_ENQUEUE_TO's, then how to route. */
	const char *pr[] = {p[0], p[1], p[2],  p[3],  p[4],  p[5],  p[6], p[7],
	                    p[8], p[9], p[10], p[13], p[14], p[11], p[12]};

	const char *wake[] = {o->group, shard, "", workflow, key, from.prefer};
	const char *look[] = {workflow, key, want_result ? "t" : "f"};
	client_route *cached = route_cached(c, workflow, o->group, from.prefer, o->require_served);
	int rc = -1;
	/* With parts (a database `cairn migrate --citus` distributed), the
	 * route first, in a statement of its own (SQL_ROUTE reads reference
	 * tables only), then the insert as with a cached route, alone, and the
	 * wake-up after it by the run's id (wake_run: cairn.wake_runs reads the
	 * run and its owner in the part and notifies from the coordinator).
	 * Citus cannot plan ST_ENQUEUE, whose held column calls
	 * cairn.flow_active (a SQL function over every part), nor ST_WAKE_TO,
	 * which reads shard_leases and runs without their part. One server
	 * keeps the one round trip. */
	int split = c->settings.nparts > 1;
	if (split)
		db_i64(key_part, client_part(c, hash_shard(key, shards)));
	if (!cached && split) {
		const client_route *e;
		if ((rc = route_to(c, workflow, o->group, from.prefer, o->require_served, &e))) {
			buf_free(&sealed);
			return rc;
		}
		cached = (client_route *)e;
		rc = -1;
	}
	if (cached) /* no route: the group, and its warning, as just before */
		p[2] = pto[2] = wake[0] = cached->group;
	int64_t now = clock_mono_ms();
	int in_tx = !o->concurrency_key && !o->delay_ms && !o->at_unix_ms &&
	            c->settings.nparts <= 1 && now - c->last_enqueue_ms >= CLIENT_WAKE_IN_GAP_MS &&
	            client_schema_version(c) >= PUSH_SCHEMA;
	int unsettled = 0; /* ST_ENQUEUE_PUSH inserted a run it did not hand over */
	for (int attempt = 0; attempt < 3 && rc < 0; attempt++) {
		int missing;
		const db_stmt *ins = !o->concurrency_key ? &ST_ENQUEUE_VALUES : &ST_ENQUEUE_TO;
		PGresult *r = split             ? enqueue_keyed(c, pto, key_part)
		              : in_tx && cached ? exec_one(c, &ST_ENQUEUE_PUSH, 13, pto)
		              : in_tx           ? exec_one(c, &ST_ENQUEUE_PUSH_ROUTE, 15, pr)
		              : cached          ? exec_then(c, ins, 13, pto, &ST_WAKE_TO, 5, wake)
		                       : exec_then(c, &ST_ENQUEUE, 15, p, &ST_WAKE_SHARD, 6, wake);
		unsettled = in_tx && r && PQntuples(r) == 1 && !db_get_bool(r, 0, PUSH_SETTLED);
		if (!r || (rc = read_enqueued(c, r, 1, out, want_result, &missing)) || !missing) {
			rc = r ? rc : enqueue_failed(c);
			if (!rc && cached && !out->existed && cached->warning[0])
				rc = cached_warning(c, out, cached->warning);
			if (!rc && !cached && !out->existed && c->routed[0])
				route_keep(c, workflow, o->group, from.prefer, c->routed,
				           out->warning);
			break;
		}
		r = db_exec(c->conn, &c->err, SQL_ENQUEUED, 3, look);
		if (!r || (rc = read_enqueued(c, r, 1, out, want_result, &missing)) || !missing)
			rc = r ? rc : client_db_fail(c);
		else
			rc = -1;
	}
	buf_free(&sealed);
	c->last_enqueue_ms = clock_mono_ms();
	if (rc < 0)
		return raced(c);
	if (!rc && split)
		wake_run(c, out->id, "", p[14]);
	if (!rc && unsettled) {
		wake[0] = cached ? cached->group : c->routed;
		PQclear(exec_one(c, &ST_WAKE_TO, 5, wake));
	}
	if (!rc && out->held && !out->existed) {
		pgarr k = PGARR_INIT;
		pgarr_add(&k, o->concurrency_key);
		rc = release_held(c, workflow, &k);
		pgarr_free(&k);
	}
	return rc;
}

/* Whether runs a and b are routed alike: the same group asked (or none)
 * and the same require_served. */
static int same_route(const cairn_enqueue_opts *a, const cairn_enqueue_opts *b)
{
	return a->require_served == b->require_served &&
	       (a->group == b->group || (a->group && b->group && strcmp(a->group, b->group) == 0));
}

/* The owners of the n new runs out (their parts from their ids' shards)
 * woken after the batch's commit, from the coordinator (cairn.wake_new,
 * migration 0028). Like every wake-up, lost on failure: the poll
 * fallback makes up for it. */
static void wake_new(cairn_client *c, size_t n, const cairn_enqueued *out)
{
	pgarr ids = PGARR_INIT, parts = PGARR_INIT;
	for (size_t i = 0; i < n; i++)
		if (!out[i].existed) {
			pgarr_add_i64(&ids, out[i].id);
			pgarr_add_i64(&parts, client_part(c, (int)(out[i].id % RUN_ID_SHARDS)));
		}
	const char *p[] = {pgarr_str(&ids), pgarr_str(&parts)};
	if (ids.n && !ids.b.oom && !parts.b.oom)
		PQclear(db_exec(c->conn, NULL,
		                "SELECT cairn.wake_new($1::bigint[], $2::int[]), " WAKE_NO_DISK, 2,
		                p));
	pgarr_free(&ids);
	pgarr_free(&parts);
}

/* With parts, a batch of new runs (news, 11 parameters fresh: ENQUEUE_NEW's)
 * and their keys in their keys' parts (SQL_RUN_KEYS; the parts kparts), in
 * one transaction: 0, -1 when a statement failed (rolled back,
 * db_last_sqlstate its: unique_violation when a key exists), or read_new's
 * error. */
static int enqueue_new_keyed(cairn_client *c, const db_stmt *news, const char *const *fresh,
                             size_t n, pgarr *kparts, cairn_enqueued *out)
{
	if (db_cmd(c->conn, &c->err, "BEGIN", 0, NULL) < 0)
		return -1;
	PGresult *r = exec_one(c, news, 11, fresh);
	int rc = r ? read_new(c, r, n, out) : -1;
	pgarr ids = PGARR_INIT;
	for (size_t i = 0; !rc && i < n; i++)
		pgarr_add_i64(&ids, out[i].id);
	const char *p[] = {fresh[0], pgarr_str(kparts), fresh[1], pgarr_str(&ids)};
	if (!rc && (ids.b.oom || kparts->b.oom))
		rc = client_fail(c, CAIRN_ENOMEM, "out of memory building the batch");
	if (!rc && (db_cmd(c->conn, &c->err, SQL_RUN_KEYS, 4, p) < 0 ||
	            db_cmd(c->conn, &c->err, "COMMIT", 0, NULL) < 0))
		rc = -1;
	if (rc)
		db_rollback(c->conn);
	pgarr_free(&ids);
	return rc;
}

/* cairn_enqueue_batch, and with want_result also each existing finished
 * run's output and error (cairn_enqueue). */
static int enqueue(cairn_client *c, const char *workflow, size_t n, const cairn_enqueue_opts *opts,
                   cairn_enqueued *out, int want_result, enqueue_from from)
{
	buf_reset(&c->warning);
	if (n == 0)
		return CAIRN_OK;
	if (n > 100000)
		return client_invalid(c, "n", "batch of %zu runs: at most 100000 are accepted", n);
	for (size_t i = 0; i < n; i++) {
		char msg[PARSE_ERR_MAX];
		const char *field = check_opts(c, workflow, &opts[i], msg);
		if (field && n == 1)
			return client_invalid(c, field, "%s", msg);
		if (field)
			return client_invalid(c, field, "opts[%zu]: %s", i, msg);
	}
	int shards, rc = client_shards(c, &shards);
	if (rc)
		return rc;
	char gen[33];
	if (n == 1) {
		if (!opts[0].key)
			fresh_key(gen);
		return enqueue_one(c, workflow, &opts[0], opts[0].key ? opts[0].key : gen, shards,
		                   want_result, from, out);
	}
	pgarr keys = PGARR_INIT, groups = PGARR_INIT, sh = PGARR_INIT, inputs = PGARR_INIT,
	      maxa = PGARR_INIT, delays = PGARR_INIT, ats = PGARR_INIT, ckeys = PGARR_INIT,
	      prios = PGARR_INIT, held = PGARR_INIT, reqs = PGARR_INIT, tps = PGARR_INIT,
	      parts = PGARR_INIT, kparts = PGARR_INIT;
	int split = c->settings.nparts > 1;
	buf sealed = BUF_INIT;
	int keyed = 0;                 /* a run of the batch has a concurrency key */
	const client_route *to = NULL; /* the route of the run before */
	for (size_t i = 0; i < n; i++) {
		const cairn_enqueue_opts *o = &opts[i];
		const char *key = o->key;
		if (!key) {
			fresh_key(gen);
			key = gen;
		}
		/* Routed here, with the client's routes (cached for a second),
		 * so that the insert of new runs reads no other table; their
		 * warnings are the batch's if its runs are all new. A run asked
		 * as the one before it goes where that one went. */
		if (!to || !same_route(o, &opts[i - 1])) {
			if ((rc = route_to(c, workflow, o->group, NULL, o->require_served, &to)))
				goto done;
			add_warning(c, to->warning[0] ? to->warning : NULL);
		}
		pgarr_add(&keys, key);
		pgarr_add(&groups, to->group);
		pgarr_add(&reqs, o->require_served ? "t" : "f");
		char tp[TRACEPARENT_LEN + 1];
		pgarr_add(&tps, traceparent_of(o, tp));
		int run_sh = run_shard(o, key, shards);
		pgarr_add_i64(&sh, run_sh);
		pgarr_add_i64(&parts, client_part(c, run_sh));
		if (split) /* the part of its key (run_keys) */
			pgarr_add_i64(&kparts, client_part(c, hash_shard(key, shards)));
		pgarr_add(&ckeys, o->concurrency_key);
		keyed |= o->concurrency_key != NULL;
		pgarr_add_i64(&prios, o->priority);
		pgarr_add(&inputs,
		          seal_for(c, SEAL_RUN_INPUT, o->input ? o->input : "null", &sealed));
		inputs.b.oom |= sealed.oom;
		pgarr_add_i64(&maxa, o->max_attempts ? o->max_attempts : 3);
		pgarr_add_i64(&delays, o->delay_ms);
		if (o->at_unix_ms)
			pgarr_add_i64(&ats, o->at_unix_ms);
		else
			pgarr_add(&ats, NULL);
	}
	const char *params[] = {workflow,           pgarr_str(&keys),   pgarr_str(&groups),
	                        pgarr_str(&sh),     pgarr_str(&inputs), pgarr_str(&maxa),
	                        pgarr_str(&delays), pgarr_str(&ats),    want_result ? "t" : "f",
	                        pgarr_str(&ckeys),  pgarr_str(&prios),  pgarr_str(&reqs),
	                        pgarr_str(&tps),    pgarr_str(&parts)};
	const char *wake[] = {pgarr_str(&groups), pgarr_str(&sh), "", workflow};
	const db_stmt batch = {NULL, keyed ? SQL_ENQUEUE_BATCH_KEYED : SQL_ENQUEUE_BATCH};
	if (keys.b.oom || inputs.b.oom || groups.b.oom || ats.b.oom || sh.b.oom || maxa.b.oom ||
	    delays.b.oom || ckeys.b.oom || prios.b.oom || reqs.b.oom || tps.b.oom || parts.b.oom) {
		rc = client_fail(c, CAIRN_ENOMEM, "out of memory building the batch");
		goto done;
	}
	/* The planner cannot know that each run inserted matches one input row
	 * and costs the batch high enough to JIT-compile it, which takes longer
	 * (23 ms for 10,000 runs) than it saves. Off for this session, once,
	 * unless it is a pooler's and not ours to change. */
	if (!c->jit_off && !c->settings.pooled)
		c->jit_off = db_cmd(c->conn, NULL, "SET jit = off", 0, NULL) == 0;
	/* New runs, the common case: a plain INSERT (ENQUEUE_NEW). A key that
	 * exists makes it fail, and the batch goes again as ENQUEUE_BATCH. */
	const char *fresh[] = {workflow,           pgarr_str(&keys),   pgarr_str(&groups),
	                       pgarr_str(&sh),     pgarr_str(&inputs), pgarr_str(&maxa),
	                       pgarr_str(&delays), pgarr_str(&ats),    pgarr_str(&ckeys),
	                       pgarr_str(&prios),  pgarr_str(&parts)};
	const db_stmt news = {NULL, !keyed  ? SQL_ENQUEUE_NEW
	                            : split ? SQL_ENQUEUE_NEW_KEYED_IN
	                                    : SQL_ENQUEUE_NEW_KEYED};
	/* With parts (Citus), the runs' keys too, and the wake-up after the
	 * commit by the runs' ids (cairn.wake_new, from the coordinator):
	 * ST_WAKE_SHARDS reads shard_leases without their part and would
	 * notify from the nodes. */
	if (split) {
		rc = enqueue_new_keyed(c, &news, fresh, n, &kparts, out);
	} else {
		PGresult *nr = exec_then(c, &news, 11, fresh, &ST_WAKE_SHARDS, 4, wake);
		rc = nr ? read_new(c, nr, n, out) : -1;
	}
	if (!rc) {
		if (split)
			wake_new(c, n, out);
		goto release;
	}
	if (rc > 0)
		goto done;
	rc = 0;
	if (strcmp(db_last_sqlstate(), "23505") != 0) {
		rc = client_db_fail(c);
		goto done;
	}
	/* With parts, a batch with a key that exists goes run by run (the
	 * single enqueue finds the existing run): ENQUEUE_BATCH, whose
	 * lookups of existing runs are joined to the insert's, is a statement
	 * that Citus does not plan. The batch's warnings are then its runs'. */
	if (split) {
		buf_reset(&c->warning);
		for (size_t i = 0; !rc && i < n; i++) {
			const char *key = opts[i].key;
			if (!key) {
				fresh_key(gen);
				key = gen;
			}
			rc = enqueue_one(c, workflow, &opts[i], key, shards, 0, from, &out[i]);
			if (!rc && out[i].warning) {
				add_warning(c, out[i].warning);
				free(out[i].warning);
				out[i].warning = NULL;
			}
		}
		goto done;
	}
	/* The routes' warnings were those of new runs: ENQUEUE_BATCH gives
	 * those of the runs it makes new. A concurrent enqueue of the same key
	 * can commit after our snapshot: the insert skips it but the lookup
	 * cannot see it yet, so try once more. */
	buf_reset(&c->warning);
	for (int attempt = 0; attempt < 3; attempt++) {
		int missing;
		PGresult *r = exec_then(c, &batch, 14, params, &ST_WAKE_SHARDS, 4, wake);
		if (!r) {
			rc = enqueue_failed(c);
			goto done;
		}
		if ((rc = read_enqueued(c, r, n, out, 0, &missing)) || !missing)
			goto release;
	}
	rc = raced(c);
	goto done;
release:
	/* The keys of the new runs the batch held (each is released once). */
	for (size_t i = 0; !rc && i < n; i++)
		if (out[i].held && !out[i].existed)
			pgarr_add(&held, opts[i].concurrency_key);
	if (!rc && held.n)
		rc = release_held(c, workflow, &held);
done:
	pgarr_free(&keys);
	pgarr_free(&groups);
	pgarr_free(&sh);
	pgarr_free(&inputs);
	pgarr_free(&maxa);
	pgarr_free(&delays);
	pgarr_free(&ats);
	pgarr_free(&ckeys);
	pgarr_free(&prios);
	pgarr_free(&held);
	pgarr_free(&reqs);
	pgarr_free(&tps);
	pgarr_free(&parts);
	pgarr_free(&kparts);
	buf_free(&sealed);
	return rc;
}

int cairn_enqueue_batch(cairn_client *c, const char *workflow, size_t n,
                        const cairn_enqueue_opts *opts, cairn_enqueued *out)
{
	/* out[i] may be uninitialised: give enqueue() NULLs to clear. */
	for (size_t i = 0; i < n && n <= 100000; i++)
		out[i].output = out[i].error = out[i].warning = NULL;
	/* Its warning is the client's (cairn_client_warning), so that its
	 * results need no clearing. */
	return enqueue(c, workflow, n, opts, out, 0, (enqueue_from){0, NULL});
}

int cairn_enqueue(cairn_client *c, const char *workflow, const cairn_enqueue_opts *opts,
                  cairn_enqueued *out)
{
	cairn_enqueue_opts none = {0};
	*out = (cairn_enqueued){0};
	return enqueue(c, workflow, 1, opts ? opts : &none, out, 1, (enqueue_from){0, NULL});
}

int client_enqueue_child(cairn_client *c, const char *workflow, const cairn_enqueue_opts *o,
                         int64_t parent, const char *prefer, cairn_enqueued *out)
{
	*out = (cairn_enqueued){0};
	return enqueue(c, workflow, 1, o, out, 0, (enqueue_from){parent, prefer});
}

int client_route_child(cairn_client *c, const char *workflow, const char *prefer, char *group,
                       size_t size, char **warning)
{
	const client_route *e;
	int rc = route_to(c, workflow, NULL, prefer, 0, &e);
	*warning = NULL;
	if (rc)
		return rc;
	snprintf(group, size, "%s", e->group);
	if (e->warning[0] && !(*warning = strdup(e->warning)))
		return client_fail(c, CAIRN_ENOMEM, "out of memory reading the route's warning");
	return CAIRN_OK;
}

void cairn_enqueued_clear(cairn_enqueued *e)
{
	free(e->output);
	free(e->error);
	free(e->warning);
	e->output = e->error = e->warning = NULL;
}

/* ------------------------------------------------------- signal, cancel */

int cairn_run_resolve(cairn_client *c, const char *ref, int64_t *id)
{
	char err[PARSE_ERR_MAX];
	if (!ref || !*ref)
		return client_invalid(c, "run",
		                      "run must not be empty: expected an id or WORKFLOW/KEY");
	const char *slash = strchr(ref, '/');
	PGresult *r;
	char idtxt[24];
	if (!slash) {
		int64_t v;
		if (parse_int(ref, 1, INT64_MAX, &v, err) < 0)
			return client_invalid(
			    c, "run", "invalid run \"%s\": expected a numeric id or WORKFLOW/KEY",
			    ref);
		const char *p[] = {db_i64(idtxt, v)};
		r = db_exec(c->conn, &c->err, "SELECT id FROM cairn.runs WHERE id = $1", 1, p);
	} else {
		char wf[NAME_MAX_BYTES + 1];
		size_t wl = (size_t)(slash - ref);
		if (wl == 0 || wl > NAME_MAX_BYTES)
			return client_invalid(c, "run", "invalid run \"%s\": expected WORKFLOW/KEY",
			                      ref);
		memcpy(wf, ref, wl);
		wf[wl] = '\0';
		if (parse_check_name("workflow", wf, err) < 0 ||
		    parse_check_key(slash + 1, err) < 0)
			return client_invalid(c, "run", "invalid run \"%s\": %s", ref, err);
		const char *p[] = {wf, slash + 1};
		r = db_exec(c->conn, &c->err,
		            "SELECT id FROM cairn.runs WHERE workflow = $1 AND key = $2", 2, p);
	}
	if (!r)
		return client_db_fail(c);
	int found = PQntuples(r) == 1;
	if (found)
		*id = db_get_i64(r, 0, 0);
	PQclear(r);
	return found ? CAIRN_OK : client_fail(c, CAIRN_ENOTFOUND, "run \"%s\" not found", ref);
}

/* The run a signal or a cancel sent to run $1 is for: the last of its
 * chain (cairn_continue_as_new, migration 0022), $1 itself when it never
 * continued, as the statement's snapshot sees it. A chain stays in its
 * shard, so in the part of $1 (part, a parameter: client_run_part). */
#define LIVE_RUN(part)                                                                             \
	"(SELECT coalesce((SELECT max(c.id) FROM cairn.runs c "                                    \
	"                   WHERE c.part = " part                                                  \
	" AND c.chain_id = coalesce(x.chain_id, x.id)), "                                          \
	"                 x.id) "                                                                  \
	"  FROM cairn.runs x WHERE x.part = " part " AND x.id = $1)"

/*
 * The part that holds run id (docs/architecture.md, "On Citus"), for the
 * statements that name it: the one part of one server; with parts, the
 * part of the shard the id carries (cairn.new_run_id), or, for a run made
 * before migration 0025 (an id below first_placed_id, which carries no
 * shard), the part its row names, read once. A run that does not exist
 * gets the first part: the statement then finds no run.
 */
int client_run_part(cairn_client *c, int64_t id, int *part)
{
	int shards, rc = client_shards(c, &shards);
	if (rc)
		return rc;
	*part = c->settings.part_keys[0];
	if (c->settings.nparts <= 1)
		return CAIRN_OK;
	if (id >= c->settings.first_placed_id) {
		*part = client_part(c, (int)(id % RUN_ID_SHARDS));
		return CAIRN_OK;
	}
	char idtxt[24];
	const char *p[] = {db_i64(idtxt, id)};
	PGresult *r = db_exec(c->conn, &c->err, "SELECT part FROM cairn.runs WHERE id = $1", 1, p);
	if (!r)
		return client_db_fail(c);
	if (PQntuples(r) == 1)
		*part = db_get_int(r, 0, 0);
	PQclear(r);
	return CAIRN_OK;
}

/* The parameters of a statement that reads run id in its part: p[0] the
 * id, p[1] the part (client_run_part), in the texts given. */
static int run_and_part(cairn_client *c, int64_t id, char idtxt[24], char parttxt[24],
                        const char *p[2])
{
	int part, rc = client_run_part(c, id, &part);
	p[0] = db_i64(idtxt, id);
	p[1] = db_i64(parttxt, part);
	return rc;
}

/* A run holds at most max_pending_signals unconsumed signals (cairn.settings):
 * one more is refused. Two signals sent at the same moment can both pass the
 * count; a worker loads the oldest max_pending_signals of a run's signals, so
 * such a run is never stuck loading. The signal goes to the last run of $1's
 * chain (LIVE_RUN), whose row it locks (FOR SHARE) until it commits: a
 * commit that continues that run as new waits for it, and its successor
 * finds the signal (see cont in commit.c); a run that continued while this
 * waited reads as finished, and signal_send tries its successor. The
 * statement is cairn.signal_in's (migration 0034): on Citus one call, sent
 * whole to the node of the run's part ($6). */
static const char SQL_SIGNAL[] = "SELECT * FROM cairn.signal_in($1, $2, $3, $4, $5, $6)";

/* Wakes the owner of run id's shard (the payload wake), in a statement of
 * its own. */
static void wake_run(cairn_client *c, int64_t id, const char *wake, const char *part)
{
	char ids[32];
	snprintf(ids, sizeof ids, "{%" PRId64 "}", id);
	const char *w[] = {ids, wake, part};
	int slot;
	db_send how = send_how(c, &ST_WAKE_RUNS, &slot);
	PQclear(how == DB_NAMED ? db_exec_prepared(c->conn, NULL, ST_WAKE_RUNS.name, 3, w)
	                        : db_exec(c->conn, NULL, ST_WAKE_RUNS.sql, 3, w));
}

/* Runs a statement whose first row's first column is "run already finished"
 * (its third, if any, why the run refused), then wakes the run's owner with
 * the payload wake (the run in part, which its chain shares). outcome (CLIENT_OUTCOME_MAX bytes;
 * may be NULL) gets the fourth column: what the write did. A fifth column is the run the statement
 * wrote for (the last of a chain, LIVE_RUN), into *target (may be NULL), whose owner is woken too
 * when it is another. */
static int run_state_cmd(cairn_client *c, int64_t run_id, const char *sql, int n,
                         const char *const *params, const char *verb, const char *wake,
                         const char *part, char *outcome, int64_t *target)
{
	char ids[32];
	snprintf(ids, sizeof ids, "{%" PRId64 "}", run_id);
	const char *w[] = {ids, wake, part};
	const db_stmt st = {NULL, sql};
	PGresult *r = exec_then(c, &st, n, params, &ST_WAKE_RUNS, 3, w);
	if (!r)
		return client_db_fail(c);
	int rc = CAIRN_OK;
	int64_t to = run_id;
	if (PQntuples(r) == 1 && PQnfields(r) > 4)
		to = db_get_i64(r, 0, 4);
	if (target)
		*target = to;
	if (PQntuples(r) == 0)
		rc = client_fail(c, CAIRN_ENOTFOUND, "run %" PRId64 " not found", run_id);
	else if (db_get_bool(r, 0, 0))
		rc =
		    client_fail(c, CAIRN_ESTATE, "cannot %s run %" PRId64 ": %s", verb, run_id,
		                PQnfields(r) > 2 ? PQgetvalue(r, 0, 2) : "it has already finished");
	else if (outcome && PQnfields(r) > 3)
		snprintf(outcome, CLIENT_OUTCOME_MAX, "%s", PQgetvalue(r, 0, 3));
	PQclear(r);
	if (rc == CAIRN_OK && to != run_id)
		wake_run(c, to, wake, part);
	return rc;
}

/* A write for the last run of run_id's chain (SQL_SIGNAL, SQL_CANCEL):
 * when it found that run finished, it may have continued as new while the
 * write waited for its lock; then the write goes to its successor. */
static int live_run_cmd(cairn_client *c, int64_t run_id, const char *sql, int n,
                        const char *const *params, const char *verb, const char *wake,
                        const char *part, char *outcome, int64_t *target)
{
	int rc;
	for (int tries = 0;; tries++) {
		int64_t tried, last;
		rc = run_state_cmd(c, run_id, sql, n, params, verb, wake, part, outcome, &tried);
		if (target)
			*target = tried;
		if (rc != CAIRN_ESTATE || tries == 10 || cairn_run_last(c, run_id, &last) ||
		    last == tried)
			break;
	}
	return rc;
}

static int signal_send(cairn_client *c, int64_t run_id, const char *name, const char *payload,
                       const char *nonce, char *outcome);

int cairn_signal(cairn_client *c, int64_t run_id, const char *name, const char *payload)
{
	return signal_send(c, run_id, name, payload, NULL, NULL);
}

int client_signal_outcome(cairn_client *c, int64_t run_id, const char *name, const char *payload,
                          int *delivered)
{
	char outcome[CLIENT_OUTCOME_MAX] = "";
	int rc = signal_send(c, run_id, name, payload, NULL, outcome);
	*delivered = strcmp(outcome, CLIENT_SIGNAL_DELIVERED) == 0;
	return rc;
}

int client_signal_once(cairn_client *c, int64_t run_id, const char *name, const char *payload,
                       const char *nonce)
{
	return signal_send(c, run_id, name, payload, nonce, NULL);
}

static int signal_send(cairn_client *c, int64_t run_id, const char *name, const char *payload,
                       const char *nonce, char *outcome)
{
	char err[PARSE_ERR_MAX];
	if (parse_check_name("signal name", name, err) < 0)
		return client_invalid(c, "signal", "%s", err);
	if (payload && (parse_check_json("signal payload", payload, c->max_payload, err) < 0 ||
	                client_check_unsealed("signal payload", payload, err) < 0))
		return client_invalid(c, "payload", "%s", err);
	int shards, rc = client_shards(c, &shards); /* reads the limits too */
	if (rc)
		return rc;
	int part;
	if ((rc = client_run_part(c, run_id, &part)))
		return rc;
	char idtxt[24], cap[24], parttxt[24];
	buf sealed = BUF_INIT;
	const char *p[] = {db_i64(idtxt, run_id),
	                   name,
	                   seal_for(c, SEAL_SIGNAL_PAYLOAD, payload ? payload : "null", &sealed),
	                   db_i64(cap, c->settings.max_pending_signals),
	                   nonce,
	                   db_i64(parttxt, part)};
	rc = p[2] ? live_run_cmd(c, run_id, SQL_SIGNAL, 6, p, "signal", "", p[5], outcome, NULL)
	          : client_fail(c, CAIRN_ENOMEM, "out of memory encrypting the payload");
	buf_free(&sealed);
	return rc;
}

/* A run that has not started is cancelled at once; a started one gets the
 * request and a cancel message, and ends cancelled at its next durable call.
 * A cancel of a run that continued as new is for the last run of its chain,
 * as a signal is (SQL_SIGNAL). The statement is cairn.cancel_in's
 * (migration 0035): on Citus one call, sent whole to the node of the run's
 * part ($2). A child that has not started is cancelled by
 * cairn.cancel_told instead (cancel_in answers 'tell'), which tells its
 * parent in the same transaction as the commit that ends a child does
 * (cairn.children_ended, migrations 0024 and 0027): its outcome ($3,
 * sealed as the commit seals it), and the parent's wait counted down. */
static const char SQL_CANCEL[] = "SELECT * FROM cairn.cancel_in($1, $2, false)";
static const char SQL_CANCEL_TOLD[] = "SELECT * FROM cairn.cancel_told($1, $2, $3)";
static const char SQL_DONE_NOTIFY[] = "SELECT pg_notify('" CAIRN_DONE_CHANNEL "', $1)";

const char *client_sql_signal(void)
{
	return SQL_SIGNAL;
}

const char *client_sql_cancel(void)
{
	return SQL_CANCEL;
}

int cairn_cancel(cairn_client *c, int64_t run_id)
{
	return client_cancel_outcome(c, run_id, NULL);
}

/* The end a child cancelled before it starts sends its parent ($3 of
 * SQL_CANCEL_TOLD), as the commit that ends a child writes it: sealed when
 * this client has keys, as every signal payload at rest is. */
#define CANCELLED_END "{\"status\":\"cancelled\",\"output\":null,\"error\":\"cancelled\"}"

int client_cancel_outcome(cairn_client *c, int64_t run_id, char *status)
{
	int part, rc = client_run_part(c, run_id, &part);
	if (rc)
		return rc;
	char idtxt[24], parttxt[24], outcome[CLIENT_OUTCOME_MAX] = "", done[24];
	int64_t target = run_id;
	const char *p[] = {db_i64(idtxt, run_id), db_i64(parttxt, part), NULL};
	rc = live_run_cmd(c, run_id, SQL_CANCEL, 2, p, "cancel", CAIRN_WAKE_CANCEL, p[1], outcome,
	                  &target);
	if (!rc && strcmp(outcome, "tell") == 0) {
		buf sealed = BUF_INIT;
		p[2] = seal_for(c, SEAL_SIGNAL_PAYLOAD, CANCELLED_END, &sealed);
		rc = p[2] ? live_run_cmd(c, run_id, SQL_CANCEL_TOLD, 3, p, "cancel",
		                         CAIRN_WAKE_CANCEL, p[1], outcome, &target)
		          : client_fail(c, CAIRN_ENOMEM, "out of memory encrypting the payload");
		buf_free(&sealed);
		p[2] = NULL;
	} else if (!rc && strcmp(outcome, "cancelled") == 0) {
		/* Ended at once on the node of its part: its waiters listen on
		 * the coordinator (cairn.cancel_told notifies itself). */
		const char *pn[] = {db_i64(done, target)};
		PQclear(db_exec(c->conn, NULL, SQL_DONE_NOTIFY, 1, pn));
	}
	if (!rc && status)
		snprintf(status, CLIENT_OUTCOME_MAX, "%s", outcome);
	if (!rc)
		rc = client_release(c, CLIENT_RELEASE_RUN, p);
	return rc;
}

/* The journal is cut from its first step that is missing or not settled
 * (failed, retrying, waiting): what follows it was decided by an execution
 * that will not happen again. The signals consumed from there on are given
 * back; completed steps and timed-out signal waits before it are replayed. */
static const char SQL_RETRY[] =
    "WITH r AS (SELECT id, status, status NOT IN ('failed', 'cancelled') AS bad "
    "           FROM cairn.runs WHERE part = $2 AND id = $1 FOR UPDATE), "
    /* The first seq that is missing or not settled: the run starts over there. */
    "cut AS (SELECT coalesce(min(g), 0) AS f FROM generate_series(0, "
    "          (SELECT coalesce(max(seq), -1) + 1 FROM cairn.steps "
    "           WHERE part = $2 AND run_id = $1)) g "
    "        WHERE NOT EXISTS (SELECT 1 FROM cairn.steps s WHERE s.part = $2 AND s.run_id = $1 "
    "                          AND s.seq = g "
    "                          AND s.status IN ('completed', 'timed_out'))), "
    "up AS (UPDATE cairn.runs SET status = 'pending', attempt = 0, error = NULL, output = NULL, "
    "           cancel_requested = false, finished_at = NULL, updated_at = now(), "
    "           scheduled_at = now(), start_at = now(), claims = 0, "
    "           journal_cuts = journal_cuts + 1 "
    "       WHERE part = $2 AND id IN (SELECT id FROM r WHERE NOT bad) "
    "       RETURNING id, shard_group, shard), "
    "st AS (DELETE FROM cairn.steps WHERE part = $2 AND run_id IN (SELECT id FROM up) "
    "         AND seq >= (SELECT f FROM cut) RETURNING 1), "
    "gb AS (UPDATE cairn.signals SET consumed_by_seq = NULL "
    "         WHERE part = $2 AND run_id IN (SELECT id FROM up) "
    "         AND consumed_by_seq >= (SELECT f FROM cut) RETURNING 1) "
    "SELECT bad, (SELECT count(*) FROM st) + (SELECT count(*) FROM gb) + "
    "       (SELECT count(*) FROM up), "
    "       'it is ' || status || ', only failed or cancelled runs can be retried' FROM r";

int cairn_retry(cairn_client *c, int64_t run_id)
{
	int part, rc = client_run_part(c, run_id, &part);
	if (rc)
		return rc;
	char idtxt[24], parttxt[24];
	const char *p[] = {db_i64(idtxt, run_id), db_i64(parttxt, part)};
	return run_state_cmd(c, run_id, SQL_RETRY, 2, p, "retry", "", p[1], NULL, NULL);
}

/* ------------------------------------------------------------ run reads */

#define RUN_COLS                                                                                   \
	"id, workflow, key, shard_group, shard, status, attempt, max_attempts, cancel_requested, " \
	"input::text, output::text, error, " MS("created_at") ", " MS("scheduled_at") ", " MS(     \
	    "started_at") ", " MS("updated_at") ", " MS("finished_at") ", parent_id, "             \
	                                                               "code_version, "            \
	                                                               "concurrency_key, "         \
	                                                               "priority, held, "          \
	                                                               "continued_from"

static void run_from_row(cairn_run *run, const PGresult *r, int i)
{
	run->id = db_get_i64(r, i, 0);
	run->workflow = db_get_str(r, i, 1);
	run->key = db_get_str(r, i, 2);
	run->group = db_get_str(r, i, 3);
	run->shard = db_get_int(r, i, 4);
	run->status = db_get_str(r, i, 5);
	run->attempt = db_get_int(r, i, 6);
	run->max_attempts = db_get_int(r, i, 7);
	run->cancel_requested = db_get_bool(r, i, 8);
	run->input = db_get_str(r, i, 9);
	run->output = db_get_str(r, i, 10);
	run->error = db_get_str(r, i, 11);
	run->created_unix_ms = db_get_i64(r, i, 12);
	run->scheduled_unix_ms = db_get_i64(r, i, 13);
	run->started_unix_ms = db_get_i64(r, i, 14);
	run->updated_unix_ms = db_get_i64(r, i, 15);
	run->finished_unix_ms = db_get_i64(r, i, 16);
	run->parent_id = db_get_i64(r, i, 17);
	run->code_version = db_get_str(r, i, 18);
	run->concurrency_key = db_get_str(r, i, 19);
	run->priority = db_get_int(r, i, 20);
	run->held = db_get_bool(r, i, 21);
	run->continued_from = db_get_i64(r, i, 22);
}

/* Decrypts what run_from_row read. */
static int run_unseal(cairn_client *c, cairn_run *run)
{
	int rc = client_unseal(c, SEAL_RUN_INPUT, &run->input, CAIRN_LOCKED_INPUT, CLIENT_LOCK(run),
	                       "the run's input");
	if (!rc)
		rc = client_unseal(c, SEAL_RUN_OUTPUT, &run->output, CAIRN_LOCKED_OUTPUT,
		                   CLIENT_LOCK(run), "the run's output");
	if (!rc)
		rc = client_unseal(c, SEAL_RUN_ERROR, &run->error, CAIRN_LOCKED_ERROR,
		                   CLIENT_LOCK(run), "the run's error");
	return rc;
}

static void run_clear(cairn_run *run)
{
	free(run->workflow);
	free(run->key);
	free(run->group);
	free(run->status);
	free(run->input);
	free(run->output);
	free(run->error);
	free(run->code_version);
	free(run->concurrency_key);
	free(run->waiting_for);
	free(run->runtime);
	free(run->unserved);
	for (size_t i = 0; i < run->nsteps; i++) {
		cairn_step_info *s = &run->steps[i];
		free(s->name);
		free(s->kind);
		free(s->status);
		free(s->output);
		free(s->error);
	}
	free(run->steps);
	for (size_t i = 0; i < run->nchildren; i++) {
		free(run->children[i].workflow);
		free(run->children[i].status);
	}
	free(run->children);
}

void cairn_run_free(cairn_run *run)
{
	if (!run)
		return;
	run_clear(run);
	free(run);
}

/* The run's children (p: its id), into run. */
static int read_children(cairn_client *c, cairn_run *run, const char *const *p)
{
	PGresult *r = db_exec(c->conn, &c->err,
	                      "SELECT id, workflow, status FROM cairn.runs WHERE parent_id = $1 "
	                      "ORDER BY id",
	                      1, p);
	if (!r)
		return client_db_fail(c);
	size_t n = (size_t)PQntuples(r);
	run->children = n ? calloc(n, sizeof *run->children) : NULL;
	int oom = n && !run->children;
	for (size_t i = 0; i < n && !oom; i++) {
		cairn_child_info *k = &run->children[i];
		k->id = db_get_i64(r, (int)i, 0);
		k->workflow = db_get_str(r, (int)i, 1);
		k->status = db_get_str(r, (int)i, 2);
		run->nchildren = i + 1;
		oom = !k->workflow || !k->status;
	}
	PQclear(r);
	return oom ? client_fail(c, CAIRN_ENOMEM, "out of memory reading the children") : CAIRN_OK;
}

/* Why a pending run ($1, in part $2, of workflow $3) has not started, when
 * a limit is the reason. The slots are counted by the workflow given, not
 * the run's row: on Citus, a subquery over every part cannot refer to the
 * row of a statement of one. */
static const char SQL_WAITING_FOR[] =
    "SELECT CASE "
    "  WHEN r.held THEN 'a slot of its concurrency key: ' || l.key_concurrency "
    "    || ' of its runs execute at once' "
    "  WHEN l.concurrency IS NOT NULL AND r.start_at <= now() AND (SELECT count(*) "
    "       FROM cairn.slots s WHERE s.workflow = $3) >= l.concurrency "
    "    THEN 'a slot of the workflow: ' || l.concurrency || ' of its runs execute at once' "
    "  WHEN r.start_at > now() AND (l.rate IS NOT NULL OR l.key_rate IS NOT NULL) "
    "    THEN 'its turn under the rate limit, due at ' "
    "      || to_char(r.start_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') "
    "  END "
    "FROM cairn.runs r JOIN cairn.limits l ON l.workflow = r.workflow "
    "WHERE r.part = $2 AND r.id = $1 AND r.status = 'pending'";

/* What serves the run's workflow ($1, in group $2), and, for a run that
 * has not finished ($3), why it waits when no live worker of its group
 * serves it (cairn.served_by, migration 0020). */
static const char SQL_SERVED_BY[] =
    "SELECT runtime, CASE WHEN $3::bool THEN unserved END FROM cairn.served_by($1, $2)";

static int read_served_by(cairn_client *c, cairn_run *run)
{
	const char *p[] = {run->workflow, run->group, run->finished_unix_ms ? "f" : "t"};
	PGresult *r = db_exec(c->conn, &c->err, SQL_SERVED_BY, 3, p);
	if (!r)
		return client_db_fail(c);
	run->runtime = db_get_str(r, 0, 0);
	run->unserved = db_get_str(r, 0, 1);
	int oom =
	    (!run->runtime && !PQgetisnull(r, 0, 0)) || (!run->unserved && !PQgetisnull(r, 0, 1));
	PQclear(r);
	return oom ? client_fail(c, CAIRN_ENOMEM, "out of memory reading the run") : CAIRN_OK;
}

int cairn_run_get(cairn_client *c, int64_t id, cairn_run **out)
{
	*out = NULL;
	char idtxt[24], parttxt[24];
	const char *p[3];
	int rc = run_and_part(c, id, idtxt, parttxt, p);
	if (rc)
		return rc;
	/* Every table read in the run's part (its successor's is the same):
	 * on Citus one task on the node of the part. */
	PGresult *r = db_exec(c->conn, &c->err,
	                      "SELECT " RUN_COLS ", (SELECT min(n.id) FROM cairn.runs n "
	                      "  WHERE n.part = $2 AND n.continued_from = runs.id) "
	                      "FROM cairn.runs WHERE part = $2 AND id = $1",
	                      2, p);
	if (!r)
		return client_db_fail(c);
	if (PQntuples(r) == 0) {
		PQclear(r);
		return client_fail(c, CAIRN_ENOTFOUND, "run %" PRId64 " not found", id);
	}
	cairn_run *run = calloc(1, sizeof *run);
	if (!run) {
		PQclear(r);
		return CAIRN_ENOMEM;
	}
	run_from_row(run, r, 0);
	run->continued_to = db_get_i64(r, 0, 23);
	PQclear(r);
	rc = run_unseal(c, run);
	if (rc) {
		cairn_run_free(run);
		return rc;
	}
	run_status st;
	if (run_status_parse(run->status, &st) == 0 && st == RUN_PENDING) {
		p[2] = run->workflow;
		r = db_exec(c->conn, &c->err, SQL_WAITING_FOR, 3, p);
		if (!r) {
			cairn_run_free(run);
			return client_db_fail(c);
		}
		if (PQntuples(r) == 1)
			run->waiting_for = db_get_str(r, 0, 0);
		PQclear(r);
	}
	r = db_exec(c->conn, &c->err,
	            "SELECT seq, name, kind, status, output::text, error, attempts, " MS(
	                "started_at") ", " MS("finished_at") " FROM cairn.steps "
	                                                     "WHERE part = $2 AND run_id = $1 "
	                                                     "ORDER BY seq",
	            2, p);
	if (!r) {
		cairn_run_free(run);
		return client_db_fail(c);
	}
	size_t n = (size_t)PQntuples(r);
	run->steps = n ? calloc(n, sizeof *run->steps) : NULL;
	if (n && !run->steps) {
		PQclear(r);
		cairn_run_free(run);
		return CAIRN_ENOMEM;
	}
	run->nsteps = n;
	for (int i = 0; i < (int)n; i++) {
		cairn_step_info *s = &run->steps[i];
		s->seq = db_get_int(r, i, 0);
		s->name = db_get_str(r, i, 1);
		s->kind = db_get_str(r, i, 2);
		s->status = db_get_str(r, i, 3);
		s->output = db_get_str(r, i, 4);
		s->error = db_get_str(r, i, 5);
		s->attempts = db_get_int(r, i, 6);
		s->started_unix_ms = db_get_i64(r, i, 7);
		s->finished_unix_ms = db_get_i64(r, i, 8);
		if (!rc)
			rc = client_unseal(c, SEAL_STEP_OUTPUT, &s->output, CAIRN_LOCKED_OUTPUT,
			                   CLIENT_LOCK(s), "a step's output");
		if (!rc)
			rc = client_unseal(c, SEAL_STEP_ERROR, &s->error, CAIRN_LOCKED_ERROR,
			                   CLIENT_LOCK(s), "a step's error");
	}
	PQclear(r);
	if (!rc)
		rc = read_children(c, run, p);
	if (!rc)
		rc = read_served_by(c, run);
	if (rc) {
		cairn_run_free(run);
		return rc;
	}
	*out = run;
	return CAIRN_OK;
}

int client_list_params(cairn_client *c, const cairn_list_filter *f, client_list_args *a)
{
	char err[PARSE_ERR_MAX];
	memset(a, 0, sizeof *a);
	if (f->workflow && parse_check_name("workflow", f->workflow, err) < 0)
		return client_invalid(c, "workflow", "%s", err);
	run_status st;
	if (f->status && run_status_parse(f->status, &st) < 0)
		return client_invalid(c, "status",
		                      "invalid status \"%s\": expected one of pending, running, "
		                      "sleeping, waiting, completed, failed, cancelled",
		                      f->status);
	if (f->limit < 0 || f->limit > 10000)
		return client_invalid(
		    c, "limit", "invalid limit %d: expected an integer from 1 to 10000", f->limit);
	if (f->code_version && parse_check_name("code version", f->code_version, err) < 0)
		return client_invalid(c, "code_version", "%s", err);
	if (f->key && parse_check_key(f->key, err) < 0)
		return client_invalid(c, "key", "%s", err);
	if (f->created_from_unix_ms < 0)
		return client_invalid(c, "created_from_unix_ms",
		                      "invalid start of the time range %" PRId64
		                      ": expected Unix milliseconds, 0 or more",
		                      f->created_from_unix_ms);
	if (f->created_to_unix_ms < 0 ||
	    (f->created_to_unix_ms && f->created_to_unix_ms <= f->created_from_unix_ms))
		return client_invalid(c, "created_to_unix_ms",
		                      "invalid end of the time range %" PRId64
		                      ": expected Unix milliseconds after its start %" PRId64,
		                      f->created_to_unix_ms, f->created_from_unix_ms);
	if (f->before_id < 0)
		return client_invalid(c, "before_id",
		                      "invalid before_id %" PRId64 ": expected a run id, 1 or more",
		                      f->before_id);
	a->p[0] = f->workflow;
	a->p[1] = f->status;
	a->p[2] = f->code_version;
	a->p[3] = f->key;
	a->p[4] = f->created_from_unix_ms ? db_i64(a->from, f->created_from_unix_ms) : NULL;
	a->p[5] = f->created_to_unix_ms ? db_i64(a->to, f->created_to_unix_ms) : NULL;
	a->p[6] = f->before_id ? db_i64(a->before, f->before_id) : NULL;
	a->p[7] = db_i64(a->limit, f->limit ? f->limit : 50);
	int shards, rc = client_shards(c, &shards);
	a->parts = c->settings.nparts > 1;
	return rc;
}

/* Custom plans (PQexecParams plans with the values) fold the NULL tests
 * away, so each filter leaves an index scan in id order: the primary key
 * backwards, or runs_status, runs_workflow (0012) or the (workflow, key)
 * key. A time range is the exception: the planner takes created_at to be
 * independent of id and would walk the primary key from the newest run down
 * to the range, so a range is listed in (created_at, id) order, newest
 * first, from runs_created (0012), the page after before_id starting below
 * that run's (created_at, id). */
#define RUN_LIST(where)                                                                            \
	"SELECT " RUN_COLS " FROM cairn.runs WHERE " where                                         \
	"AND ($7::bigint IS NULL OR id < $7) ORDER BY id DESC LIMIT $8"
#define RUN_LIST_RANGE(where)                                                                      \
	"SELECT " RUN_COLS " FROM cairn.runs WHERE " where                                         \
	"AND ($7::bigint IS NULL OR (created_at, id) < "                                           \
	"     (SELECT created_at, id FROM cairn.runs WHERE id = $7)) "                             \
	"ORDER BY created_at DESC, id DESC LIMIT $8"
/* [range][parts] */
static const char *const SQL_RUN_LIST[2][2] = {
    {RUN_LIST(CLIENT_LIST_WHERE), RUN_LIST(CLIENT_LIST_WHERE_PARTS)},
    {RUN_LIST_RANGE(CLIENT_LIST_WHERE), RUN_LIST_RANGE(CLIENT_LIST_WHERE_PARTS)}};

int cairn_run_list(cairn_client *c, const cairn_list_filter *f, cairn_run **runs, size_t *n)
{
	cairn_list_filter none = {0};
	*runs = NULL;
	*n = 0;
	client_list_args a;
	int rc = client_list_params(c, f ? f : &none, &a);
	if (rc)
		return rc;
	int range = a.p[4] || a.p[5];
	PGresult *r = db_exec(c->conn, &c->err, SQL_RUN_LIST[range][a.parts], 8, a.p);
	if (!r)
		return client_db_fail(c);
	size_t rows = (size_t)PQntuples(r);
	if (rows) {
		*runs = calloc(rows, sizeof **runs);
		if (!*runs) {
			PQclear(r);
			return CAIRN_ENOMEM;
		}
		for (int i = 0; i < (int)rows; i++)
			run_from_row(&(*runs)[i], r, i);
	}
	*n = rows;
	PQclear(r);
	for (size_t i = 0; i < rows && !rc; i++)
		rc = run_unseal(c, &(*runs)[i]);
	if (rc) {
		cairn_run_list_free(*runs, rows);
		*runs = NULL;
		*n = 0;
	}
	return rc;
}

void cairn_run_list_free(cairn_run *runs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		run_clear(&runs[i]);
	free(runs);
}

/* The polls of a wait that cannot LISTEN: 20 ms, growing by half to 500 ms. */
#define WAIT_POLL_FIRST_MS 20
#define WAIT_POLL_MAX_MS   500

/*
 * Direct, it LISTENs on cairn_done and re-reads the run on a notification
 * and at least every second (a lost notification costs a second). Through
 * a pooler it does not LISTEN: in transaction pooling the LISTEN would stay
 * on whichever server session ran it (and the UNLISTEN go to another), so
 * it polls with a short backoff instead.
 */
/*
 * Calls check(c, arg) until it says done (1: CAIRN_OK) or fails (< 0: its
 * CAIRN_* code negated) or timeout_ms passes (CAIRN_ETIMEOUT, "what did not
 * happen in time"), woken by notifications on channel with a polling
 * fallback (1 s), or through a pooler by a backoff.
 */
static int wait_for(cairn_client *c, const char *channel, int (*check)(cairn_client *, void *),
                    void *arg, int64_t timeout_ms, const char *what)
{
	int pooled = db_behind_pooler(c->conn, &c->err);
	if (pooled < 0)
		return client_db_fail(c);
	char listen[64], unlisten[80];
	snprintf(listen, sizeof listen, "LISTEN %s", channel);
	snprintf(unlisten, sizeof unlisten, "UN%s", listen);
	if (!pooled && db_cmd(c->conn, &c->err, listen, 0, NULL) < 0)
		return client_db_fail(c);
	int64_t backoff = WAIT_POLL_FIRST_MS;
	int64_t deadline = timeout_ms < 0 ? INT64_MAX : clock_mono_ms() + timeout_ms;
	int rc;
	for (;;) {
		int got = check(c, arg);
		if (got) {
			rc = got > 0 ? CAIRN_OK : -got;
			break;
		}
		int64_t left = deadline - clock_mono_ms();
		if (left <= 0) {
			rc = client_fail(c, CAIRN_ETIMEOUT, "%s in time", what);
			break;
		}
		/* Sleep until a notification or 1 s (the polling fallback), or,
		 * through a pooler, for the backoff. */
		struct pollfd pfd = {.fd = PQsocket(c->conn), .events = POLLIN};
		int64_t nap = pooled ? backoff : 1000;
		int wait = left > nap ? (int)nap : (int)left;
		if (pooled) {
			backoff += backoff / 2;
			if (backoff > WAIT_POLL_MAX_MS)
				backoff = WAIT_POLL_MAX_MS;
			pfd.fd = -1; /* nothing to hear: just sleep */
		}
		if (poll(&pfd, 1, wait) < 0 && errno != EINTR) {
			rc = client_fail(c, CAIRN_EDB, "%s: waiting: %s", what, strerror(errno));
			break;
		}
		PQconsumeInput(c->conn);
		PGnotify *nt;
		while ((nt = PQnotifies(c->conn)))
			PQfreemem(nt);
	}
	if (!pooled)
		db_cmd(c->conn, NULL, unlisten, 0, NULL);
	return rc;
}

/* The last run of run $1's chain (cairn_continue_as_new): $1 itself when
 * it never continued; the chain's runs after the first name it (chain_id),
 * and the newest is the last, whatever links the janitor removed. */
/* The last run of the chain of run r, in part $2: a chain stays in its
 * first run's shard. */
#define CHAIN_LAST                                                                                 \
	"coalesce((SELECT max(n.id) FROM cairn.runs n "                                            \
	"          WHERE n.part = $2 AND n.chain_id = coalesce(r.chain_id, r.id)), r.id)"

int cairn_run_last(cairn_client *c, int64_t id, int64_t *last)
{
	*last = id;
	char idtxt[24], parttxt[24];
	const char *p[2];
	int rc = run_and_part(c, id, idtxt, parttxt, p);
	if (rc)
		return rc;
	PGresult *r = db_exec(
	    c->conn, &c->err,
	    "SELECT " CHAIN_LAST " FROM cairn.runs r WHERE r.part = $2 AND r.id = $1", 2, p);
	if (!r)
		return client_db_fail(c);
	int found = PQntuples(r) == 1;
	if (found)
		*last = db_get_i64(r, 0, 0);
	PQclear(r);
	return found ? CAIRN_OK : client_fail(c, CAIRN_ENOTFOUND, "run %" PRId64 " not found", id);
}

/* Whether the run has finished: the last run of its chain, when it
 * continued as new. */
static int run_finished(cairn_client *c, void *arg)
{
	int64_t id = *(int64_t *)arg;
	char idtxt[24], parttxt[24];
	const char *p[2];
	int rc = run_and_part(c, id, idtxt, parttxt, p);
	if (rc)
		return -rc;
	PGresult *r = db_exec(c->conn, &c->err,
	                      "SELECT (SELECT l.finished_at IS NOT NULL FROM cairn.runs l "
	                      "        WHERE l.part = $2 AND l.id = " CHAIN_LAST ") "
	                      "FROM cairn.runs r WHERE r.part = $2 AND r.id = $1",
	                      2, p);
	if (!r)
		return -client_db_fail(c);
	int found = PQntuples(r) == 1, done = found && db_get_bool(r, 0, 0);
	PQclear(r);
	if (!found)
		return -client_fail(c, CAIRN_ENOTFOUND, "run %" PRId64 " not found", id);
	return done;
}

int cairn_run_wait(cairn_client *c, int64_t id, int64_t timeout_ms)
{
	char what[64];
	snprintf(what, sizeof what, "run %" PRId64 " did not finish", id);
	return wait_for(c, CAIRN_DONE_CHANNEL, run_finished, &id, timeout_ms, what);
}

/* Whether two JSON texts hold the same value. */
static int json_equal(const char *a, const char *b)
{
	cJSON *x = cJSON_Parse(a), *y = cJSON_Parse(b);
	int same = x && y && cJSON_Compare(x, y, 1);
	cJSON_Delete(x);
	cJSON_Delete(y);
	return same;
}

typedef struct event_ask {
	int64_t run;
	const char *key, *changed_from;
	char *value;
} event_ask;

static int event_there(cairn_client *c, void *arg)
{
	event_ask *a = arg;
	char idtxt[24], parttxt[24];
	const char *p[3];
	int prc = run_and_part(c, a->run, idtxt, parttxt, p);
	if (prc)
		return -prc;
	p[2] = a->key;
	PGresult *r = db_exec(c->conn, &c->err,
	                      "SELECT e.value::text, r.id FROM cairn.runs r LEFT JOIN cairn.events e "
	                      "ON e.part = r.part AND e.run_id = r.id AND e.key = $3 "
	                      "WHERE r.part = $2 AND r.id = $1",
	                      3, p);
	if (!r)
		return -client_db_fail(c);
	int found = PQntuples(r) == 1;
	char *v = found ? db_get_str(r, 0, 0) : NULL;
	int null = !found || PQgetisnull(r, 0, 0);
	PQclear(r);
	if (!found)
		return -client_fail(c, CAIRN_ENOTFOUND, "run %" PRId64 " not found", a->run);
	if (null)
		return 0;
	cairn_event_info e = {0};
	int rc = v ? client_unseal(c, SEAL_EVENT_VALUE, &v, CAIRN_LOCKED_OUTPUT, CLIENT_LOCK(&e),
	                           "the event's value")
	           : client_fail(c, CAIRN_ENOMEM, "out of memory reading the event");
	char why[CAIRN_UNREADABLE_MAX];
	if (!rc && CAIRN_UNREADABLE_WHY(&e, CAIRN_LOCKED_OUTPUT, why, sizeof why))
		rc = client_fail(c, CAIRN_ESTATE,
		                 "event \"%s\" of run %" PRId64 " is unreadable: %s", a->key,
		                 a->run, why);
	if (rc) {
		free(v);
		return -rc;
	}
	if (a->changed_from && json_equal(v, a->changed_from)) {
		free(v);
		return 0;
	}
	a->value = v;
	return 1;
}

int cairn_event_get(cairn_client *c, int64_t run_id, const char *key, int64_t timeout_ms,
                    const char *changed_from, char **value)
{
	*value = NULL;
	char err[PARSE_ERR_MAX];
	if (parse_check_name("event key", key, err) < 0)
		return client_invalid(c, "key", "%s", err);
	if (changed_from && parse_check_json("changed_from", changed_from, c->max_payload, err) < 0)
		return client_invalid(c, "changed_from", "%s", err);
	event_ask a = {.run = run_id, .key = key, .changed_from = changed_from};
	int rc;
	if (timeout_ms == 0) {
		int got = event_there(c, &a);
		rc = got > 0   ? CAIRN_OK
		     : got < 0 ? -got
		               : client_fail(c, CAIRN_ENOTFOUND,
		                             "run %" PRId64 " has no event \"%s\"%s", run_id, key,
		                             changed_from ? " other than the value given" : "");
	} else {
		char what[192];
		snprintf(what, sizeof what, "run %" PRId64 " published no event \"%s\"%s", run_id,
		         key, changed_from ? " that differs from the value given" : "");
		rc = wait_for(c, CAIRN_EVENT_CHANNEL, event_there, &a, timeout_ms, what);
	}
	*value = a.value;
	return rc;
}

/* ------------------------------------------------------------ visibility */

/* Liveness is the workers' own test (cairn.runner_live, as lease.c asks it)
 * minus health, which is reported in its own column. */
#define RUNNER_STARTED_MS MS("r.started_at")
/* The runners read first, with their liveness (which reads
 * pg_stat_activity), then joined to their leases and workflows counted
 * apart: on Citus a subquery per runner over the leases is refused, and
 * a statement over them runs on the worker nodes, where no runner's
 * session is. */
static const char SQL_RUNNER_LIST[] =
    "WITH r AS MATERIALIZED (SELECT r.*, cairn.runner_live(r, $1) AS live FROM cairn.runners r), "
    "l AS (SELECT owner, count(*) AS n FROM cairn.shard_leases GROUP BY owner), "
    "w AS (SELECT runner_id, string_agg(DISTINCT runtime, ',') AS runtimes "
    "      FROM cairn.runner_workflows GROUP BY runner_id) "
    "SELECT r.id, r.name, r.address, r.version, array_to_string(r.groups, ','), r.weight, "
    "       r.healthy, r.live, "
    "       greatest(0, (extract(epoch FROM now() - r.heartbeat_at) * 1000)::bigint), "
    "       " RUNNER_STARTED_MS ", coalesce(l.n, 0), coalesce(w.runtimes, '') "
    "FROM r LEFT JOIN l ON l.owner = r.id LEFT JOIN w ON w.runner_id = r.id ORDER BY r.id";

#define RUNNER_TTL_MAX_MS (365 * 86400000LL)

static void runner_clear(cairn_runner_info *r)
{
	free(r->name);
	free(r->address);
	free(r->version);
	free(r->groups);
	free(r->runtimes);
}

void cairn_runner_list_free(cairn_runner_info *r, size_t n)
{
	for (size_t i = 0; i < n; i++)
		runner_clear(&r[i]);
	free(r);
}

int cairn_runner_list(cairn_client *c, int64_t ttl_ms, cairn_runner_info **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	if (ttl_ms <= 0 || ttl_ms > RUNNER_TTL_MAX_MS)
		return client_invalid(
		    c, "ttl_ms", "invalid ttl %" PRId64 "ms: expected a duration from 1ms to 365d",
		    ttl_ms);
	char ttl[24];
	const char *p[] = {db_i64(ttl, ttl_ms)};
	PGresult *r = db_exec(c->conn, &c->err, SQL_RUNNER_LIST, 1, p);
	if (!r)
		return client_db_fail(c);
	size_t rows = (size_t)PQntuples(r);
	cairn_runner_info *v = rows ? calloc(rows, sizeof *v) : NULL;
	if (rows && !v) {
		PQclear(r);
		return client_fail(c, CAIRN_ENOMEM, "out of memory listing %zu runners", rows);
	}
	int oom = 0;
	for (int i = 0; i < (int)rows; i++) {
		cairn_runner_info *x = &v[i];
		x->id = db_get_i64(r, i, 0);
		x->name = db_get_str(r, i, 1);
		x->address = db_get_str(r, i, 2);
		x->version = db_get_str(r, i, 3);
		x->groups = db_get_str(r, i, 4);
		x->weight = db_get_int(r, i, 5);
		x->healthy = db_get_bool(r, i, 6);
		x->live = db_get_bool(r, i, 7);
		x->heartbeat_age_ms = db_get_i64(r, i, 8);
		x->started_unix_ms = db_get_i64(r, i, 9);
		x->shards = db_get_int(r, i, 10);
		x->runtimes = db_get_str(r, i, 11);
		/* Every text column is NOT NULL, so NULL here means strdup failed. */
		oom |= !x->name || !x->address || !x->version || !x->groups || !x->runtimes;
	}
	PQclear(r);
	if (oom) {
		cairn_runner_list_free(v, rows);
		return client_fail(c, CAIRN_ENOMEM, "out of memory listing %zu runners", rows);
	}
	*out = v;
	*n = rows;
	return CAIRN_OK;
}

/* The shard groups to list: those of the lease rows and of the runners. */
static const char SQL_SHARD_GROUPS[] =
    "SELECT shard_group FROM cairn.shard_leases UNION SELECT unnest(groups) FROM cairn.runners "
    "ORDER BY 1";

/*
 * The lease rows of groups $1 (their lock keys in $2, shards_per_group $3),
 * each with the outsider holding its lock if any: a backend of this database
 * that holds it and is no registered runner's lease backend. A shard without
 * a row whose lock an outsider holds gets a row of its own (no owner, epoch
 * 0). An outsider's user and application_name are visible to every role:
 * they are read from pg_stat_get_activity, not from pg_stat_activity, whose
 * read of pg_authid for the user's name Citus runs as the caller (it runs
 * a statement that reads a cairn table as SQL text, views expanded), which
 * only a superuser may.
 */
static const char SQL_SHARD_LIST[] =
    "WITH g AS (SELECT * FROM unnest($1::text[], $2::int[]) AS g(name, key)), "
    "o AS (SELECT g.name, l.objid::int AS shard, l.pid, pg_get_userbyid(a.usesysid) AS usename, "
    "        a.application_name "
    "      FROM pg_locks l JOIN g ON l.classid = (g.key)::oid "
    "      LEFT JOIN pg_stat_get_activity(NULL) a ON a.pid = l.pid "
    "      WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 "
    "        AND l.objid::bigint < $3::int "
    "        AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "        AND NOT EXISTS (SELECT 1 FROM cairn.runners r WHERE r.lease_pid = l.pid)), "
    "s AS (SELECT * FROM cairn.shard_leases WHERE shard_group = ANY ($1::text[])) "
    "SELECT coalesce(s.shard_group, o.name), coalesce(s.shard, o.shard), s.owner, r.name, "
    "       coalesce(s.epoch, 0), " MS(
        "s.acquired_at") ", o.pid, o.usename, o.application_name "
                         "FROM s FULL JOIN o ON o.name = s.shard_group AND o.shard = s.shard "
                         "LEFT JOIN cairn.runners r ON r.id = s.owner "
                         "ORDER BY 1, 2";

void cairn_shard_list_free(cairn_shard_info *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(s[i].group);
		free(s[i].owner_name);
		free(s[i].outsider_user);
		free(s[i].outsider_application_name);
	}
	free(s);
}

/* The groups to list (group, or every group known) and their lock keys, as
 * array literals: 0 or a client error. */
static int shard_groups(cairn_client *c, const char *group, pgarr *names, pgarr *keys)
{
	PGresult *r = NULL;
	if (!group && !(r = db_exec(c->conn, &c->err, SQL_SHARD_GROUPS, 0, NULL)))
		return client_db_fail(c);
	int n = group ? 1 : PQntuples(r);
	for (int i = 0; i < n; i++) {
		const char *name = group ? group : PQgetvalue(r, i, 0);
		pgarr_add(names, name);
		pgarr_add_i64(keys, hash_group_lock_key(name));
	}
	PQclear(r);
	return CAIRN_OK;
}

/* A text column into *out (NULL when NULL): nonzero when out of memory. */
static int shard_text(const PGresult *r, int i, int col, char **out)
{
	*out = db_get_str(r, i, col);
	return !*out && !PQgetisnull(r, i, col);
}

/* Row i of SQL_SHARD_LIST into x: nonzero when out of memory. */
static int shard_row(const PGresult *r, int i, cairn_shard_info *x)
{
	x->shard = db_get_int(r, i, 1);
	x->owner = db_get_i64(r, i, 2);
	x->epoch = db_get_i64(r, i, 4);
	x->acquired_unix_ms = db_get_i64(r, i, 5);
	x->outsider_pid = db_get_int(r, i, 6);
	return shard_text(r, i, 0, &x->group) | shard_text(r, i, 3, &x->owner_name) |
	       shard_text(r, i, 7, &x->outsider_user) |
	       shard_text(r, i, 8, &x->outsider_application_name);
}

int cairn_shard_list(cairn_client *c, const char *group, cairn_shard_info **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	char err[PARSE_ERR_MAX];
	if (group && parse_check_name("group", group, err) < 0)
		return client_invalid(c, "group", "%s", err);
	int shards, rc = client_shards(c, &shards);
	pgarr names = PGARR_INIT, keys = PGARR_INIT;
	if (!rc)
		rc = shard_groups(c, group, &names, &keys);
	char count[24];
	const char *p[] = {pgarr_str(&names), pgarr_str(&keys), db_i64(count, rc ? 0 : shards)};
	PGresult *r = rc ? NULL : db_exec(c->conn, &c->err, SQL_SHARD_LIST, 3, p);
	pgarr_free(&names);
	pgarr_free(&keys);
	if (rc)
		return rc;
	if (!r)
		return client_db_fail(c);
	size_t rows = (size_t)PQntuples(r);
	cairn_shard_info *v = rows ? calloc(rows, sizeof *v) : NULL;
	if (rows && !v) {
		PQclear(r);
		return client_fail(c, CAIRN_ENOMEM, "out of memory listing %zu shards", rows);
	}
	int oom = 0;
	for (int i = 0; i < (int)rows; i++)
		oom |= shard_row(r, i, &v[i]);
	PQclear(r);
	if (oom) {
		cairn_shard_list_free(v, rows);
		return client_fail(c, CAIRN_ENOMEM, "out of memory listing %zu shards", rows);
	}
	*out = v;
	*n = rows;
	return CAIRN_OK;
}
