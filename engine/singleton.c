/*
 * singleton.c - the singleton supervisor (see singleton.h). A singleton's
 * shard is hash(name) in its group; while this runner owns that shard the
 * singleton runs in its own thread. Before a shard is unlocked the lease
 * loop's release hook calls singletons_stop_shards(), which sets the cancel
 * flag and joins the thread, so two runners never run one singleton at once.
 */
#include "singleton.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "hash.h"

struct cairn_singleton {
	const singleton_def *def;
	singletons *owner;
	pthread_t thread;
	_Atomic int cancel;
	_Atomic int exited;
	pthread_mutex_t mu; /* with cv: wakes cairn_singleton_sleep on cancel; guards the
	                       status fields below */
	pthread_cond_t cv;
	int running;
	int64_t started_unix_ms;
	int failures;

	/* The supervisor thread's alone. */
	int joinable;
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

int cairn_singleton_cancelled(cairn_singleton *s)
{
	return atomic_load(&s->cancel);
}

/* Sleeps on the singleton's own condition variable, which a cancel wakes. */
int cairn_singleton_sleep(cairn_singleton *s, int64_t ms)
{
	int64_t until = clock_mono_ms() + ms;
	pthread_mutex_lock(&s->mu);
	while (!atomic_load(&s->cancel)) {
		int64_t left = until - clock_mono_ms();
		if (left <= 0)
			break;
		clock_cond_wait_ms(&s->cv, &s->mu, left);
	}
	pthread_mutex_unlock(&s->mu);
	return atomic_load(&s->cancel);
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
	atomic_store(&s->exited, 1);
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

/* Joins an exited (or cancelled) thread and books its outcome. */
static void reap(struct cairn_singleton *s, int cancelled)
{
	const singletons_env *env = &s->owner->env;
	pthread_join(s->thread, NULL);
	s->joinable = 0;
	set_running(s, 0);
	int failures = 0;
	if (cancelled) {
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

static void stop_one(struct cairn_singleton *s)
{
	if (!s->joinable)
		return;
	atomic_store(&s->cancel, 1);
	pthread_mutex_lock(&s->mu);
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	reap(s, 1);
}

static void start_one(struct cairn_singleton *s, int shard, int64_t now)
{
	const singletons_env *env = &s->owner->env;
	atomic_store(&s->cancel, 0);
	atomic_store(&s->exited, 0);
	pthread_mutex_lock(&s->mu);
	int failures = s->failures;
	pthread_mutex_unlock(&s->mu);
	if (s->starts++ > 0 && failures > 0)
		atomic_fetch_add(&env->m->singleton_restarts, 1);
	set_running(s, 1);
	if (pthread_create(&s->thread, NULL, singleton_main, s) != 0) {
		set_running(s, 0);
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

void singletons_sync(singletons *ss)
{
	int64_t now = clock_mono_ms();
	for (int i = 0; i < ss->n; i++) {
		struct cairn_singleton *s = &ss->s[i];
		int shard = shard_of(s);
		int owned = shard >= 0 && shardmap_epoch(ss->env.map, s->def->group, shard) > 0;
		if (s->joinable && atomic_load(&s->exited))
			reap(s, atomic_load(&s->cancel));
		if (s->joinable && !owned) {
			stop_one(s);
			continue;
		}
		if (!owned) {
			s->finished = 0;
			s->next_start_ms = 0;
			pthread_mutex_lock(&s->mu);
			s->failures = 0;
			pthread_mutex_unlock(&s->mu);
		}
		if (s->joinable || !owned || s->finished || now < s->next_start_ms)
			continue;
		start_one(s, shard, now);
	}
}

void singletons_stop_shards(singletons *ss, int group, const int *shards, int n)
{
	for (int i = 0; i < ss->n; i++) {
		struct cairn_singleton *s = &ss->s[i];
		if (!s->joinable || s->def->group != group)
			continue;
		int shard = shard_of(s);
		for (int k = 0; k < n; k++)
			if (shards[k] == shard) {
				stop_one(s);
				break;
			}
	}
}

void singletons_stop_all(singletons *ss)
{
	for (int i = 0; ss && i < ss->n; i++)
		stop_one(&ss->s[i]);
}

int64_t singletons_next_ms(singletons *ss)
{
	int64_t next = 0;
	for (int i = 0; i < ss->n; i++) {
		struct cairn_singleton *s = &ss->s[i];
		if (!s->joinable && !s->finished && s->next_start_ms &&
		    (!next || s->next_start_ms < next))
			next = s->next_start_ms;
	}
	return next;
}

void singletons_status(singletons *ss, cJSON *array)
{
	for (int i = 0; ss && array && i < ss->n; i++) {
		struct cairn_singleton *s = &ss->s[i];
		pthread_mutex_lock(&s->mu);
		int running = s->running, failures = s->failures;
		int64_t since = s->started_unix_ms;
		pthread_mutex_unlock(&s->mu);
		if (!running)
			continue;
		cJSON *it = cJSON_CreateObject();
		cJSON_AddStringToObject(it, "name", s->def->name);
		cJSON_AddNumberToObject(it, "shard", shard_of(s));
		cJSON_AddNumberToObject(it, "started_unix_ms", (double)since);
		cJSON_AddNumberToObject(it, "restarts", failures);
		cJSON_AddItemToArray(array, it);
	}
}

void singletons_free(singletons *ss)
{
	if (!ss)
		return;
	for (int i = 0; i < ss->n; i++) {
		pthread_mutex_destroy(&ss->s[i].mu);
		pthread_cond_destroy(&ss->s[i].cv);
	}
	free(ss->s);
	free(ss);
}
