/*
 * fuzz_form.c - what the console reads before it knows who is asking
 * (form.h): the login form's token field, decoded into a small buffer, and
 * the console's cookie in a Cookie header. The input is the form's body on
 * its first line and the Cookie header on the rest. A value is either
 * refused or decoded within its buffer, NUL-terminated; a field is found
 * only under its own name; a cookie's value lies inside the header, right
 * after its name and '='.
 */
#include <assert.h>

#include "form.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_text(data, size);
	if (!s)
		return 0;
	const char *v[2] = {"", ""};
	fuzz_lines(s, v, 2);
	char out[16];
	int n = form_value(v[0], "token", out, sizeof out);
	assert(n >= -2 && n < (int)sizeof out);
	if (n >= 0)
		assert(out[n] == '\0');
	int named = strncmp(v[0], "token=", 6) == 0 || strstr(v[0], "&token=");
	assert((n == -1) == !named);
	size_t len = 0;
	const char *c = form_cookie(v[1], "cairn_ui", &len);
	if (c) {
		assert(c >= v[1] + 9 && c + len <= v[1] + strlen(v[1]));
		assert(c[-1] == '=' && strncmp(c - 9, "cairn_ui", 8) == 0);
		assert(!memchr(c, ';', len));
	}
	free(s);
	return 0;
}
