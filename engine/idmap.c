/* idmap.c - run ids to pointers in a sorted array (see idmap.h). */
#include "idmap.h"

#include <stdlib.h>
#include <string.h>

#include "cairn.h"

/* The first place whose key is >= key (n: none). */
static size_t lower(const idmap *m, int64_t key)
{
	size_t lo = 0, hi = m->n;
	if (hi && m->keys[hi - 1] < key)
		return hi; /* the usual case: a child newer than all before */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (m->keys[mid] < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int idmap_index(const idmap *m, int64_t key, size_t *at)
{
	size_t i = lower(m, key);
	if (i == m->n || m->keys[i] != key)
		return 0;
	*at = i;
	return 1;
}

/* Room for one more key (doubling, 16 at least): 0 or -CAIRN_ENOMEM. The
 * values grow with the keys once there are any. */
static int grow(idmap *m)
{
	if (m->n < m->cap)
		return 0;
	size_t cap = m->cap ? m->cap * 2 : 16;
	int64_t *k = realloc(m->keys, cap * sizeof *k);
	if (!k)
		return -CAIRN_ENOMEM;
	m->keys = k;
	if (m->vals) {
		const void **v = realloc(m->vals, cap * sizeof *v);
		if (!v)
			return -CAIRN_ENOMEM; /* keys has room to spare; cap stays */
		m->vals = v;
	}
	m->cap = cap;
	return 0;
}

int idmap_put(idmap *m, int64_t key, const void *val)
{
	size_t i = lower(m, key);
	int found = i < m->n && m->keys[i] == key;
	if (!found && grow(m) < 0)
		return -CAIRN_ENOMEM;
	if (val && !m->vals && !(m->vals = calloc(m->cap ? m->cap : 1, sizeof *m->vals)))
		return -CAIRN_ENOMEM;
	if (!found) {
		memmove(m->keys + i + 1, m->keys + i, (m->n - i) * sizeof *m->keys);
		m->keys[i] = key;
		if (m->vals) {
			memmove(m->vals + i + 1, m->vals + i, (m->n - i) * sizeof *m->vals);
			m->vals[i] = NULL;
		}
		m->n++;
	}
	if (m->vals)
		m->vals[i] = val;
	return 0;
}

int idmap_get(const idmap *m, int64_t key, const void **val)
{
	size_t i;
	if (!idmap_index(m, key, &i))
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
