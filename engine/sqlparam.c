/* sqlparam.c - rewrites :name placeholders into $n (see sqlparam.h). */
#include "sqlparam.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"

static int ident_char(char c, int first)
{
	return c == '_' || isalpha((unsigned char)c) || (!first && isdigit((unsigned char)c));
}

int sqlparam_bind(const char *sql, const char *const *names, int n, buf *out, buf *err)
{
	char *used = calloc((size_t)n + 1, 1);
	if (!used)
		return -CAIRN_ENOMEM;
	int rc = 0;
	for (const char *p = sql; *p && !rc;) {
		if (*p == '\'') { /* a literal, with '' as an escaped quote */
			const char *q = p + 1;
			while (*q && !(*q == '\'' && q[1] != '\''))
				q += *q == '\'' ? 2 : 1;
			size_t len = (size_t)(q - p) + (*q ? 1 : 0);
			buf_append(out, p, len);
			p += len;
			continue;
		}
		if (p[0] == ':' && p[1] == ':') {
			buf_append(out, p, 2);
			p += 2;
			continue;
		}
		if (p[0] != ':' || !ident_char(p[1], 1)) {
			buf_append(out, p, 1);
			p++;
			continue;
		}
		const char *s = ++p;
		while (ident_char(*p, 0))
			p++;
		size_t len = (size_t)(p - s);
		int k = -1;
		for (int i = 0; i < n && k < 0; i++)
			if (strlen(names[i]) == len && strncmp(names[i], s, len) == 0)
				k = i;
		if (k < 0) {
			buf_printf(err, "statement uses :%.*s, which is not a parameter", (int)len,
			           s);
			rc = -CAIRN_EINVAL;
			break;
		}
		used[k] = 1;
		buf_printf(out, "$%d", k + 1);
	}
	for (int i = 0; i < n && !rc; i++)
		if (!used[i]) {
			buf_printf(err, "parameter :%s is not used by the statement", names[i]);
			rc = -CAIRN_EINVAL;
		}
	free(used);
	if (!rc && out->oom)
		rc = -CAIRN_ENOMEM;
	return rc;
}

void sqlparam_in_part(const char *sql, const char *part, buf *out)
{
	static const char token[] = "@in_part.";
	for (const char *p = sql, *at; *p; p = at) {
		const char *alias = NULL, *end = NULL;
		if ((at = strstr(p, token)) != NULL) {
			alias = at + strlen(token);
			end = strchr(alias, '@');
		}
		if (!end) {
			buf_puts(out, p);
			return;
		}
		buf_append(out, p, (size_t)(at - p));
		if (part)
			buf_printf(out, "%.*s.part = %s AND ", (int)(end - alias), alias, part);
		at = end + 1;
	}
}
