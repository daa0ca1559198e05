/*
 * idmap.h - a map from run ids (positive int64) to pointers, in a sorted
 * array: what replay looks up once per durable call about a child
 * (exec.c: the children a run started, and the ends its waits took), so
 * that a run with N children costs O(N log N) to replay, not O(N^2).
 * Children's ids come from a sequence in the order they start, so adding
 * one appends; an id below the last (an orphan found again) moves the
 * ones above it. 8 bytes a key and no node per key: a parent of 100,000
 * children holds 1 MB of them at most, grown by realloc (which moves big
 * blocks by remapping them, and leaves no freed block behind). Pure.
 *
 * Owns: its arrays (the values' only once one is not NULL); never the
 * values they point to.
 */
#ifndef CAIRN_IDMAP_H
#define CAIRN_IDMAP_H
#include <stddef.h>
#include <stdint.h>

typedef struct idmap {
	int64_t *keys; /* ascending, n of them */
	const void **vals;
	size_t cap, n;
} idmap;

#define IDMAP_INIT                                                                                 \
	{                                                                                          \
		NULL, NULL, 0, 0                                                                   \
	}

/* Sets key (> 0) to val, adding it if new: 0, or -CAIRN_ENOMEM (the map is
 * as it was). */
int idmap_put(idmap *m, int64_t key, const void *val);
/* 1 with *val when key is there, else 0. */
int idmap_get(const idmap *m, int64_t key, const void **val);
/* 1 with *at, key's place among the n keys (0 to n - 1), when it is there,
 * else 0: for a bitmap of some of the keys. */
int idmap_index(const idmap *m, int64_t key, size_t *at);
void idmap_free(idmap *m);
#endif
