/*
 * jcache.c - the journals of recently executed runs (see jcache.h): a list
 * by use, most recent first, and its byte count. The cache holds at most
 * JCACHE_MAX_RUNS runs, so a linear search by id costs less than the claim
 * that follows it.
 */
#include "jcache.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"

struct jcache {
	size_t max_bytes, bytes;
	int n;
	jcache_run *newest, *oldest;
};

jcache *jcache_new(size_t max_bytes)
{
	jcache *c = calloc(1, sizeof *c);
	if (c)
		c->max_bytes = max_bytes;
	return c;
}

void jcache_run_free(jcache_run *r)
{
	if (!r)
		return;
	for (int i = 0; i < r->upto; i++)
		cJSON_Delete(r->e[i].value);
	jstrings_free(r->strs);
	free(r->e);
	free(r);
}

static void unlink_run(jcache *c, jcache_run *r)
{
	if (r->newer)
		r->newer->older = r->older;
	else
		c->newest = r->older;
	if (r->older)
		r->older->newer = r->newer;
	else
		c->oldest = r->newer;
	r->newer = r->older = NULL;
	c->n--;
	c->bytes -= r->mem_bytes;
}

void jcache_free(jcache *c)
{
	if (!c)
		return;
	while (c->newest) {
		jcache_run *r = c->newest;
		unlink_run(c, r);
		jcache_run_free(r);
	}
	free(c);
}

jcache_run *jcache_take(jcache *c, int64_t run_id)
{
	for (jcache_run *r = c ? c->newest : NULL; r; r = r->older)
		if (r->run_id == run_id) {
			unlink_run(c, r);
			return r;
		}
	return NULL;
}

/* Adds r to the list *gone (linked by older). */
static void let_go(jcache_run *r, jcache_run **gone)
{
	if (!r)
		return;
	r->newer = NULL;
	r->older = *gone;
	*gone = r;
}

void jcache_run_free_list(jcache_run *list)
{
	while (list) {
		jcache_run *next = list->older;
		jcache_run_free(list);
		list = next;
	}
}

void jcache_put(jcache *c, jcache_run *r, jcache_run **gone)
{
	if (!r)
		return;
	if (!c || r->upto < JCACHE_MIN_ENTRIES || r->mem_bytes > c->max_bytes) {
		let_go(r, gone);
		return;
	}
	let_go(jcache_take(c, r->run_id), gone);
	r->older = c->newest;
	r->newer = NULL;
	if (c->newest)
		c->newest->newer = r;
	else
		c->oldest = r;
	c->newest = r;
	c->n++;
	c->bytes += r->mem_bytes;
	while (c->bytes > c->max_bytes || c->n > JCACHE_MAX_RUNS) {
		jcache_run *old = c->oldest;
		unlink_run(c, old);
		let_go(old, gone);
	}
}

int jcache_claim_args(const jcache *c, pgarr *runs, pgarr *upto, pgarr *cuts)
{
	int n = 0;
	for (const jcache_run *r = c ? c->newest : NULL; r; r = r->older, n++) {
		pgarr_add_i64(runs, r->run_id);
		pgarr_add_i64(upto, r->upto);
		pgarr_add_i64(cuts, r->cuts);
	}
	return n;
}

size_t jcache_bytes(const jcache *c)
{
	return c ? c->bytes : 0;
}

int jcache_count(const jcache *c)
{
	return c ? c->n : 0;
}

journal_entry *jcache_run_at(jcache_run *r, int seq)
{
	return r && seq >= 0 && seq < r->upto ? &r->e[seq] : NULL;
}

/* What an entry costs in memory beside its value. */
static size_t entry_bytes(const journal_entry *e)
{
	return sizeof *e + strlen(e->name) + 1 + (e->output ? strlen(e->output) + 1 : 0) +
	       (e->error ? strlen(e->error) + 1 : 0);
}

/* Copies tail entry t into d, its strings into strs (one block for many
 * entries, not three allocations each) and its value moved: 0 or
 * -CAIRN_ENOMEM. */
static int copy_entry(jstrings **strs, journal_entry *d, journal_entry *t)
{
	*d = *t;
	d->name = jstrings_dup(strs, t->name);
	d->output = jstrings_dup(strs, t->output);
	d->error = jstrings_dup(strs, t->error);
	if (!d->name || (t->output && !d->output) || (t->error && !d->error))
		return -CAIRN_ENOMEM;
	t->value = NULL;
	return 0;
}

/* Room in r for entries up to seq upto + more. */
static int grow(jcache_run *r, int more)
{
	if (r->upto + more <= r->cap)
		return 0;
	int cap = r->cap ? r->cap : 64;
	while (cap < r->upto + more)
		cap *= 2;
	journal_entry *g = realloc(r->e, (size_t)cap * sizeof *g);
	if (!g)
		return -CAIRN_ENOMEM;
	r->e = g;
	r->cap = cap;
	return 0;
}

int jcache_run_extend(jcache_run **rp, int64_t run_id, int cuts, journal *tail)
{
	jcache_run *r = *rp;
	/* The tail's entries are sorted by seq: find where the cached ones
	 * end, then take those that follow without a gap while settled. */
	int from = r ? r->upto : 0, i = 0, k;
	while (i < tail->n && tail->e[i].seq < from)
		i++;
	for (k = i; k < tail->n && tail->e[k].seq == from + (k - i) &&
	            step_status_settled(tail->e[k].status);
	     k++)
		;
	if (k == i || (!r && k - i < JCACHE_MIN_ENTRIES))
		return 0; /* nothing new, or too little to be worth keeping */
	if (!r) {
		if (!(r = calloc(1, sizeof *r)))
			return -CAIRN_ENOMEM;
		r->run_id = run_id;
		r->mem_bytes = sizeof *r;
		*rp = r;
	}
	r->cuts = cuts;
	if (grow(r, k - i) < 0) {
		jcache_run_free(r);
		*rp = NULL;
		return -CAIRN_ENOMEM;
	}
	for (; i < k; i++) {
		journal_entry *d = &r->e[r->upto];
		if (copy_entry(&r->strs, d, &tail->e[i]) < 0) {
			jcache_run_free(r);
			*rp = NULL;
			return -CAIRN_ENOMEM;
		}
		r->upto++;
		r->db_bytes += d->db_bytes;
		r->mem_bytes += entry_bytes(d) + journal_value_bytes(d->value);
	}
	return 0;
}
