/*
 * lease.c - membership and shard ownership through Postgres alone (DESIGN
 * section 4). Runs on the supervisor thread's lease connection; a runner is
 * live while its lease backend is in pg_stat_activity, its heartbeat is
 * younger than the TTL and it is healthy. Every runner computes the same
 * desired map; a shard still locked by its old owner is retried next round.
 * Session advisory locks stack, so a shard is locked only when not owned, and
 * a release is verified against pg_locks.
 */
#include "lease.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "assign.h"
#include "db.h"
#include "hash.h"
#include "pgarr.h"
#include "worker.h"

int lease_init(lease *l, cairn_worker *w, int shards)
{
	memset(l, 0, sizeof *l);
	l->w = w;
	l->shards = shards;
	pthread_mutex_lock(&w->mu);
	int rc = 0;
	for (int i = w->nown; i < w->cfg.ngroups; i++) {
		own_group *g = &w->own[i];
		g->name = w->cfg.groups[i];
		g->lock_key = hash_group_lock_key(g->name);
		g->epoch = calloc((size_t)shards, sizeof *g->epoch);
		g->busy = calloc((size_t)shards, sizeof *g->busy);
		if (!g->epoch || !g->busy) {
			rc = -1;
			break;
		}
		w->nown = i + 1;
	}
	pthread_mutex_unlock(&w->mu);
	return rc;
}

void lease_free(lease *l)
{
	memset(l, 0, sizeof *l);
}

static void publish(lease *l)
{
	int owned = 0;
	for (int i = 0; i < l->w->nown; i++)
		owned += l->w->own[i].owned;
	atomic_store(&l->w->m.shards_owned, owned);
}

void lease_forget(lease *l)
{
	cairn_worker *w = l->w;
	for (int i = 0; i < w->nown; i++) {
		own_group *g = &w->own[i];
		for (int s = 0; s < l->shards; s++)
			atomic_store(&g->epoch[s], 0);
		g->owned = 0;
	}
	l->rebalanced = 0;
	l->runner_id = 0;
	publish(l);
}

static const char SQL_REGISTER[] =
    "INSERT INTO cairn.runners (name, address, version, groups, weight, lease_pid) "
    "VALUES ($1, $2, $3, $4::text[], $5, pg_backend_pid()) RETURNING id";

static const char SQL_HEARTBEAT[] =
    "UPDATE cairn.runners SET heartbeat_at = now(), lease_pid = pg_backend_pid() "
    "WHERE id = $1 RETURNING healthy";

int lease_heartbeat(lease *l)
{
	cairn_worker *w = l->w;
	buf err = BUF_INIT;
	int rc = 0;
	if (l->runner_id) {
		char id[24];
		const char *p[] = {db_i64(id, l->runner_id)};
		PGresult *r = db_exec(l->conn, &err, SQL_HEARTBEAT, 1, p);
		if (!r) {
			rc = -1;
			goto done;
		}
		int found = PQntuples(r) == 1;
		PQclear(r);
		if (found)
			goto done;
		/* Removed as dead by a health checker: stop the shards' work, give
		 * every lock back (their leases rows no longer name us) and
		 * register anew. */
		log_kv(&w->log, LOG_WARN, "runner row was removed; registering again", NULL);
		lease_forget(l);
		singletons_sync(w);
		db_cmd(l->conn, NULL, "SELECT pg_advisory_unlock_all()", 0, NULL);
	}
	pgarr groups = PGARR_INIT;
	for (int i = 0; i < w->nown; i++)
		pgarr_add(&groups, w->own[i].name);
	char weight[24];
	const char *p[] = {w->name, w->cfg.advertise_addr, CAIRN_VERSION, pgarr_str(&groups),
	                   db_i64(weight, w->cfg.weight)};
	PGresult *r = db_exec(l->conn, &err, SQL_REGISTER, 5, p);
	pgarr_free(&groups);
	if (!r) {
		rc = -1;
		goto done;
	}
	l->runner_id = db_get_i64(r, 0, 0);
	PQclear(r);
	pthread_mutex_lock(&w->mu);
	w->runner_id = l->runner_id;
	pthread_mutex_unlock(&w->mu);
	char id[24];
	log_kv(&w->log, LOG_INFO, "registered", "runner_id", db_i64(id, l->runner_id), NULL);
done:
	if (rc)
		log_kv(&w->log, LOG_WARN, "heartbeat failed", "error", buf_str(&err), NULL);
	buf_free(&err);
	return rc;
}

static const char SQL_LIVE[] =
    "SELECT r.id, r.weight FROM cairn.runners r "
    "WHERE $1 = ANY (r.groups) AND r.healthy "
    "  AND r.heartbeat_at > now() - $2 * interval '1 millisecond' "
    "  AND EXISTS (SELECT 1 FROM pg_stat_activity a "
    "              WHERE a.pid = r.lease_pid AND a.datname = current_database()) "
    "ORDER BY r.id";

static const char SQL_ACQUIRE[] =
    "WITH got AS (SELECT s FROM unnest($3::int[]) s WHERE pg_try_advisory_lock($2::int, s)) "
    "INSERT INTO cairn.shard_leases (shard_group, shard, owner, epoch, acquired_at) "
    "SELECT $1, s, $4, 1, now() FROM got ORDER BY s "
    "ON CONFLICT (shard_group, shard) DO UPDATE "
    "  SET owner = excluded.owner, epoch = cairn.shard_leases.epoch + 1, acquired_at = now() "
    "RETURNING shard, epoch";

static const char SQL_RELEASE[] =
    "WITH un AS (SELECT s, pg_advisory_unlock($2::int, s) AS ok FROM unnest($3::int[]) s), "
    "lk AS (SELECT shard FROM cairn.shard_leases WHERE shard_group = $1 AND owner = $4 "
    "       AND shard IN (SELECT s FROM un) ORDER BY shard FOR UPDATE), "
    "clear AS (UPDATE cairn.shard_leases SET owner = NULL "
    "          WHERE shard_group = $1 AND shard IN (SELECT shard FROM lk)) "
    "SELECT count(*) FILTER (WHERE ok) FROM un";

static const char SQL_STILL_LOCKED[] =
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
    "AND classid = ($1::int)::oid AND objsubid = 2 AND objid::bigint = ANY ($2::bigint[])";

/*
 * Releases the given shards of group gi: stop dispatching them, let their
 * in-flight runs reach a durable point (bounded by a deadline), stop their
 * singletons and wait for them, then unlock and verify against pg_locks.
 */
static int release_shards(lease *l, int gi, const int *shards, int n, buf *err)
{
	if (n == 0)
		return 0;
	cairn_worker *w = l->w;
	own_group *g = &w->own[gi];
	for (int i = 0; i < n; i++)
		atomic_store(&g->epoch[shards[i]], -atomic_load(&g->epoch[shards[i]]));
	int64_t limit = w->cfg.shutdown_timeout_ms < 10000 ? w->cfg.shutdown_timeout_ms : 10000;
	if (dispatch_drain_shards(w, gi, shards, n, worker_now_ms() + limit) < 0)
		log_kv(&w->log, LOG_WARN,
		       "released shards with runs still in flight (their writes are fenced)",
		       "group", g->name, NULL);
	singletons_stop_shards(w, gi, shards, n);
	pgarr arr = PGARR_INIT;
	for (int i = 0; i < n; i++)
		pgarr_add_i64(&arr, shards[i]);
	char key[24], me[24];
	const char *p[] = {g->name, db_i64(key, g->lock_key), pgarr_str(&arr),
	                   db_i64(me, l->runner_id)};
	PGresult *r = db_exec(l->conn, err, SQL_RELEASE, 4, p);
	int rc = r ? 0 : -1;
	PQclear(r);
	if (!rc) {
		/* Session locks stack: make sure none is left behind. */
		const char *q[] = {db_i64(key, g->lock_key), pgarr_str(&arr)};
		r = db_exec(l->conn, err, SQL_STILL_LOCKED, 2, q);
		if (r && db_get_i64(r, 0, 0) != 0)
			log_kv(&l->w->log, LOG_ERROR, "advisory locks still held after release",
			       "group", g->name, NULL);
		PQclear(r);
	}
	pgarr_free(&arr);
	for (int i = 0; i < n; i++)
		if (atomic_exchange(&g->epoch[shards[i]], 0))
			g->owned--;
	return rc;
}

/* Writes ascending shard numbers as ranges ("0-12,15,17-20"), cut with "...". */
static void shard_ranges(char *out, size_t size, const int *sorted, int n)
{
	size_t used = 0;
	out[0] = '\0';
	for (int i = 0; i < n;) {
		int j = i;
		while (j + 1 < n && sorted[j + 1] == sorted[j] + 1)
			j++;
		char part[32];
		int len = i == j ? snprintf(part, sizeof part, "%s%d", used ? "," : "", sorted[i])
		                 : snprintf(part, sizeof part, "%s%d-%d", used ? "," : "",
		                            sorted[i], sorted[j]);
		if (used + (size_t)len + 4 > size) {
			snprintf(out + used, size - used, "...");
			return;
		}
		memcpy(out + used, part, (size_t)len + 1);
		used += (size_t)len;
		i = j + 1;
	}
}

static int rebalance_group(lease *l, int gi, int *changed, buf *err)
{
	own_group *g = &l->w->own[gi];
	cairn_worker *w = l->w;
	char ttl[24];
	const char *p[] = {g->name, db_i64(ttl, w->cfg.runner_ttl_ms)};
	PGresult *r = db_exec(l->conn, err, SQL_LIVE, 2, p);
	if (!r)
		return -1;
	int n = PQntuples(r);
	assign_runner *rs = calloc((size_t)n + 1, sizeof *rs);
	int *want = malloc((size_t)l->shards * sizeof *want),
	    *lst = malloc((size_t)l->shards * sizeof *lst);
	int me = -1;
	for (int i = 0; i < n; i++) {
		rs[i].id = db_get_i64(r, i, 0);
		rs[i].weight = db_get_int(r, i, 1);
		if (rs[i].id == l->runner_id)
			me = i;
	}
	PQclear(r);
	assign_shards(rs, n, (uint64_t)(uint32_t)g->lock_key, l->shards, want);
	int rc = 0;
	/* Release what is no longer ours. */
	int k = 0;
	for (int s = 0; s < l->shards; s++)
		if (atomic_load(&g->epoch[s]) && want[s] != me)
			lst[k++] = s;
	rebalance_rec rec = {.live_runners = n};
	if (k) {
		shard_ranges(rec.released_shards, sizeof rec.released_shards, lst, k);
		rc = release_shards(l, gi, lst, k, err);
		*changed += k;
		rec.released = k;
	}
	/* Try to acquire what is ours and not yet held. */
	k = 0;
	for (int s = 0; s < l->shards && me >= 0 && !rc; s++)
		if (!atomic_load(&g->epoch[s]) && want[s] == me)
			lst[k++] = s;
	if (k && !rc) {
		pgarr arr = PGARR_INIT;
		for (int i = 0; i < k; i++)
			pgarr_add_i64(&arr, lst[i]);
		char key[24], mid[24];
		const char *q[] = {g->name, db_i64(key, g->lock_key), pgarr_str(&arr),
		                   db_i64(mid, l->runner_id)};
		r = db_exec(l->conn, err, SQL_ACQUIRE, 4, q);
		if (!r) {
			/* The statement rolled back but session locks it took survive:
			 * give them back so none is held without an epoch. */
			const char *u[] = {db_i64(key, g->lock_key), pgarr_str(&arr)};
			db_cmd(l->conn, NULL,
			       "SELECT pg_advisory_unlock($1::int, s) FROM unnest($2::int[]) s", 2,
			       u);
			rc = -1;
		} else {
			int got = 0;
			for (int i = 0; i < PQntuples(r); i++) {
				int s = db_get_int(r, i, 0);
				if (s >= 0 && s < l->shards && !atomic_load(&g->epoch[s])) {
					atomic_store(&g->epoch[s], db_get_i64(r, i, 1));
					g->owned++;
					lst[got++] =
					    s; /* ascending: the statement orders by shard */
				}
			}
			shard_ranges(rec.acquired_shards, sizeof rec.acquired_shards, lst, got);
			*changed += PQntuples(r);
			rec.acquired = PQntuples(r);
			PQclear(r);
		}
		pgarr_free(&arr);
	}
	if (rec.acquired || rec.released) {
		snprintf(rec.group, sizeof rec.group, "%s", g->name);
		snprintf(rec.why, sizeof rec.why, "%s",
		         me < 0                      ? "this runner is not live yet"
		         : k > 0 && rec.acquired < k ? "shards still held by their old owner"
		                                     : "live runners changed");
		worker_history_add(l->w, &rec);
	}
	free(rs);
	free(want);
	free(lst);
	return rc;
}

int lease_rebalance(lease *l)
{
	buf err = BUF_INIT;
	int changed = 0, rc = 0;
	for (int i = 0; i < l->w->nown && !rc; i++)
		rc = rebalance_group(l, i, &changed, &err);
	if (rc)
		log_kv(&l->w->log, LOG_WARN, "rebalance failed", "error", buf_str(&err), NULL);
	buf_free(&err);
	publish(l);
	if (rc)
		return -1;
	l->rebalanced = 1;
	if (changed) {
		/* The pollers' claim plans on how many shards each runner owns:
		 * keep the planner's picture of this small table current. */
		db_cmd(l->conn, NULL, "ANALYZE cairn.shard_leases", 0, NULL);
		atomic_fetch_add(&l->w->m.rebalances, 1);
		char n[24], owned[24];
		log_kv(&l->w->log, LOG_INFO, "rebalanced", "changed", db_i64(n, changed), "owned",
		       db_i64(owned, atomic_load(&l->w->m.shards_owned)), NULL);
	}
	return changed ? 1 : 0;
}

void lease_release_all(lease *l)
{
	buf err = BUF_INIT;
	int *lst = malloc((size_t)l->shards * sizeof *lst);
	for (int i = 0; i < l->w->nown && lst; i++) {
		own_group *g = &l->w->own[i];
		int k = 0;
		for (int s = 0; s < l->shards; s++)
			if (atomic_load(&g->epoch[s]))
				lst[k++] = s;
		release_shards(l, i, lst, k, &err);
	}
	free(lst);
	if (l->runner_id) {
		char id[24];
		const char *p[] = {db_i64(id, l->runner_id)};
		db_cmd(l->conn, &err, "DELETE FROM cairn.runners WHERE id = $1", 1, p);
	}
	publish(l);
	buf_free(&err);
}
