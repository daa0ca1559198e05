/*
 * form.h - the values a browser sends the console (cli/ui.c): a field of an
 * application/x-www-form-urlencoded body (the login form) and a cookie of a
 * Cookie header. Bytes the console did not write, read before anyone is
 * authenticated: every escape is checked, nothing is read past the end of
 * the text, nothing is written past the buffer. Pure: no I/O, so any input
 * is fuzzed (tests/fuzz/fuzz_form.c).
 *
 * Owns: nothing; values are copied into the caller's buffer.
 */
#ifndef CAIRN_FORM_H
#define CAIRN_FORM_H
#include <stddef.h>

/* The value of field name in body (NAME=VALUE pairs split by '&'), decoded
 * ('+' is a space, %XX a byte of two hex digits) into out (size bytes, NUL
 * included): its length, or -1 when the field is absent, -2 when its
 * value has a '%' not followed by two hex digits or does not fit. The first
 * field of the name counts. */
int form_value(const char *body, const char *name, char *out, size_t size);

/* The value of cookie name in a Cookie header ("a=1; b=2"): a pointer into
 * header and its length in *len, or NULL when there is no such cookie. A
 * cookie counts only under its exact name. */
const char *form_cookie(const char *header, const char *name, size_t *len);

#endif
