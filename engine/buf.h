/* buf.h - a growable byte buffer (after git's strbuf), always NUL-terminated. */
#ifndef CAIRN_BUF_H
#define CAIRN_BUF_H
#include <stdarg.h>
#include <stddef.h>

typedef struct buf {
	char *data; /* NUL-terminated; NULL until the first append */
	size_t len, cap;
	int oom; /* set once an allocation failed; later appends are no-ops */
} buf;

#define BUF_INIT                                                                                   \
	{                                                                                          \
		0                                                                                  \
	}

/* Makes room for extra more bytes (and the NUL): 0, or -CAIRN_ENOMEM with b->oom set. */
int buf_reserve(buf *b, size_t extra);
void buf_append(buf *b, const char *s, size_t n);
void buf_puts(buf *b, const char *s);
/* Appends s with every occurrence of from (not empty) replaced by to. */
void buf_puts_replacing(buf *b, const char *s, const char *from, const char *to);
void buf_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_vprintf(buf *b, const char *fmt, va_list ap);
void buf_reset(buf *b);
void buf_free(buf *b);
/* Returns the contents (never NULL unless oom) and leaves b empty; caller frees. */
char *buf_detach(buf *b);
/* Contents or "" (never NULL). */
const char *buf_str(const buf *b);

#endif
