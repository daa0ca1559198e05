/*
 * fuzz.h - what the libFuzzer targets share: the input as a NUL-terminated
 * string (the parsers take C strings from the environment, argv, HTTP paths
 * and the database, never raw bytes with NULs inside), and split into lines
 * for a target that takes several strings (settings, a row's columns, a
 * request's parts).
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

/* Splits s in place into at most max lines (the last keeps the rest, newlines
 * and all) into fields; how many (at least one). */
static inline int fuzz_lines(char *s, const char **fields, int max)
{
	int n = 0;
	for (char *line = s; line && n < max;) {
		char *nl = n + 1 < max ? strchr(line, '\n') : NULL;
		if (nl)
			*nl = '\0';
		fields[n++] = line;
		line = nl ? nl + 1 : NULL;
	}
	return n;
}
#endif
