/*
 * shardmap.c - the runner's table of owned shards (see shardmap.h). Epochs
 * and flags are atomics so the hot paths (claim, every durable call) read
 * them without a lock; the mutex only serves the idle wait of a release.
 */
#include "shardmap.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "clock.h"
#include "hash.h"

typedef struct shard_group {
	char *name;
	int32_t lock_key;
	_Atomic int64_t *epoch;       /* [shards]; 0: not held */
	_Atomic unsigned char *going; /* [shards]; 1: being released */
	_Atomic int *busy;            /* [shards]; runs in flight here */
} shard_group;

struct shardmap {
	shard_group *g;
	int ngroups;
	_Atomic int shards; /* published after the arrays exist */
	_Atomic int owned;
	pthread_mutex_t mu; /* with idle_cv: a run of some shard ended */
	pthread_cond_t idle_cv;
};

int shardmap_new(char *const *groups, int ngroups, shardmap **out)
{
	*out = NULL;
	shardmap *m = calloc(1, sizeof *m);
	if (!m || !(m->g = calloc((size_t)ngroups, sizeof *m->g))) {
		free(m);
		return -CAIRN_ENOMEM;
	}
	m->ngroups = ngroups;
	pthread_mutex_init(&m->mu, NULL);
	int rc = clock_cond_init(&m->idle_cv);
	for (int i = 0; i < ngroups && !rc; i++) {
		m->g[i].name = strdup(groups[i]);
		m->g[i].lock_key = hash_group_lock_key(groups[i]);
		if (!m->g[i].name)
			rc = -CAIRN_ENOMEM;
	}
	if (rc) {
		shardmap_free(m);
		return rc;
	}
	*out = m;
	return 0;
}

void shardmap_free(shardmap *m)
{
	if (!m)
		return;
	for (int i = 0; i < m->ngroups; i++) {
		free(m->g[i].name);
		free(m->g[i].epoch);
		free(m->g[i].going);
		free(m->g[i].busy);
	}
	free(m->g);
	pthread_mutex_destroy(&m->mu);
	pthread_cond_destroy(&m->idle_cv);
	free(m);
}

int shardmap_set_shards(shardmap *m, int shards)
{
	int have = atomic_load(&m->shards);
	if (have)
		return have == shards ? 0 : -CAIRN_EINVAL;
	if (shards <= 0)
		return -CAIRN_EINVAL;
	for (int i = 0; i < m->ngroups; i++) {
		shard_group *g = &m->g[i];
		g->epoch = calloc((size_t)shards, sizeof *g->epoch);
		g->going = calloc((size_t)shards, sizeof *g->going);
		g->busy = calloc((size_t)shards, sizeof *g->busy);
		if (!g->epoch || !g->going || !g->busy) {
			for (int k = 0; k <= i; k++) {
				free(m->g[k].epoch);
				free(m->g[k].going);
				free(m->g[k].busy);
				m->g[k].epoch = NULL;
				m->g[k].going = NULL;
				m->g[k].busy = NULL;
			}
			return -CAIRN_ENOMEM;
		}
	}
	atomic_store(&m->shards, shards);
	return 0;
}

int shardmap_shards(const shardmap *m)
{
	return atomic_load(&((shardmap *)m)->shards);
}

int shardmap_ngroups(const shardmap *m)
{
	return m->ngroups;
}

const char *shardmap_group_name(const shardmap *m, int group)
{
	return group >= 0 && group < m->ngroups ? m->g[group].name : NULL;
}

int32_t shardmap_lock_key(const shardmap *m, int group)
{
	return m->g[group].lock_key;
}

int shardmap_group_index(const shardmap *m, const char *name)
{
	for (int i = 0; i < m->ngroups; i++)
		if (strcmp(m->g[i].name, name) == 0)
			return i;
	return -1;
}

static shard_group *at(const shardmap *m, int g, int s)
{
	if (g < 0 || g >= m->ngroups || s < 0 || s >= shardmap_shards(m))
		return NULL;
	return &m->g[g];
}

int64_t shardmap_epoch(const shardmap *m, int g, int s)
{
	shard_group *gr = at(m, g, s);
	if (!gr || atomic_load(&gr->going[s]))
		return 0;
	return atomic_load(&gr->epoch[s]);
}

int shardmap_held(const shardmap *m, int g, int s)
{
	shard_group *gr = at(m, g, s);
	return gr && atomic_load(&gr->epoch[s]) != 0;
}

int shardmap_going(const shardmap *m, int g, int s)
{
	shard_group *gr = at(m, g, s);
	return gr && atomic_load(&gr->going[s]) && atomic_load(&gr->epoch[s]) != 0;
}

int shardmap_owned(const shardmap *m)
{
	return atomic_load(&((shardmap *)m)->owned);
}

void shardmap_acquired(shardmap *m, int g, int s, int64_t epoch)
{
	shard_group *gr = at(m, g, s);
	if (!gr || epoch <= 0)
		return;
	atomic_store(&gr->going[s], 0);
	if (atomic_exchange(&gr->epoch[s], epoch) == 0)
		atomic_fetch_add(&m->owned, 1);
}

void shardmap_releasing(shardmap *m, int g, int s)
{
	shard_group *gr = at(m, g, s);
	if (gr)
		atomic_store(&gr->going[s], 1);
}

void shardmap_released(shardmap *m, int g, int s)
{
	shard_group *gr = at(m, g, s);
	if (!gr)
		return;
	if (atomic_exchange(&gr->epoch[s], 0) != 0)
		atomic_fetch_sub(&m->owned, 1);
	atomic_store(&gr->going[s], 0);
}

void shardmap_forget(shardmap *m)
{
	int shards = shardmap_shards(m);
	for (int g = 0; g < m->ngroups; g++)
		for (int s = 0; s < shards; s++)
			shardmap_released(m, g, s);
}

void shardmap_run_begin(shardmap *m, int g, int s)
{
	shard_group *gr = at(m, g, s);
	if (gr)
		atomic_fetch_add(&gr->busy[s], 1);
}

void shardmap_run_end(shardmap *m, int g, int s)
{
	shard_group *gr = at(m, g, s);
	if (!gr)
		return;
	pthread_mutex_lock(&m->mu);
	atomic_fetch_sub(&gr->busy[s], 1);
	pthread_cond_broadcast(&m->idle_cv);
	pthread_mutex_unlock(&m->mu);
}

int shardmap_wait_idle(shardmap *m, int g, const int *shards, int n, int64_t deadline_ms)
{
	int busy = 0;
	pthread_mutex_lock(&m->mu);
	for (;;) {
		busy = 0;
		for (int i = 0; i < n; i++) {
			shard_group *gr = at(m, g, shards[i]);
			busy += gr ? atomic_load(&gr->busy[shards[i]]) : 0;
		}
		int64_t left = deadline_ms - clock_mono_ms();
		if (!busy || left <= 0)
			break;
		clock_cond_wait_ms(&m->idle_cv, &m->mu, left);
	}
	pthread_mutex_unlock(&m->mu);
	return busy ? -CAIRN_ETIMEOUT : 0;
}

void shardmap_ranges(buf *out, const int *sorted, int n)
{
	for (int i = 0; i < n;) {
		int j = i;
		while (j + 1 < n && sorted[j + 1] == sorted[j] + 1)
			j++;
		buf_printf(out, "%s%d", out->len ? "," : "", sorted[i]);
		if (j > i)
			buf_printf(out, "-%d", sorted[j]);
		i = j + 1;
	}
}

/* Adds name: the shards of group g (epoch: those of that epoch only; 0:
 * every owned one) as ranges. */
static void add_ranges(const shardmap *m, int g, int64_t epoch, int *list, cJSON *o,
                       const char *name)
{
	int n = 0;
	for (int s = 0; s < shardmap_shards(m); s++) {
		int64_t e = shardmap_epoch(m, g, s);
		if (e && (!epoch || e == epoch))
			list[n++] = s;
	}
	buf b = BUF_INIT;
	shardmap_ranges(&b, list, n);
	cJSON_AddStringToObject(o, name, buf_str(&b));
	buf_free(&b);
}

void shardmap_status(const shardmap *m, cJSON *array)
{
	int shards = shardmap_shards(m);
	int *list = calloc((size_t)shards + 1, sizeof *list);
	int64_t *seen = calloc((size_t)shards + 1, sizeof *seen);
	for (int g = 0; array && list && seen && g < m->ngroups; g++) {
		cJSON *grp = cJSON_CreateObject();
		cJSON_AddStringToObject(grp, "group", m->g[g].name);
		add_ranges(m, g, 0, list, grp, "owned");
		/* The epochs, each with its shards: few, as shards are taken in
		 * rounds. */
		cJSON *epochs = cJSON_AddArrayToObject(grp, "epochs");
		int count = 0, nseen = 0;
		for (int s = 0; s < shards; s++) {
			int64_t e = shardmap_epoch(m, g, s);
			if (!e)
				continue;
			count++;
			int k = 0;
			while (k < nseen && seen[k] != e)
				k++;
			if (k < nseen)
				continue;
			seen[nseen++] = e;
			cJSON *it = cJSON_CreateObject();
			cJSON_AddNumberToObject(it, "epoch", (double)e);
			add_ranges(m, g, e, list, it, "shards");
			cJSON_AddItemToArray(epochs, it);
		}
		cJSON_AddNumberToObject(grp, "count", count);
		cJSON_AddItemToArray(array, grp);
	}
	free(list);
	free(seen);
}
