/*
 * fuzz_journal.c - the decoding of a claimed run's journal and signals (the
 * JSON the claim returns, which anyone who can write to cairn.steps or
 * cairn.signals controls): any text is either a journal sorted by seq with
 * no seq twice, or an error with the journal left empty.
 */
#include <assert.h>

#include "fuzz.h"
#include "journal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_text(data, size);
	if (!s)
		return 0;
	buf err = BUF_INIT;
	journal j = {0};
	if (journal_parse(s, &j, &err) == 0) {
		for (int i = 0; i < j.n; i++) {
			assert(i == 0 || j.e[i - 1].seq < j.e[i].seq);
			assert(journal_at(&j, j.e[i].seq) == &j.e[i]);
		}
	} else {
		assert(j.n == 0 && buf_str(&err)[0]);
	}
	journal_free(&j);
	signal_box b = {0};
	if (signals_parse(s, &b, &err) == 0 && b.n > 0) {
		const char *name = b.e[0].name;
		assert(signals_take(&b, name));
	}
	signals_free(&b);
	buf_free(&err);
	free(s);
	return 0;
}
