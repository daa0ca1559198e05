/* pgarr.c - PostgreSQL array literal builder; see pgarr.h. */
#include "pgarr.h"

#include <inttypes.h>
#include <string.h>

static void sep(pgarr *a)
{
	buf_puts(&a->b, a->n++ ? "," : "{");
}

void pgarr_add(pgarr *a, const char *s)
{
	sep(a);
	if (!s) {
		buf_puts(&a->b, "NULL");
		return;
	}
	buf_puts(&a->b, "\"");
	for (const char *p = s; *p; p++) {
		const char *run = p;
		while (*p && *p != '"' && *p != '\\')
			p++;
		buf_append(&a->b, run, (size_t)(p - run));
		if (!*p)
			break;
		char esc[2] = {'\\', *p};
		buf_append(&a->b, esc, 2);
	}
	buf_puts(&a->b, "\"");
}

/* Digits by hand: a batch or a commit adds tens of thousands of numbers,
 * and printf's machinery was most of a 10,000-run batch's client time. */
void pgarr_add_i64(pgarr *a, int64_t v)
{
	char d[24], *p = d + sizeof d;
	uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
	do {
		*--p = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		*--p = '-';
	sep(a);
	buf_append(&a->b, p, (size_t)(d + sizeof d - p));
}

const char *pgarr_str(pgarr *a)
{
	if (a->n == 0)
		return "{}";
	if (!a->closed) {
		buf_puts(&a->b, "}");
		a->closed = 1;
	}
	return buf_str(&a->b);
}

void pgarr_free(pgarr *a)
{
	buf_free(&a->b);
	a->n = 0;
	a->closed = 0;
}
