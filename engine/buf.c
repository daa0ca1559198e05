/*
 * buf.c - the one growable string buffer used for building text: SQL arrays,
 * log lines, HTTP bodies, error messages. Owns only its own memory. An
 * allocation failure is remembered in b->oom instead of being returned from
 * every append, so callers check once at the end.
 */
#include "buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"

int buf_reserve(buf *b, size_t extra)
{
	if (b->oom)
		return -CAIRN_ENOMEM;
	if (b->len + extra + 1 <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 64;
	while (cap < b->len + extra + 1)
		cap *= 2;
	char *p = realloc(b->data, cap);
	if (!p) {
		b->oom = 1;
		return -CAIRN_ENOMEM;
	}
	b->data = p;
	b->cap = cap;
	return 0;
}

void buf_append(buf *b, const char *s, size_t n)
{
	if (buf_reserve(b, n) < 0)
		return;
	memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = '\0';
}

void buf_puts(buf *b, const char *s)
{
	buf_append(b, s, strlen(s));
}

void buf_puts_replacing(buf *b, const char *s, const char *from, const char *to)
{
	size_t n = strlen(from);
	for (const char *hit; (hit = strstr(s, from)); s = hit + n) {
		buf_append(b, s, (size_t)(hit - s));
		buf_puts(b, to);
	}
	buf_puts(b, s);
}

void buf_vprintf(buf *b, const char *fmt, va_list ap)
{
	va_list cp;
	va_copy(cp, ap);
	int n = vsnprintf(NULL, 0, fmt, cp);
	va_end(cp);
	if (n < 0 || buf_reserve(b, (size_t)n) < 0)
		return;
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	b->len += (size_t)n;
}

void buf_printf(buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	buf_vprintf(b, fmt, ap);
	va_end(ap);
}

void buf_reset(buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

void buf_free(buf *b)
{
	free(b->data);
	*b = (buf)BUF_INIT;
}

char *buf_detach(buf *b)
{
	if (b->oom) {
		buf_free(b);
		return NULL;
	}
	char *s = b->data ? b->data : strdup("");
	*b = (buf)BUF_INIT;
	return s;
}

const char *buf_str(const buf *b)
{
	return b->data ? b->data : "";
}
