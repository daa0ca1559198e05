/*
 * form.c - a login form's field and a Cookie header's cookie, decoded
 * without trusting them (see form.h). Called by the console (cli/ui.c)
 * for requests that are not yet authenticated.
 *
 * Owns: nothing.
 */
#include "form.h"

#include <string.h>

static int hex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int form_value(const char *body, const char *name, char *out, size_t size)
{
	size_t nl = strlen(name);
	if (size == 0)
		return -2;
	for (const char *f = body; f && *f; f = strchr(f, '&'), f = f ? f + 1 : NULL) {
		if (strncmp(f, name, nl) != 0 || f[nl] != '=')
			continue;
		size_t n = 0;
		for (const char *v = f + nl + 1; *v && *v != '&'; v++) {
			int c = (unsigned char)*v;
			if (c == '%') {
				/* hex() of the NUL is -1: v[2] is read only when
				 * v[1] is a digit, so never past the end */
				int hi = hex(v[1]), lo = hi < 0 ? -1 : hex(v[2]);
				if (lo < 0)
					return -2;
				c = hi * 16 + lo;
				v += 2;
			} else if (c == '+') {
				c = ' ';
			}
			if (n + 1 >= size)
				return -2;
			out[n++] = (char)c;
		}
		out[n] = '\0';
		return (int)n;
	}
	return -1;
}

const char *form_cookie(const char *header, const char *name, size_t *len)
{
	size_t nl = strlen(name);
	for (const char *c = header; c && *c;) {
		c += strspn(c, " \t");
		size_t pair = strcspn(c, ";");
		if (pair > nl && strncmp(c, name, nl) == 0 && c[nl] == '=') {
			const char *v = c + nl + 1;
			*len = pair - nl - 1;
			while (*len && (v[*len - 1] == ' ' || v[*len - 1] == '\t'))
				(*len)--;
			return v;
		}
		c += pair;
		if (*c == ';')
			c++;
	}
	return NULL;
}
