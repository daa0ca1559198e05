/*
 * journal.h - a run's journal and buffered signals as the claim returns them
 * (JSON arrays, numbers rendered as text so that no integer goes through a
 * double, stored values as JSON text in a string so that a deep or odd value
 * is parsed only when a replay uses it), parsed once into typed entries.
 * Replay looks entries up by sequence number; gaps are allowed and
 * the cost of a lookup does not depend on how large a seq is. A row that
 * cannot be parsed fails the load with a message naming the row, so a
 * corrupt journal fails its run alone. Pure: no I/O.
 *
 * The claim's array is parsed one row at a time, and what an entry keeps of
 * its row (its strings) is copied into blocks of its journal's own (a
 * jstrings): as one cJSON tree, a journal of 100,000 entries (a parent of
 * 100,000 children) took about 1.3 kB an entry, and the worker's memory
 * stayed at that peak.
 *
 * Owns: the entries and their strings.
 */
#ifndef CAIRN_JOURNAL_H
#define CAIRN_JOURNAL_H
#include <stdint.h>

#include "buf.h"
#include "seal.h"
#include "state.h"

struct cJSON;

/* Strings copied into blocks (from 1 kB, doubling up to JSTRINGS_BLOCK
 * bytes, or one string's size when larger), freed together. */
typedef struct jstrings jstrings;
#define JSTRINGS_BLOCK 65536
/* A copy of s (NULL: NULL) in *b's blocks; NULL when out of memory. */
const char *jstrings_dup(jstrings **b, const char *s);
/* The bytes *b's blocks hold, for the memory a cache counts. */
size_t jstrings_bytes(const jstrings *b);
void jstrings_free(jstrings *b);

typedef struct journal_entry {
	int seq;
	const char *name;
	step_kind kind;
	step_status status;
	const char *output; /* JSON text of the result; NULL: none */
	const char *error;  /* NULL: none */
	int attempts;
	int64_t wake_ms, started_ms; /* Unix ms; 0: not set */
	int64_t db_bytes;            /* its stored size (pg_column_size), 0: not known */
	/* The output parsed, once (journal_value): a replay of the entry hands
	 * the workflow a copy of it, and never parses the text again. NULL
	 * until a replay asks. Owned by the entry. */
	struct cJSON *value;
} journal_entry;

typedef struct journal {
	jstrings *strs;   /* the entries' strings */
	journal_entry *e; /* sorted by seq, no two alike */
	int n, cap;
} journal;

/*
 * Parses the claim's journal (NULL or "" is an empty journal). 0, or
 * -CAIRN_EINVAL with "journal row N: ..." in err for a corrupt row or a
 * repeated seq, or -CAIRN_ENOMEM. On error j is left empty.
 */
int journal_parse(const char *text, journal *j, buf *err);
/*
 * Decrypts the entries' sealed outputs and errors with k (seal.h), in place:
 * 0; SEAL_NOKEY when one names a key k lacks (its id in key, SEAL_ID_MAX + 1
 * bytes), -CAIRN_EINVAL when one does not decrypt, -CAIRN_ENOMEM; err says
 * which row and why.
 */
int journal_unseal(journal *j, const seal_keys *k, buf *err, char *key);
/* The entry with this seq, or NULL. */
const journal_entry *journal_at(const journal *j, int seq);
journal_entry *journal_find(journal *j, int seq);
/* Frees the entries, their strings and the values parsed. */
void journal_free(journal *j);
/*
 * The entry's output parsed (JSON null for none), parsed at the first call
 * and kept in e->value: 0 with *out (owned by e), or -CAIRN_EINVAL with why
 * in err (not JSON, or characters json_check_text refuses), -CAIRN_ENOMEM.
 * *added is what the parse added to the entry's size in memory (0 when it
 * was parsed before).
 */
int journal_value(journal_entry *e, const struct cJSON **out, size_t *added, buf *err);
/* The bytes a parsed value holds in memory (its nodes and strings). */
size_t journal_value_bytes(const struct cJSON *v);

typedef struct signal_entry {
	int64_t id; /* sending order */
	const char *name;
	const char *payload; /* JSON text */
	int taken;
} signal_entry;

typedef struct signal_box {
	jstrings *strs; /* the signals' strings */
	signal_entry *e;
	int n, cap;
	signal_entry **by_name; /* e by name, then id: made by the first lookup */
} signal_box;

/* Parses the claim's unconsumed signals; as journal_parse. */
int signals_parse(const char *text, signal_box *b, buf *err);
/* Decrypts the payloads: as journal_unseal. */
int signals_unseal(signal_box *b, const seal_keys *k, buf *err, char *key);
/* The oldest signal of this name not yet taken, marked taken; NULL if none.
 * A lookup costs O(log n) (a run may hold thousands of its children's
 * ends). */
signal_entry *signals_take(signal_box *b, const char *name);
/* The same, not marked taken: -CAIRN_ENOMEM is NULL too (with *oom set). */
signal_entry *signals_find(signal_box *b, const char *name, int *oom);
void signals_free(signal_box *b);
#endif
