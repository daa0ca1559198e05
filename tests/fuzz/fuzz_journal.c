/*
 * fuzz_journal.c - the decoding of a claimed run's journal and signals (the
 * JSON the claim returns, which anyone who can write to cairn.steps or
 * cairn.signals controls): any text is either a journal sorted by seq with
 * no seq twice, or an error with the journal left empty; and every value in
 * it, sealed (seal.h, under the key f1 below) or not, either opens or is
 * refused with a message.
 */
#include <assert.h>

#include "fuzz.h"
#include "journal.h"
#include "seal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_text(data, size);
	if (!s)
		return 0;
	static seal_keys *keys;
	char why[256], key[SEAL_ID_MAX + 1];
	if (!keys)
		seal_keys_parse("f1=q8RzO2m0mJbQm2Q0p7Z8pU4cK5tJz6k2lY0vX3wN1aE=", &keys, why,
		                sizeof why);
	buf err = BUF_INIT;
	journal j = {0};
	if (journal_parse(s, &j, &err) == 0) {
		for (int i = 0; i < j.n; i++) {
			assert(i == 0 || j.e[i - 1].seq < j.e[i].seq);
			assert(journal_at(&j, j.e[i].seq) == &j.e[i]);
		}
		buf_reset(&err);
		/* Opened values replace theirs in the tree: every pointer must
		 * still be readable (the sanitizers check). */
		if (journal_unseal(&j, keys, &err, key) == 0)
			for (int i = 0; i < j.n; i++)
				assert(strlen(j.e[i].output ? j.e[i].output : "") +
				           strlen(j.e[i].error ? j.e[i].error : "") <
				       size + 1);
		else
			assert(buf_str(&err)[0]);
	} else {
		assert(j.n == 0 && buf_str(&err)[0]);
	}
	journal_free(&j);
	signal_box b = {0};
	if (signals_parse(s, &b, &err) == 0 && b.n > 0) {
		const char *name = b.e[0].name;
		assert(signals_take(&b, name));
		buf_reset(&err);
		assert(signals_unseal(&b, keys, &err, key) == 0 || buf_str(&err)[0]);
	}
	signals_free(&b);
	buf_free(&err);
	free(s);
	return 0;
}
