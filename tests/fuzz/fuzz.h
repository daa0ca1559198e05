/*
 * fuzz.h - what the libFuzzer targets share: the input as a NUL-terminated
 * string (the parsers take C strings from the environment, argv, HTTP paths
 * and the database, never raw bytes with NULs inside).
 */
#ifndef CAIRN_FUZZ_H
#define CAIRN_FUZZ_H
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The input up to its first NUL, as a malloc'd string; NULL if out of memory. */
static inline char *fuzz_text(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	if (s) {
		memcpy(s, data, size);
		s[size] = '\0';
	}
	return s;
}
#endif
