/*
 * singleton.c - the singleton supervisor (see singleton.h). A singleton's
 * shard is hash(name) in its group; while this runner owns that shard, and
 * holds the singleton's fence lock on a connection of its own, the singleton
 * runs in its own thread. A stop sets the cancel flag; the thread is reaped
 * (and only then its fence closed) when it has returned, or it becomes a
 * zombie after stop_timeout_ms. The supervisor never waits for a thread,
 * except in singletons_stop_all (bounded).
 */
#include "singleton.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "db.h"
#include "hash.h"

/* cairn_singleton_sleep looks at the fence socket at least this often. */
#define SLEEP_SLICE_MS 100

struct cairn_singleton {
	const singleton_def *def;
	singletons *owner;
	pthread_t thread;
	_Atomic int cancel;
	pthread_mutex_t mu; /* with cv: wakes cairn_singleton_sleep on cancel and
	                       singletons_stop_all on return; guards the fields below */
	pthread_cond_t cv;
	int running;
	int exited;   /* the thread returned */
	int zombie;   /* detached after ignoring its cancel, set only while !exited */
	int fence_fd; /* the fence's socket while the thread runs fenced, else -1 */
	int64_t started_unix_ms;
	int failures;

	/* The supervisor thread's alone (rc: written by the thread before it
	 * returns, read after the join). */
	PGconn *fence; /* the fence connection */
	int fenced;    /* the fence lock is held on it */
	int fence_lost;
	int waiting_logged;
	int64_t next_fence_ms;
	int joinable;
	int stopping;
	int64_t stop_deadline_ms;
	int rc;
	int finished; /* returned CAIRN_OK: not restarted until the shard comes back */
	int64_t next_start_ms;
	uint64_t starts;
};

struct singletons {
	singletons_env env;
	struct cairn_singleton *s;
	int n;
};

int singletons_new(const singletons_env *env, singletons **out)
{
	*out = NULL;
	singletons *ss = calloc(1, sizeof *ss);
	int n = registry_nsingletons(env->reg);
	if (!ss || !(ss->s = calloc((size_t)n + 1, sizeof *ss->s))) {
		free(ss);
		return -CAIRN_ENOMEM;
	}
	ss->env = *env;
	for (int i = 0; i < n; i++, ss->n++) {
		struct cairn_singleton *s = &ss->s[i];
		s->def = registry_singleton(env->reg, i);
		s->owner = ss;
		s->fence_fd = -1;
		pthread_mutex_init(&s->mu, NULL);
		if (clock_cond_init(&s->cv) < 0) {
			pthread_mutex_destroy(&s->mu);
			singletons_free(ss);
			return -CAIRN_ENOMEM;
		}
	}
	*out = ss;
	return 0;
}

/* 1 when the peer closed the socket fd or it failed: the fence is gone. An
 * idle connection's socket reports nothing else; POLLIN is not asked for. */
static int socket_closed(int fd)
{
	if (fd < 0)
		return 0;
	struct pollfd p = {.fd = fd, .events = POLLRDHUP};
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* The cancel flag, or the fence connection closed under the singleton. */
int cairn_singleton_cancelled(cairn_singleton *s)
{
	if (atomic_load(&s->cancel))
		return 1;
	pthread_mutex_lock(&s->mu);
	int lost = socket_closed(s->fence_fd);
	pthread_mutex_unlock(&s->mu);
	return lost;
}

/* Sleeps on the singleton's own condition variable, which a cancel wakes;
 * looks at the fence every SLEEP_SLICE_MS. */
int cairn_singleton_sleep(cairn_singleton *s, int64_t ms)
{
	int64_t until = clock_mono_ms() + ms;
	pthread_mutex_lock(&s->mu);
	while (!atomic_load(&s->cancel) && !socket_closed(s->fence_fd)) {
		int64_t left = until - clock_mono_ms();
		if (left <= 0)
			break;
		clock_cond_wait_ms(&s->cv, &s->mu, left < SLEEP_SLICE_MS ? left : SLEEP_SLICE_MS);
	}
	pthread_mutex_unlock(&s->mu);
	return cairn_singleton_cancelled(s);
}

const char *cairn_singleton_conninfo(const cairn_singleton *s)
{
	return s->owner->env.conninfo;
}

int64_t cairn_singleton_runner_id(const cairn_singleton *s)
{
	return lease_runner_id(s->owner->env.lease);
}

static int shard_of(const struct cairn_singleton *s)
{
	int shards = shardmap_shards(s->owner->env.map);
	return shards > 0 ? hash_shard(s->def->name, shards) : -1;
}

static void *singleton_main(void *arg)
{
	struct cairn_singleton *s = arg;
	s->rc = s->def->fn(s, s->def->arg);
	pthread_mutex_lock(&s->mu);
	s->exited = 1;
	int zombie = s->zombie;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	/* A zombie's worker may be gone; nobody waits for it. */
	if (!zombie)
		s->owner->env.wake(s->owner->env.wake_arg);
	return NULL;
}

static void set_running(struct cairn_singleton *s, int running)
{
	pthread_mutex_lock(&s->mu);
	s->running = running;
	if (running)
		s->started_unix_ms = clock_unix_ms();
	pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------------------ fences */

/* The fence connection is open and the server has not closed it. */
static int fence_alive(struct cairn_singleton *s)
{
	if (!s->fence || PQstatus(s->fence) != CONNECTION_OK)
		return 0;
	struct pollfd p = {.fd = PQsocket(s->fence), .events = POLLIN | POLLRDHUP};
	if (poll(&p, 1, 0) <= 0)
		return 1;
	if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))
		return 0;
	/* Something arrived on an idle connection (a FATAL before the close). */
	return PQconsumeInput(s->fence) && PQstatus(s->fence) == CONNECTION_OK;
}

/* Closes the fence connection; the server drops its lock with it. */
static void fence_close(struct cairn_singleton *s)
{
	pthread_mutex_lock(&s->mu);
	s->fence_fd = -1; /* the singleton no longer polls it */
	PGconn *c = s->fence;
	s->fence = NULL;
	pthread_mutex_unlock(&s->mu);
	PQfinish(c);
	s->fenced = 0;
}

static const char SQL_FENCE[] = "SELECT pg_try_advisory_lock($1::bigint)";

/* Takes the singleton's fence lock (opening its connection if needed): 1 when
 * held, 0 when it is held elsewhere or the database failed (retried later).
 * After one failed connect (*db_down) a round opens no more connections, so
 * an unreachable database stalls the supervisor for one connect timeout. */
static int fence_take(struct cairn_singleton *s, int64_t now, int *db_down)
{
	const singletons_env *env = &s->owner->env;
	if (s->fenced)
		return 1;
	if (now < s->next_fence_ms)
		return 0;
	if (s->fence && !fence_alive(s))
		fence_close(s);
	buf err = BUF_INIT;
	if (!s->fence && *db_down)
		return 0;
	if (!s->fence) {
		char app[NAME_MAX_BYTES + 32];
		snprintf(app, sizeof app, "cairn-worker singleton %s", s->def->name);
		PGconn *c = db_connect(env->conninfo, app, &err);
		if (!c) {
			log_kv(env->log, LOG_WARN,
			       "cannot open a singleton's fence connection; retrying", "singleton",
			       s->def->name, "error", buf_str(&err), NULL);
			s->next_fence_ms = now + s->def->backoff_ms;
			*db_down = 1;
			buf_free(&err);
			return 0;
		}
		pthread_mutex_lock(&s->mu);
		s->fence = c;
		pthread_mutex_unlock(&s->mu);
	}
	char key[24];
	db_i64(key,
	       hash_singleton_lock_key(shardmap_group_name(env->map, s->def->group), s->def->name));
	PGresult *r = db_exec(s->fence, &err, SQL_FENCE, 1, (const char *const[]){key});
	if (!r) {
		log_kv(env->log, LOG_WARN, "cannot take a singleton's fence lock; retrying",
		       "singleton", s->def->name, "error", buf_str(&err), NULL);
		fence_close(s);
		s->next_fence_ms = now + s->def->backoff_ms;
		buf_free(&err);
		return 0;
	}
	buf_free(&err);
	s->fenced = db_get_bool(r, 0, 0);
	PQclear(r);
	if (!s->fenced) {
		if (!s->waiting_logged)
			log_kv(
			    env->log, LOG_INFO,
			    "singleton waiting for its fence: a copy still runs on another runner",
			    "singleton", s->def->name, NULL);
		s->waiting_logged = 1;
		s->next_fence_ms = now + env->fence_retry_ms;
		return 0;
	}
	s->waiting_logged = 0;
	s->next_fence_ms = 0;
	return 1;
}

/* ------------------------------------------------------------ lifecycle */

/* Joins a returned thread, closes its fence and books its outcome. */
static void reap(struct cairn_singleton *s)
{
	const singletons_env *env = &s->owner->env;
	pthread_join(s->thread, NULL);
	s->joinable = 0;
	s->stopping = 0;
	int lost = s->fence_lost || !fence_alive(s);
	s->fence_lost = 0;
	fence_close(s);
	set_running(s, 0);
	int failures = 0;
	if (lost) {
		/* The lock went with the connection: not a failure of the singleton,
		 * but wait a backoff before fencing it again. */
		log_kv(env->log, LOG_WARN,
		       "singleton stopped: its fence connection was lost; restarting after backoff",
		       "singleton", s->def->name, NULL);
		s->finished = 0;
		s->next_start_ms = clock_mono_ms() + s->def->backoff_ms;
		return;
	}
	if (atomic_load(&s->cancel)) {
		log_kv(env->log, LOG_INFO, "singleton stopped", "singleton", s->def->name, NULL);
		s->finished = 0;
		s->next_start_ms = 0;
	} else if (s->rc == CAIRN_OK) {
		s->finished = 1;
		log_kv(env->log, LOG_INFO, "singleton finished", "singleton", s->def->name, NULL);
	} else {
		pthread_mutex_lock(&s->mu);
		failures = ++s->failures;
		pthread_mutex_unlock(&s->mu);
		int exp = failures - 1 < 10 ? failures - 1 : 10;
		int64_t delay = s->def->backoff_ms << exp;
		s->next_start_ms = clock_mono_ms() + delay;
		char d[24], f[24];
		snprintf(d, sizeof d, "%" PRId64 "ms", delay);
		snprintf(f, sizeof f, "%d", failures);
		log_kv(env->log, LOG_WARN, "singleton failed; restarting after backoff",
		       "singleton", s->def->name, "status", cairn_strstatus(s->rc), "failures", f,
		       "backoff", d, NULL);
		return;
	}
	pthread_mutex_lock(&s->mu);
	s->failures = 0;
	pthread_mutex_unlock(&s->mu);
}

static int has_exited(struct cairn_singleton *s)
{
	pthread_mutex_lock(&s->mu);
	int e = s->exited;
	pthread_mutex_unlock(&s->mu);
	return e;
}

/* Sets the cancel flag (once) and the deadline after which it is a zombie. */
static void request_stop(struct cairn_singleton *s, int64_t now)
{
	if (!s->joinable || s->stopping)
		return;
	atomic_store(&s->cancel, 1);
	pthread_mutex_lock(&s->mu);
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	s->stopping = 1;
	s->stop_deadline_ms = now + s->owner->env.stop_timeout_ms;
}

/* Past the deadline: detach the thread, close its fence (so another runner
 * may run the singleton) and never start it here while the thread runs. */
static void make_zombie(struct cairn_singleton *s)
{
	const singletons_env *env = &s->owner->env;
	pthread_mutex_lock(&s->mu);
	int exited = s->exited;
	if (!exited)
		s->zombie = 1;
	pthread_mutex_unlock(&s->mu);
	if (exited) {
		reap(s);
		return;
	}
	pthread_detach(s->thread);
	s->joinable = 0;
	s->stopping = 0;
	s->fence_lost = 0;
	fence_close(s);
	char t[24];
	snprintf(t, sizeof t, "%" PRId64 "ms", env->stop_timeout_ms);
	log_kv(env->log, LOG_ERROR,
	       "singleton ignored its cancel flag: left running as a zombie and its fence "
	       "released, so another runner may start it; not started here again until it "
	       "returns",
	       "singleton", s->def->name, "waited", t, NULL);
}

static void start_one(struct cairn_singleton *s, int shard, int64_t now)
{
	const singletons_env *env = &s->owner->env;
	atomic_store(&s->cancel, 0);
	pthread_mutex_lock(&s->mu);
	s->exited = 0;
	s->fence_fd = PQsocket(s->fence);
	int failures = s->failures;
	pthread_mutex_unlock(&s->mu);
	if (s->starts++ > 0 && failures > 0)
		atomic_fetch_add(&env->m->singleton_restarts, 1);
	set_running(s, 1);
	if (pthread_create(&s->thread, NULL, singleton_main, s) != 0) {
		set_running(s, 0);
		fence_close(s);
		log_kv(env->log, LOG_ERROR,
		       "cannot start a singleton thread; retrying after backoff", "singleton",
		       s->def->name, NULL);
		s->next_start_ms = now + s->def->backoff_ms;
		return;
	}
	s->joinable = 1;
	char sh[24];
	snprintf(sh, sizeof sh, "%d", shard);
	log_kv(env->log, LOG_INFO, "singleton started", "singleton", s->def->name, "group",
	       shardmap_group_name(env->map, s->def->group), "shard", sh, NULL);
}

/* A running singleton: reaps it if it returned (0: it may start again),
 * otherwise checks its fence, stops it when not owned, and declares it a
 * zombie past its deadline (1: leave it). */
static int watch_running(struct cairn_singleton *s, int owned, int64_t now)
{
	if (has_exited(s)) {
		reap(s);
		return 0;
	}
	if (!s->fence_lost && !fence_alive(s)) {
		s->fence_lost = 1;
		log_kv(s->owner->env.log, LOG_WARN,
		       "singleton's fence connection was lost; cancelling it", "singleton",
		       s->def->name, NULL);
		request_stop(s, now);
	}
	if (!owned)
		request_stop(s, now);
	if (s->stopping && now >= s->stop_deadline_ms)
		make_zombie(s);
	return 1;
}

void singletons_sync(singletons *ss)
{
	int64_t now = clock_mono_ms();
	int db_down = 0;
	for (int i = 0; i < ss->n; i++) {
		struct cairn_singleton *s = &ss->s[i];
		int shard = shard_of(s);
		int owned = shard >= 0 && shardmap_epoch(ss->env.map, s->def->group, shard) > 0;
		if (s->joinable && watch_running(s, owned, now))
			continue;
		if (s->zombie) {
			pthread_mutex_lock(&s->mu);
			int back = s->exited;
			if (back)
				s->zombie = 0;
			pthread_mutex_unlock(&s->mu);
			if (!back)
				continue;
			set_running(s, 0);
			log_kv(ss->env.log, LOG_WARN, "zombie singleton returned at last",
			       "singleton", s->def->name, NULL);
		}
		if (!owned) {
			s->finished = 0;
			s->next_start_ms = 0;
			s->next_fence_ms = 0;
			s->waiting_logged = 0;
			pthread_mutex_lock(&s->mu);
			s->failures = 0;
			pthread_mutex_unlock(&s->mu);
		}
		if (!owned || s->finished || now < s->next_start_ms) {
			if (s->fence)
				fence_close(s);
			continue;
		}
		if (fence_take(s, now, &db_down))
			start_one(s, shard, now);
	}
}

void singletons_stop_shards(singletons *ss, int group, const int *shards, int n)
{
	int64_t now = clock_mono_ms();
	for (int i = 0; i < ss->n; i++) {
		struct cairn_singleton *s = &ss->s[i];
		if (!s->joinable || s->def->group != group)
			continue;
		int shard = shard_of(s);
		for (int k = 0; k < n; k++)
			if (shards[k] == shard) {
				request_stop(s, now);
				break;
			}
	}
}

int singletons_stop_all(singletons *ss)
{
	int zombies = 0;
	int64_t now = clock_mono_ms();
	for (int i = 0; ss && i < ss->n; i++)
		request_stop(&ss->s[i], now);
	for (int i = 0; ss && i < ss->n; i++) {
		struct cairn_singleton *s = &ss->s[i];
		if (s->joinable) {
			pthread_mutex_lock(&s->mu);
			for (int64_t left;
			     !s->exited && (left = s->stop_deadline_ms - clock_mono_ms()) > 0;)
				clock_cond_wait_ms(&s->cv, &s->mu, left);
			int exited = s->exited;
			pthread_mutex_unlock(&s->mu);
			if (exited)
				reap(s);
			else
				make_zombie(s);
		}
		if (s->fence)
			fence_close(s);
		pthread_mutex_lock(&s->mu);
		zombies += s->zombie && !s->exited;
		pthread_mutex_unlock(&s->mu);
	}
	return zombies;
}

int64_t singletons_next_ms(singletons *ss)
{
	int64_t next = 0;
	for (int i = 0; i < ss->n; i++) {
		struct cairn_singleton *s = &ss->s[i];
		int64_t due = 0;
		if (s->joinable && s->stopping)
			due = s->stop_deadline_ms;
		else if (!s->joinable && !s->zombie && !s->finished)
			due = s->next_start_ms > s->next_fence_ms ? s->next_start_ms
			                                          : s->next_fence_ms;
		if (due && (!next || due < next))
			next = due;
	}
	return next;
}

void singletons_status(singletons *ss, cJSON *array)
{
	for (int i = 0; ss && array && i < ss->n; i++) {
		struct cairn_singleton *s = &ss->s[i];
		pthread_mutex_lock(&s->mu);
		int running = s->running, failures = s->failures, zombie = s->zombie && !s->exited;
		int64_t since = s->started_unix_ms;
		pthread_mutex_unlock(&s->mu);
		if (!running)
			continue;
		cJSON *it = cJSON_CreateObject();
		cJSON_AddStringToObject(it, "name", s->def->name);
		cJSON_AddNumberToObject(it, "shard", shard_of(s));
		cJSON_AddNumberToObject(it, "started_unix_ms", (double)since);
		cJSON_AddNumberToObject(it, "restarts", failures);
		cJSON_AddBoolToObject(it, "zombie", zombie);
		cJSON_AddItemToArray(array, it);
	}
}

void singletons_free(singletons *ss)
{
	if (!ss)
		return;
	for (int i = 0; i < ss->n; i++) {
		pthread_mutex_lock(&ss->s[i].mu);
		int running = ss->s[i].zombie && !ss->s[i].exited;
		pthread_mutex_unlock(&ss->s[i].mu);
		if (running)
			return; /* a zombie still uses its handle: leak them all */
	}
	for (int i = 0; i < ss->n; i++) {
		if (ss->s[i].fence)
			fence_close(&ss->s[i]);
		pthread_mutex_destroy(&ss->s[i].mu);
		pthread_cond_destroy(&ss->s[i].cv);
	}
	free(ss->s);
	free(ss);
}
