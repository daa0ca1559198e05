/*
 * pgarr.h - builds PostgreSQL array literals ({"a","b",NULL}) for passing
 * many values as one text parameter (unnest($1::text[])). The one way cairn
 * sends lists to SQL.
 */
#ifndef CAIRN_PGARR_H
#define CAIRN_PGARR_H
#include <stdint.h>

#include "buf.h"

typedef struct pgarr {
	buf b;
	int n;
	int closed;
} pgarr;

#define PGARR_INIT                                                                                 \
	{                                                                                          \
		BUF_INIT, 0, 0                                                                     \
	}

/* Appends a quoted element; NULL appends SQL NULL. */
void pgarr_add(pgarr *a, const char *s);
void pgarr_add_i64(pgarr *a, int64_t v);
/* The literal ("{}" when empty); owned by a. Call after the last add. */
const char *pgarr_str(pgarr *a);
void pgarr_free(pgarr *a);
#endif
