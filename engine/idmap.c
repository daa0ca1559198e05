/* idmap.c - run ids to pointers by linear probing (see idmap.h). */
#include "idmap.h"

#include <stdlib.h>

#include "cairn.h"

/* Run ids come from a sequence, so close ids must not share a probe run:
 * a multiplicative hash spreads them. */
static size_t slot_of(int64_t key, size_t cap)
{
	return (size_t)(((uint64_t)key * 0x9e3779b97f4a7c15ULL) >> 17) & (cap - 1);
}

static size_t find(const idmap *m, int64_t key)
{
	size_t i = slot_of(key, m->cap);
	while (m->keys[i] && m->keys[i] != key)
		i = (i + 1) & (m->cap - 1);
	return i;
}

/* Doubles the table (at least 16 slots), keeping it at most half full. */
/* The values are allocated with the first that is not NULL: a parent's
 * map of the children it started holds no values until it takes their
 * ends, and 100,000 children then cost 2 MB of keys instead of 4. */
static int grow(idmap *m)
{
	size_t cap = m->cap ? m->cap * 2 : 16;
	idmap g = {calloc(cap, sizeof *g.keys), m->vals ? calloc(cap, sizeof *g.vals) : NULL, cap,
	           m->n};
	if (!g.keys || (m->vals && !g.vals)) {
		free(g.keys);
		free(g.vals);
		return -CAIRN_ENOMEM;
	}
	for (size_t i = 0; i < m->cap; i++)
		if (m->keys[i]) {
			size_t k = find(&g, m->keys[i]);
			g.keys[k] = m->keys[i];
			if (g.vals)
				g.vals[k] = m->vals[i];
		}
	free(m->keys);
	free(m->vals);
	*m = g;
	return 0;
}

int idmap_put(idmap *m, int64_t key, const void *val)
{
	if ((m->n + 1) * 2 > m->cap && grow(m) < 0)
		return -CAIRN_ENOMEM;
	if (val && !m->vals && !(m->vals = calloc(m->cap, sizeof *m->vals)))
		return -CAIRN_ENOMEM;
	size_t i = find(m, key);
	if (!m->keys[i]) {
		m->keys[i] = key;
		m->n++;
	}
	if (m->vals)
		m->vals[i] = val;
	return 0;
}

int idmap_get(const idmap *m, int64_t key, const void **val)
{
	if (!m->cap)
		return 0;
	size_t i = find(m, key);
	if (!m->keys[i])
		return 0;
	*val = m->vals ? m->vals[i] : NULL;
	return 1;
}

void idmap_free(idmap *m)
{
	free(m->keys);
	free(m->vals);
	*m = (idmap)IDMAP_INIT;
}
