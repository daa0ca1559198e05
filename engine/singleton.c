/*
 * singleton.c - named background tasks that run on exactly one runner
 * (DESIGN section 6). A singleton's shard is hash(name) in its group; while
 * this runner owns that shard the singleton runs in its own thread. Before a
 * shard is unlocked the lease loop calls singletons_stop_shards(), which sets
 * the cancel flag and joins the thread, so two runners never run one
 * singleton at once. A singleton that returns an error is restarted after
 * backoff * 2^min(failures - 1, 10).
 *
 * Owns: the singleton threads. Every function here but the thread body runs
 * on the supervisor thread.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "parse.h"
#include "worker.h"

struct cairn_singleton {
	cairn_worker *w;
	char name[NAME_MAX_BYTES + 1];
	cairn_singleton_fn fn;
	void *arg;
	int group;
	int64_t backoff_ms;

	pthread_t thread;
	_Atomic int joinable;
	_Atomic int cancel;
	_Atomic int exited;
	pthread_mutex_t mu; /* with cv: wakes cairn_singleton_sleep on cancel */
	pthread_cond_t cv;
	int rc;
	int failures;
	int finished; /* returned CAIRN_OK: not restarted until the shard comes back */
	int64_t next_start_ms;
	int64_t started_unix_ms;
	uint64_t starts;
};

int cairn_singleton_register(cairn_worker *w, const char *name, cairn_singleton_fn fn, void *arg,
                             const cairn_singleton_opts *opts)
{
	char err[PARSE_ERR_MAX];
	buf_reset(&w->err);
	if (!fn || parse_check_name("singleton name", name, err) < 0) {
		buf_printf(&w->err, "%s", fn ? err : "singleton function is NULL");
		return CAIRN_EINVAL;
	}
	int group = 0;
	if (opts && opts->group) {
		group = -1;
		for (int i = 0; i < w->cfg.ngroups; i++)
			if (strcmp(w->cfg.groups[i], opts->group) == 0)
				group = i;
		if (group < 0) {
			buf_printf(
			    &w->err,
			    "singleton %s: group \"%s\" is not one of CAIRN_SHARD_GROUPS (%s)",
			    name, opts->group, w->cfg.groups_text);
			return CAIRN_EINVAL;
		}
	}
	if (opts && opts->backoff_ms < 0) {
		buf_printf(&w->err, "singleton %s: backoff_ms is %" PRId64 "; accepted: >= 0", name,
		           opts->backoff_ms);
		return CAIRN_EINVAL;
	}
	for (int i = 0; i < w->nsingletons; i++)
		if (strcmp(w->singletons[i]->name, name) == 0) {
			buf_printf(&w->err, "singleton %s is registered twice", name);
			return CAIRN_EINVAL;
		}
	struct cairn_singleton **grown =
	    realloc(w->singletons, (size_t)(w->nsingletons + 1) * sizeof *grown);
	if (!grown)
		return CAIRN_ENOMEM;
	w->singletons = grown;
	struct cairn_singleton *s = calloc(1, sizeof *s);
	if (!s)
		return CAIRN_ENOMEM;
	s->w = w;
	snprintf(s->name, sizeof s->name, "%s", name);
	s->fn = fn;
	s->arg = arg;
	s->group = group;
	s->backoff_ms = opts && opts->backoff_ms ? opts->backoff_ms : w->cfg.singleton_backoff_ms;
	pthread_mutex_init(&s->mu, NULL);
	worker_cond_init(&s->cv);
	w->singletons[w->nsingletons++] = s; /* pointers: the threads' handles never move */
	return CAIRN_OK;
}

int cairn_singleton_cancelled(cairn_singleton *s)
{
	return atomic_load(&s->cancel);
}

/* Sleeps in slices on the singleton's own condition variable, so a worker
 * that is stopping (whose w->cv waits return at once) is not spun on. */
int cairn_singleton_sleep(cairn_singleton *s, int64_t ms)
{
	int64_t until = worker_now_ms() + ms;
	pthread_mutex_lock(&s->mu);
	while (!atomic_load(&s->cancel)) {
		int64_t left = until - worker_now_ms();
		if (left <= 0)
			break;
		worker_cond_wait_ms(&s->cv, &s->mu, left);
	}
	pthread_mutex_unlock(&s->mu);
	return atomic_load(&s->cancel);
}

const char *cairn_singleton_conninfo(const cairn_singleton *s)
{
	return s->w->cfg.database_url;
}

int64_t cairn_singleton_runner_id(const cairn_singleton *s)
{
	pthread_mutex_lock(&s->w->mu);
	int64_t id = s->w->runner_id;
	pthread_mutex_unlock(&s->w->mu);
	return id;
}

static int shard_of(const struct cairn_singleton *s)
{
	return s->w->shards > 0 ? hash_shard(s->name, s->w->shards) : -1;
}

static void *singleton_main(void *arg)
{
	struct cairn_singleton *s = arg;
	s->rc = s->fn(s, s->arg);
	atomic_store(&s->exited, 1);
	pthread_mutex_lock(&s->w->mu);
	s->w->wake_supervisor = 1;
	pthread_cond_broadcast(&s->w->cv);
	pthread_mutex_unlock(&s->w->mu);
	return NULL;
}

/* Joins an exited (or cancelled) thread and books its outcome. */
static void reap(struct cairn_singleton *s, int cancelled)
{
	cairn_worker *w = s->w;
	pthread_join(s->thread, NULL);
	s->joinable = 0;
	if (cancelled) {
		log_kv(&w->log, LOG_INFO, "singleton stopped", "singleton", s->name, NULL);
		s->failures = 0;
		s->finished = 0;
		s->next_start_ms = 0;
		return;
	}
	if (s->rc == CAIRN_OK) {
		s->finished = 1;
		s->failures = 0;
		log_kv(&w->log, LOG_INFO, "singleton finished", "singleton", s->name, NULL);
		return;
	}
	s->failures++;
	int exp = s->failures - 1 < 10 ? s->failures - 1 : 10;
	int64_t delay = s->backoff_ms << exp;
	s->next_start_ms = worker_now_ms() + delay;
	char d[24], f[24];
	snprintf(d, sizeof d, "%" PRId64 "ms", delay);
	snprintf(f, sizeof f, "%d", s->failures);
	log_kv(&w->log, LOG_WARN, "singleton failed; restarting after backoff", "singleton",
	       s->name, "status", cairn_strstatus(s->rc), "failures", f, "backoff", d, NULL);
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

void singletons_sync(cairn_worker *w)
{
	pthread_mutex_lock(&w->mu);
	w->wake_supervisor = 0;
	pthread_mutex_unlock(&w->mu);
	int64_t now = worker_now_ms();
	for (int i = 0; i < w->nsingletons; i++) {
		struct cairn_singleton *s = w->singletons[i];
		int shard = shard_of(s);
		int owned = shard >= 0 && worker_epoch(w, s->group, shard) > 0;
		if (s->joinable && atomic_load(&s->exited))
			reap(s, atomic_load(&s->cancel));
		if (s->joinable && !owned) {
			stop_one(s);
			continue;
		}
		if (!owned) {
			s->finished = 0;
			s->failures = 0;
			s->next_start_ms = 0;
		}
		if (s->joinable || !owned || s->finished || now < s->next_start_ms)
			continue;
		atomic_store(&s->cancel, 0);
		atomic_store(&s->exited, 0);
		if (s->starts++ > 0 && s->failures > 0)
			atomic_fetch_add(&w->m.singleton_restarts, 1);
		s->started_unix_ms = worker_unix_ms();
		if (pthread_create(&s->thread, NULL, singleton_main, s) != 0) {
			log_kv(&w->log, LOG_ERROR, "cannot start a singleton thread", "singleton",
			       s->name, NULL);
			s->next_start_ms = now + s->backoff_ms;
			continue;
		}
		s->joinable = 1;
		char sh[24];
		snprintf(sh, sizeof sh, "%d", shard);
		log_kv(&w->log, LOG_INFO, "singleton started", "singleton", s->name, "group",
		       w->own[s->group].name, "shard", sh, NULL);
	}
}

void singletons_stop_shards(cairn_worker *w, int group, const int *shards, int n)
{
	for (int i = 0; i < w->nsingletons; i++) {
		struct cairn_singleton *s = w->singletons[i];
		if (!s->joinable || s->group != group)
			continue;
		int shard = shard_of(s);
		for (int k = 0; k < n; k++)
			if (shards[k] == shard) {
				stop_one(s);
				break;
			}
	}
}

void singletons_stop_all(cairn_worker *w)
{
	for (int i = 0; i < w->nsingletons; i++)
		stop_one(w->singletons[i]);
}

int64_t singletons_next_ms(cairn_worker *w)
{
	int64_t next = 0;
	for (int i = 0; i < w->nsingletons; i++) {
		struct cairn_singleton *s = w->singletons[i];
		if (!s->joinable && !s->finished && s->next_start_ms &&
		    (!next || s->next_start_ms < next))
			next = s->next_start_ms;
	}
	return next;
}

void singletons_status(cairn_worker *w, buf *out)
{
	buf_puts(out, "[");
	int first = 1;
	for (int i = 0; i < w->nsingletons; i++) {
		struct cairn_singleton *s = w->singletons[i];
		if (!s->joinable)
			continue;
		buf_printf(out,
		           "%s{\"name\":\"%s\",\"shard\":%d,\"started_unix_ms\":%" PRId64
		           ",\"restarts\":%d}",
		           first ? "" : ",", s->name, shard_of(s), s->started_unix_ms, s->failures);
		first = 0;
	}
	buf_puts(out, "]");
}

void singletons_free(cairn_worker *w)
{
	for (int i = 0; i < w->nsingletons; i++) {
		pthread_mutex_destroy(&w->singletons[i]->mu);
		pthread_cond_destroy(&w->singletons[i]->cv);
		free(w->singletons[i]);
	}
	free(w->singletons);
	w->singletons = NULL;
	w->nsingletons = 0;
}
