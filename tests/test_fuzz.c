/*
 * test_fuzz.c - replays every input of tests/fuzz/seeds/NAME and
 * tests/fuzz/regress/NAME (crashes `make fuzz` found, kept as regression
 * inputs) through the fuzz target NAME, built here with the sanitizers of
 * the test build instead of libFuzzer: each must come back without a crash,
 * a sanitizer report or a failed check.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Each target defines LLVMFuzzerTestOneInput: give each its own name. */
#define LLVMFuzzerTestOneInput fuzz_parse_input
#include "fuzz/fuzz_parse.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_journal_input
#include "fuzz/fuzz_journal.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_config_input
#include "fuzz/fuzz_config.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_claim_input
#include "fuzz/fuzz_claim.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_http_input
#include "fuzz/fuzz_http.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_form_input
#include "fuzz/fuzz_form.c"
#undef LLVMFuzzerTestOneInput

/* Feeds every file of DIR/{seeds,regress}/name to fn; how many. */
static int replay(const char *name, int (*fn)(const uint8_t *, size_t))
{
	const char *top = getenv("CAIRN_FUZZ_DIR") ? getenv("CAIRN_FUZZ_DIR") : "tests/fuzz";
	static const char *const kinds[] = {"seeds", "regress"};
	int n = 0;
	for (int k = 0; k < 2; k++) {
		char dir[4096];
		snprintf(dir, sizeof dir, "%s/%s/%s", top, kinds[k], name);
		DIR *d = opendir(dir);
		cr_assert(d || k == 1, "no seeds in %s", dir);
		for (struct dirent *e; d && (e = readdir(d));) {
			if (e->d_name[0] == '.')
				continue;
			char path[8192];
			snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
			FILE *f = fopen(path, "rb");
			cr_assert(f, "cannot read %s", path);
			uint8_t data[65536];
			size_t len = fread(data, 1, sizeof data, f);
			fclose(f);
			cr_assert_eq(fn(data, len), 0, "%s", path);
			n++;
		}
		if (d)
			closedir(d);
	}
	return n;
}

Test(fuzz, parsers_take_every_seed_and_regression_input)
{
	cr_assert_gt(replay("parse", fuzz_parse_input), 0);
}

Test(fuzz, journal_decoding_takes_every_seed_and_regression_input)
{
	cr_assert_gt(replay("journal", fuzz_journal_input), 0);
}

Test(fuzz, config_loader_takes_every_seed_and_regression_input)
{
	cr_assert_gt(replay("config", fuzz_config_input), 0);
}

Test(fuzz, claimed_row_decoding_takes_every_seed_and_regression_input)
{
	cr_assert_gt(replay("claim", fuzz_claim_input), 0);
}

Test(fuzz, http_routing_takes_every_seed_and_regression_input)
{
	cr_assert_gt(replay("http", fuzz_http_input), 0);
}

Test(fuzz, console_form_and_cookie_decoding_takes_every_seed_and_regression_input)
{
	cr_assert_gt(replay("form", fuzz_form_input), 0);
}
