/*
 * idmap.h - a map from run ids (positive int64) to pointers, by open
 * addressing: what replay looks up once per durable call about a child
 * (exec.c: the children a run started, and the ends its waits took), so
 * that a run with N children costs O(N) to replay, not O(N^2). Pure.
 *
 * Owns: its table (the values' half only once one is not NULL); never the
 * values it points to.
 */
#ifndef CAIRN_IDMAP_H
#define CAIRN_IDMAP_H
#include <stddef.h>
#include <stdint.h>

typedef struct idmap {
	int64_t *keys; /* 0: an empty slot */
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
void idmap_free(idmap *m);
#endif
