/*
 * jcache.h - the journals of the runs a worker executed recently (DESIGN
 * section 16), so that a run that wakes again does not load, parse and
 * walk its whole journal each time: the claim loads only the entries after
 * what the cache holds, and a replay of a cached entry hands back the
 * value parsed before.
 *
 * What it may hold is exact: the entries at seq 0 up to (not including)
 * upto, each settled for good (completed or timed out: the commit never
 * overwrites those), of a run whose journal had been cut journal_cuts
 * times (runs.journal_cuts, migration 0022: a retry's cut adds one in the
 * statement that cuts). The claim is told, per cached run, upto and the
 * count it has, and returns the entries from upto on only when the count
 * is still the run's (else all of them): a journal cut since, by a retry
 * here or on another worker or by `cairn retry`, is loaded whole again.
 * The cache only saves reads; the fence decides.
 *
 * Bounded: in bytes of memory (CAIRN_JOURNAL_CACHE), and in runs
 * (JCACHE_MAX_RUNS: the claim sends that many ids); the least recently
 * used run goes first. A run with fewer than JCACHE_MIN_ENTRIES settled
 * entries is not kept, as loading it costs little.
 *
 * Owns: its runs, each with copies of its entries and the values replays
 * parsed. Not thread-safe: its owner (dispatch.c) calls it under its lock;
 * a run taken from it (jcache_take) belongs to the job that executes it
 * until it is put back. Pure: no database.
 */
#ifndef CAIRN_JCACHE_H
#define CAIRN_JCACHE_H
#include <stddef.h>
#include <stdint.h>

#include "journal.h"
#include "pgarr.h"

#define JCACHE_MAX_RUNS    256
#define JCACHE_MIN_ENTRIES 64

/* The cached journal of one run. */
typedef struct jcache_run {
	int64_t run_id;
	int cuts;         /* runs.journal_cuts when its entries were read */
	int upto;         /* e[seq] for 0 <= seq < upto, each settled */
	int64_t db_bytes; /* their stored size (max_journal_bytes counts it) */
	size_t mem_bytes; /* their size in memory (the cache's bound counts it) */
	journal_entry *e; /* values owned; strings in strs */
	jstrings *strs;
	int cap;
	struct jcache_run *newer, *older; /* in the cache, by use */
} jcache_run;

typedef struct jcache jcache;

/* A cache of at most max_bytes (0: it keeps nothing); NULL when out of
 * memory. */
jcache *jcache_new(size_t max_bytes);
void jcache_free(jcache *c);
/* Takes the run out of the cache (the caller owns it), or NULL. */
jcache_run *jcache_take(jcache *c, int64_t run_id);
/* Puts r in (the cache owns it) as the most recently used, then lets the
 * least recently used go while the cache is over its bounds: what it lets
 * go (a copy of the same run it held, the runs evicted, r itself when it
 * is too small to keep, with fewer than JCACHE_MIN_ENTRIES entries, or
 * larger than the whole bound) is added to *gone, for the caller to free
 * (jcache_run_free_list) when it holds no lock. */
void jcache_put(jcache *c, jcache_run *r, jcache_run **gone);
/* Frees runs linked as jcache_put's *gone. */
void jcache_run_free_list(jcache_run *list);
/* Appends each cached run's id, upto and cuts to the three arrays (the
 * claim's parameters), most recently used first; how many. */
int jcache_claim_args(const jcache *c, pgarr *runs, pgarr *upto, pgarr *cuts);
size_t jcache_bytes(const jcache *c);
int jcache_count(const jcache *c);

/* The cached entry at seq, or NULL (r may be NULL). */
journal_entry *jcache_run_at(jcache_run *r, int seq);
/*
 * Extends *r (NULL: a new one for run_id, made only when tail starts at
 * seq 0 with JCACHE_MIN_ENTRIES such entries) with the entries of tail
 * that follow it, from seq upto on while
 * each is there and settled: their strings are copied and their parsed
 * values moved (tail keeps the rest). cuts is the run's count as the claim
 * that read tail saw it. 0, or -CAIRN_ENOMEM (*r freed and NULL).
 */
int jcache_run_extend(jcache_run **r, int64_t run_id, int cuts, journal *tail);
void jcache_run_free(jcache_run *r);
#endif
