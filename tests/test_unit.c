/* test_unit.c - pure modules, no database: hashing, parsing, array literals, backoff,
 * the http built-in's address policy, claimed rows, the worker endpoint's routes. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backoff.h"
#include "buf.h"
#include "cairn.h"
#include "claimrow.h"
#include "cron.h"
#include "db.h"
#include "form.h"
#include "hash.h"
#include "idmap.h"
#include "link.h"
#include "netpolicy.h"
#include "parse.h"
#include "pgarr.h"
#include "route.h"
#include "seal.h"

Test(hash, fnv1a64_matches_published_golden_values)
{
	/* Reference values of FNV-1a 64 (Fowler/Noll/Vo test vectors). */
	cr_assert_eq(hash_fnv1a64("", 0), 0xcbf29ce484222325ULL);
	cr_assert_eq(hash_fnv1a64("a", 1), 0xaf63dc4c8601ec8cULL);
	cr_assert_eq(hash_fnv1a64("foobar", 6), 0x85944171f73967e8ULL);
}

Test(hash, shard_is_fnv1a64_mod_shards_and_stable)
{
	cr_assert_eq(hash_shard("foobar", 4096), (int)(0x85944171f73967e8ULL % 4096));
	cr_assert_eq(hash_shard("a", 16), (int)(0xaf63dc4c8601ec8cULL % 16));
	for (int n = 1; n < 100; n++) {
		int s = hash_shard("order-42", n);
		cr_assert(s >= 0 && s < n);
	}
}

Test(hash, group_lock_keys_differ_per_group)
{
	cr_assert_neq(hash_group_lock_key("default"), hash_group_lock_key("billing"));
	cr_assert_eq(hash_group_lock_key("default"), hash_group_lock_key("default"));
}

Test(hash, singleton_lock_keys_differ_per_group_and_name)
{
	int64_t k = hash_singleton_lock_key("default", "cairn.health");
	cr_assert_eq(k, hash_singleton_lock_key("default", "cairn.health"));
	cr_assert_neq(k, hash_singleton_lock_key("billing", "cairn.health"));
	cr_assert_neq(k, hash_singleton_lock_key("default", "cairn.janitor"));
	/* The separator keeps ("ab", "c") and ("a", "bc") apart. */
	cr_assert_neq(hash_singleton_lock_key("ab", "c"), hash_singleton_lock_key("a", "bc"));
}

Test(parse, duration_accepts_documented_forms)
{
	char err[PARSE_ERR_MAX];
	int64_t v;
	cr_assert_eq(parse_duration_ms("500ms", &v, err), 0);
	cr_assert_eq(v, 500);
	cr_assert_eq(parse_duration_ms("2s", &v, err), 0);
	cr_assert_eq(v, 2000);
	cr_assert_eq(parse_duration_ms("1m", &v, err), 0);
	cr_assert_eq(v, 60000);
	cr_assert_eq(parse_duration_ms("1m30s", &v, err), 0);
	cr_assert_eq(v, 90000);
	cr_assert_eq(parse_duration_ms("7d", &v, err), 0);
	cr_assert_eq(v, 7 * 86400000LL);
	cr_assert_eq(parse_duration_ms("0", &v, err), 0);
	cr_assert_eq(v, 0);
	/* Decimals, when they make whole milliseconds. */
	cr_assert_eq(parse_duration_ms("1.5h", &v, err), 0, "%s", err);
	cr_assert_eq(v, 5400000);
	cr_assert_eq(parse_duration_ms("0.25s", &v, err), 0, "%s", err);
	cr_assert_eq(v, 250);
	cr_assert_eq(parse_duration_ms("1.5m30s", &v, err), 0, "%s", err);
	cr_assert_eq(v, 120000);
}

Test(parse, duration_rejects_bad_values_naming_them)
{
	char err[PARSE_ERR_MAX];
	int64_t v;
	const char *bad[] = {"",
	                     "abc",
	                     "10",
	                     "5x",
	                     "-1s",
	                     "1.s",
	                     "1.5",
	                     "0.5ms",
	                     "0.0001s",
	                     "1.1234567h",
	                     "s",
	                     ".5s",
	                     "99999999999999999999d"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		cr_assert_eq(parse_duration_ms(bad[i], &v, err), -1, "accepted \"%s\"", bad[i]);
		if (*bad[i] && strlen(bad[i]) < 10)
			cr_assert(strstr(err, bad[i]), "error does not name \"%s\": %s", bad[i],
			          err);
	}
	parse_duration_ms("abc", &v, err);
	cr_assert(strstr(err, "500ms"), "error does not say what is accepted: %s", err);
	parse_duration_ms("0.5ms", &v, err);
	cr_assert(strstr(err, "not a whole number of milliseconds"), "%s", err);
}

Test(parse, size_accepts_units_and_rejects_garbage)
{
	char err[PARSE_ERR_MAX];
	size_t v;
	cr_assert_eq(parse_size_bytes("1MiB", &v, err), 0);
	cr_assert_eq(v, 1048576);
	cr_assert_eq(parse_size_bytes("512KiB", &v, err), 0);
	cr_assert_eq(v, 524288);
	cr_assert_eq(parse_size_bytes("100", &v, err), 0);
	cr_assert_eq(v, 100);
	cr_assert_eq(parse_size_bytes("1XB", &v, err), -CAIRN_EINVAL);
	cr_assert(strstr(err, "1XB"));
	cr_assert_eq(parse_size_bytes("MiB", &v, err), -CAIRN_EINVAL);
}

Test(parse, timestamp_parses_rfc3339)
{
	char err[PARSE_ERR_MAX];
	int64_t v;
	cr_assert_eq(parse_timestamp_ms("1970-01-01T00:00:00Z", &v, err), 0);
	cr_assert_eq(v, 0);
	cr_assert_eq(parse_timestamp_ms("2026-12-24T10:00:00Z", &v, err), 0);
	cr_assert_eq(v, 1798106400000LL);
	cr_assert_eq(parse_timestamp_ms("2026-12-24T12:00:00.250+02:00", &v, err), 0);
	cr_assert_eq(v, 1798106400250LL);
	const char *bad[] = {
	    "2026-12-24", "2026-13-01T00:00:00Z",    "2026-02-30T00:00:00Z", "2026-12-24T10:00:00",
	    "tomorrow",   "2026-12-24T10:00:00Zjunk"};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		cr_assert_eq(parse_timestamp_ms(bad[i], &v, err), -1, "accepted %s", bad[i]);
		cr_assert(strstr(err, bad[i]), "error does not name the value: %s", err);
	}
}

Test(parse, int_checks_range)
{
	char err[PARSE_ERR_MAX];
	int64_t v;
	cr_assert_eq(parse_int("42", 1, 100, &v, err), 0);
	cr_assert_eq(v, 42);
	cr_assert_eq(parse_int("0", 1, 100, &v, err), -CAIRN_EINVAL);
	cr_assert(strstr(err, "1 to 100"));
	cr_assert_eq(parse_int("4x", 1, 100, &v, err), -CAIRN_EINVAL);
	cr_assert_eq(parse_int("", 1, 100, &v, err), -CAIRN_EINVAL);
}

Test(parse, names_reject_empty_control_and_odd_characters)
{
	char err[PARSE_ERR_MAX];
	cr_assert_eq(parse_check_name("workflow", "order.v2", err), 0);
	cr_assert_eq(parse_check_name("workflow", "", err), -CAIRN_EINVAL);
	cr_assert(strstr(err, "workflow must not be empty"));
	cr_assert_eq(parse_check_name("workflow", "a\tb", err), -CAIRN_EINVAL);
	cr_assert(strstr(err, "0x09"));
	cr_assert_eq(parse_check_name("workflow", "a/b", err), -CAIRN_EINVAL);
	char longname[200];
	memset(longname, 'x', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	cr_assert_eq(parse_check_name("workflow", longname, err), -CAIRN_EINVAL);
	cr_assert(strstr(err, "at most 128"));
}

Test(parse, keys_accept_utf8_and_reject_control_characters)
{
	char err[PARSE_ERR_MAX];
	cr_assert_eq(parse_check_key("customer/42 \xc3\xa9t\xc3\xa9", err), 0);
	cr_assert_eq(parse_check_key("", err), -CAIRN_EINVAL);
	cr_assert_eq(parse_check_key("a\nb", err), -CAIRN_EINVAL);
	cr_assert(strstr(err, "byte 2"));
	cr_assert_eq(parse_check_key("bad\xff", err), -CAIRN_EINVAL);
	cr_assert(strstr(err, "UTF-8"));
}

Test(parse, key_and_name_errors_quote_the_value_with_control_bytes_escaped)
{
	char err[PARSE_ERR_MAX];
	cr_assert_eq(parse_check_key("a\nb", err), -CAIRN_EINVAL);
	cr_assert(strstr(err, "invalid key \"a\\x0ab\": byte 2"), "%s", err);
	cr_assert_eq(parse_check_key("caf\xc3\xa9\xff", err), -CAIRN_EINVAL);
	cr_assert(strstr(err, "\"caf\xc3\xa9\\xff\": byte 6 is not valid UTF-8"), "%s", err);
	char longkey[600];
	memset(longkey, 'k', sizeof longkey - 1);
	longkey[sizeof longkey - 1] = '\0';
	cr_assert_eq(parse_check_key(longkey, err), -CAIRN_EINVAL);
	cr_assert(strstr(err, "kkk...\": it is 599 bytes long; at most 512"), "%s", err);
	longkey[3] = '\x01';
	longkey[512] = '\0';
	cr_assert_eq(parse_check_key(longkey, err), -1, "a control byte in a 512-byte key");
	cr_assert(strstr(err, "byte 4 is a control character (0x01)"), "%s", err);
	cr_assert_eq(parse_check_name("workflow", "no\nop", err), -CAIRN_EINVAL);
	cr_assert(strstr(err, "invalid workflow \"no\\x0aop\": character 3 (0x0a)"), "%s", err);
}

Test(parse, json_validation_names_position_and_size)
{
	char err[PARSE_ERR_MAX];
	cr_assert_eq(parse_check_json("input", "{\"item\": \"book\", \"amount\": 12}", 1024, err),
	             0);
	cr_assert_eq(parse_check_json("input", "{\"item\": }", 1024, err), -CAIRN_EINVAL);
	cr_assert(strstr(err, "byte 10"), "%s", err);
	cr_assert_eq(parse_check_json("input", "[1,2] trailing", 1024, err), -CAIRN_EINVAL);
	cr_assert_eq(parse_check_json("input", "\"0123456789\"", 5, err), -CAIRN_EINVAL);
	cr_assert(strstr(err, "maximum of 5 bytes"), "%s", err);
}

/* parse_check_json's answer for text of n bytes (NUL bytes and all). */
static int json_n(const char *s, size_t n, char *err)
{
	return parse_check_json_n("input", s, n, 1 << 20, err);
}

Test(parse, json_with_nul_escape_is_refused_naming_where)
{
	char err[PARSE_ERR_MAX];
	cr_assert_eq(parse_check_json("input", "\"a\\u0000b\"", 1024, err), -CAIRN_EINVAL);
	cr_assert(strstr(err, "input holds \\u0000 (the NUL character) at byte 3: cairn accepts "
	                      "no NUL character"),
	          "%s", err);
	cr_assert_eq(
	    parse_check_json("input", "{\"items\": [1, {\"name\": \"x\\u0000\"}]}", 1024, err),
	    -CAIRN_EINVAL);
	cr_assert(strstr(err, "at byte 26, in $.items[1].name:"), "%s", err);
	cr_assert_eq(parse_check_json("the body", "[{\"a\": 1}, {\"input\": {\"a b\\u0000\": 1}}]",
	                              1024, err),
	             -CAIRN_EINVAL);
	cr_assert(strstr(err, "the body holds \\u0000 (the NUL character) at byte 27, in a "
	                      "member name of $[1].input:"),
	          "%s", err);
	/* An escaped backslash before u0000 is text, not the escape. */
	cr_assert_eq(parse_check_json("input", "\"a\\\\u0000\"", 1024, err), 0, "%s", err);
	cr_assert_eq(parse_check_json("input", "\"\\u0001 \\u00e9\"", 1024, err), 0, "%s", err);
}

Test(parse, json_that_is_not_utf8_is_refused_naming_the_byte)
{
	char err[PARSE_ERR_MAX];
	cr_assert_eq(parse_check_json("input", "\"\xff\xfe\"", 1024, err), -CAIRN_EINVAL);
	cr_assert(strstr(err, "input is not valid UTF-8 (0xff) at byte 2: JSON text must be UTF-8"),
	          "%s", err);
	cr_assert_eq(parse_check_json("signal payload", "{\"by\": \"ann\xc3\"}", 1024, err),
	             -CAIRN_EINVAL);
	cr_assert(strstr(err, "signal payload is not valid UTF-8 (0xc3) at byte 12, in $.by"), "%s",
	          err);
	/* What PostgreSQL refuses too: overlong forms, surrogates, past U+10FFFF. */
	static const char *const bad[] = {"\"\xc0\xaf\"",
	                                  "\"\xe0\x80\xaf\"",
	                                  "\"\xed\xa0\x80\"",
	                                  "\"\xf0\x80\x80\xaf\"",
	                                  "\"\xf4\x90\x80\x80\"",
	                                  "\"\xf5\x80\x80\x80\"",
	                                  "\"\x80\"",
	                                  "\"\xe2\x82\""};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_assert_eq(parse_check_json("input", bad[i], 1024, err), -CAIRN_EINVAL,
		             "case %zu", i);
	static const char *const good[] = {"\"caf\xc3\xa9\"", "\"\xe2\x82\xac\"",
	                                   "\"\xed\x9f\xbf\"", "\"\xf0\x9f\x98\x80\"",
	                                   "\"\xf4\x8f\xbf\xbf\""};
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
		cr_assert_eq(parse_check_json("input", good[i], 1024, err), 0, "case %zu: %s", i,
		             err);
	cr_assert_not(utf8_valid("\xed\xa0\x80"), "a surrogate is not UTF-8");
	cr_assert_eq(parse_check_key("k\xe0\x80\xaf", err), -CAIRN_EINVAL, "an overlong key");
}

Test(parse, json_with_a_nul_byte_or_raw_control_character_is_refused)
{
	char err[PARSE_ERR_MAX];
	/* The value before the NUL byte is valid JSON: nothing may cut it there. */
	cr_assert_eq(json_n("\"ok\"\0 junk", 10, err), -CAIRN_EINVAL);
	cr_assert(strstr(err, "input holds a NUL byte at byte 5"), "%s", err);
	cr_assert_eq(json_n("{\"a\": \"x\0y\"}", 12, err), -CAIRN_EINVAL);
	cr_assert(strstr(err, "at byte 9, in $.a"), "%s", err);
	cr_assert_eq(json_n("\"ok\"", 4, err), 0, "%s", err);
	cr_assert_eq(parse_check_json("input", "[\"a\nb\"]", 1024, err), -CAIRN_EINVAL);
	cr_assert(strstr(err, "holds a control character (0x0a) at byte 4, in $[0]"), "%s", err);
	/* Whitespace between values is no string's. */
	cr_assert_eq(parse_check_json("input", "{\n\t\"a\": [1,\r\n 2]}", 1024, err), 0, "%s", err);
}

Test(parse, json_check_text_paths_are_bounded_and_follow_the_structure)
{
	char err[PARSE_ERR_MAX], text[2048];
	/* After a nested value closes, the path is its container's again. */
	cr_assert_eq(
	    json_check_text("v", "{\"a\": {\"b\": [1, 2]}, \"c\": [\"\\u0000\"]}", 34, err),
	    -CAIRN_EINVAL);
	cr_assert(strstr(err, "in $.c[0]:"), "%s", err);
	/* A long path is cut, with what is cut shown as ... */
	int n = snprintf(text, sizeof text, "{\"%0100d\": {\"b\": \"\\u0000\"}}", 0);
	cr_assert_eq(json_check_text("v", text, (size_t)n, err), -CAIRN_EINVAL);
	cr_assert(strstr(err, "..."), "%s", err);
	cr_assert(strlen(err) < PARSE_ERR_MAX - 1, "%s", err);
	/* Deeper than the limit: still scanned, the path stops at the limit. */
	size_t k = 0;
	for (int i = 0; i < JSON_MAX_DEPTH + 10; i++)
		text[k++] = '[';
	memcpy(text + k, "\"\xff\"", 3);
	k += 3;
	cr_assert_eq(json_check_text("v", text, k, err), -CAIRN_EINVAL);
	cr_assert(strstr(err, "not valid UTF-8"), "%s", err);
}

/* The DNS rebinding policy of the HTTP servers: IP literals and localhost
 * always, listed names, each with or without a port; any other name, and
 * anything malformed, never. */
Test(parse, host_allowed_takes_ip_literals_localhost_and_listed_names_only)
{
	static const char *const yes[] = {"127.0.0.1",       "127.0.0.1:8090",    "10.1.2.3:8080",
	                                  "[::1]",           "[::1]:8090",        "[fd00::7]:80",
	                                  "localhost",       "LocalHost:8090",    "worker-1:8080",
	                                  "Console.Example", "console.example:1", "203.0.113.9"};
	static const char *const no[] = {"rebind.attacker.example",
	                                 "rebind.attacker.example:8090",
	                                 "localhost.attacker.example",
	                                 "127.0.0.1.attacker.example",
	                                 "worker-1.attacker.example",
	                                 "console.example.",
	                                 "localhost.",
	                                 "",
	                                 ":8090",
	                                 "localhost:",
	                                 "localhost:80:80",
	                                 "localhost:123456",
	                                 "::1",
	                                 "[::1",
	                                 "[::1]x",
	                                 "[example]:80",
	                                 "[]:80",
	                                 "local host",
	                                 "worker-1/x",
	                                 "2130706433x"};
	const char *names = "worker-1,console.example";
	for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
		cr_assert(parse_host_allowed(yes[i], names), "%s refused", yes[i]);
	for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
		cr_assert(!parse_host_allowed(no[i], names), "%s allowed", no[i]);
	cr_assert(!parse_host_allowed("worker-1", ""));
	cr_assert(!parse_host_allowed("worker-1", NULL));
	char err[PARSE_ERR_MAX];
	cr_assert_eq(parse_check_hosts("CAIRN_HTTP_HOSTS", "", err), 0);
	cr_assert_eq(parse_check_hosts("CAIRN_HTTP_HOSTS", "a.example,b-2_x", err), 0);
	static const char *const bad[] = {"a.example:80", "a,,b", ",a", "a b", "[::1]"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cr_assert_eq(parse_check_hosts("CAIRN_HTTP_HOSTS", bad[i], err), -1, "%s", bad[i]);
		cr_assert(strstr(err, "CAIRN_HTTP_HOSTS"), "%s", err);
	}
}

Test(pgarr, quotes_and_escapes_elements)
{
	pgarr a = PGARR_INIT;
	pgarr_add(&a, "plain");
	pgarr_add(&a, "{\"k\": \"v\\n\"}");
	pgarr_add(&a, NULL);
	pgarr_add_i64(&a, -7);
	cr_assert_str_eq(pgarr_str(&a), "{\"plain\",\"{\\\"k\\\": \\\"v\\\\n\\\"}\",NULL,-7}");
	pgarr_free(&a);
	pgarr b = PGARR_INIT;
	cr_assert_str_eq(pgarr_str(&b), "{}");
}

Test(buf, grows_and_detaches)
{
	buf b = BUF_INIT;
	for (int i = 0; i < 1000; i++)
		buf_printf(&b, "%d,", i);
	cr_assert(strncmp(buf_str(&b), "0,1,2,", 6) == 0);
	char *s = buf_detach(&b);
	cr_assert(strlen(s) > 3000);
	cr_assert_str_eq(buf_str(&b), "");
	free(s);
}

Test(buf, puts_replacing_replaces_every_occurrence_and_keeps_the_rest)
{
	buf b = BUF_INIT;
	buf_puts(&b, ">");
	buf_puts_replacing(&b, "LIMIT @N@) x LIMIT @N@;", "@N@", "256");
	buf_puts_replacing(&b, "none here", "@N@", "256");
	buf_puts_replacing(&b, "@N@@N@", "@N@", "");
	cr_assert_str_eq(buf_str(&b), ">LIMIT 256) x LIMIT 256;none here");
	buf_free(&b);
}

Test(backoff, zero_policy_takes_the_documented_defaults)
{
	cairn_retry_policy p = backoff_policy(NULL);
	cr_assert_eq(p.max_attempts, 3);
	cr_assert_eq(p.initial_ms, 1000);
	cr_assert_float_eq(p.multiplier, 2.0, 1e-9);
	cr_assert_eq(p.max_ms, 60000);
	cr_assert_float_eq(p.jitter, 0.2, 1e-9);
	cairn_retry_policy none = backoff_policy(&(cairn_retry_policy){.jitter = -1});
	cr_assert_lt(none.jitter, 0.0);
}

Test(backoff, a_policy_without_jitter_keeps_none_when_normalised_again)
{
	cairn_retry_policy p =
	    backoff_policy(&(cairn_retry_policy){.initial_ms = 100, .multiplier = 2, .jitter = -1});
	cairn_retry_policy again = backoff_policy(&p);
	cr_assert_float_eq(again.jitter, p.jitter, 1e-9);
	cr_assert_eq(backoff_ms(&p, 1, 0.0), 100, "no jitter: the nominal wait whatever u");
	cr_assert_eq(backoff_ms(&p, 2, 0.999), 200);
	cairn_retry_policy dflt = backoff_policy(NULL);
	cr_assert_float_eq(backoff_policy(&dflt).jitter, 0.2, 1e-9);
}

Test(backoff, grows_exponentially_and_stops_at_the_cap)
{
	cairn_retry_policy p = {.initial_ms = 100, .multiplier = 2, .max_ms = 1000, .jitter = -1};
	int64_t want[] = {100, 200, 400, 800, 1000, 1000};
	for (int a = 1; a <= 6; a++)
		cr_assert_eq(backoff_ms(&p, a, 0.5), want[a - 1], "attempt %d", a);
	cr_assert_eq(backoff_ms(&p, 1000000, 0.5), 1000, "a huge attempt number stays at the cap");
}

Test(backoff, jitter_spreads_within_the_fraction_around_the_nominal)
{
	cairn_retry_policy p = {
	    .initial_ms = 1000, .multiplier = 2, .max_ms = 60000, .jitter = 0.2};
	cr_assert_eq(backoff_ms(&p, 1, 0.5), 1000);
	cr_assert_eq(backoff_ms(&p, 1, 0.0), 800);
	cr_assert(backoff_ms(&p, 1, 0.999999) <= 1200 && backoff_ms(&p, 1, 0.999999) >= 1199);
	cr_assert_eq(backoff_ms(&p, 3, 0.0), 3200);
}

Test(backoff, reconnect_doubles_from_100ms_with_full_jitter_up_to_the_cap)
{
	cr_assert_eq(backoff_reconnect_ms(0, 15000, 0.0), 50);
	cr_assert_eq(backoff_reconnect_ms(0, 15000, 0.999), 99);
	cr_assert_eq(backoff_reconnect_ms(3, 15000, 0.0), 400);
	cr_assert_eq(backoff_reconnect_ms(20, 15000, 0.0), 7500, "capped");
	cr_assert_eq(backoff_reconnect_ms(20, 15000, 0.999), 14992);
}

Test(parse, json_nested_deeper_than_the_limit_is_refused_naming_the_depth)
{
	char err[PARSE_ERR_MAX], deep[2 * (JSON_MAX_DEPTH + 1) + 2];
	int n = JSON_MAX_DEPTH;
	memset(deep, '[', (size_t)n);
	memset(deep + n, ']', (size_t)n);
	deep[2 * n] = '\0';
	cr_assert_eq(parse_check_json("input", deep, 1 << 20, err), 0, "%s", err);
	n = JSON_MAX_DEPTH + 1;
	memset(deep, '[', (size_t)n);
	memset(deep + n, ']', (size_t)n);
	deep[2 * n] = '\0';
	cr_assert_eq(parse_check_json("input", deep, 1 << 20, err), -CAIRN_EINVAL);
	cr_assert(strstr(err, "input is nested 65 levels deep: at most 64 are accepted"), "%s",
	          err);
	/* Brackets inside strings are text, not nesting. */
	cr_assert_eq(json_depth("{\"a\": \"[[[[[[\", \"b\": [1, {\"c\": \"]\\\"[\"}]}"), 3);
}

Test(parse, text_cut_inside_a_character_becomes_valid_utf8)
{
	buf b = BUF_INIT;
	cr_assert(utf8_valid("caf\xc3\xa9"));
	cr_assert_not(utf8_valid("caf\xc3"));
	utf8_clean("caf\xc3", &b);
	cr_assert_str_eq(buf_str(&b), "caf\xef\xbf\xbd");
	buf_free(&b);
}

/* Why p refuses the address text (IPv4 or IPv6), or NULL; the reason stays
 * in why_text until the next call. */
static char why_text[NETPOLICY_WHY_MAX];
static const char *refuses(const netpolicy *p, const char *addr)
{
	struct sockaddr_storage ss = {0};
	struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
	if (inet_pton(AF_INET, addr, &v4->sin_addr) == 1)
		ss.ss_family = AF_INET;
	else if (inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1)
		ss.ss_family = AF_INET6;
	else
		cr_assert_fail("not an address: %s", addr);
	return netpolicy_refuses(p, (struct sockaddr *)&ss, why_text, sizeof why_text);
}

/* An allow list of one entry. */
static netpolicy *allowing(const char *list)
{
	netpolicy *p;
	char err[512];
	cr_assert_eq(netpolicy_parse(list, &p, err, sizeof err), 0, "%s: %s", list, err);
	return p;
}

Test(netpolicy, refuses_every_address_that_is_not_public_unicast_and_names_why)
{
	static const char *const cases[][2] = {
	    {"127.0.0.1", "loopback"},
	    {"127.255.0.9", "loopback"},
	    {"::1", "loopback"},
	    {"0.0.0.0", "unspecified"},
	    {"::", "unspecified"},
	    {"10.1.2.3", "private"},
	    {"172.16.0.1", "private"},
	    {"172.31.255.255", "private"},
	    {"192.168.1.1", "private"},
	    {"100.64.0.1", "shared"},
	    {"169.254.169.254", "link-local"},
	    {"fe80::1", "link-local"},
	    {"fc00::1", "unique-local"},
	    {"fd12:3456::1", "unique-local"},
	    {"fec0::1", "site-local"},
	    {"224.0.0.1", "multicast"},
	    {"ff02::1", "multicast"},
	    {"255.255.255.255", "broadcast"},
	    {"240.0.0.1", "reserved"},
	    {"::ffff:127.0.0.1", "loopback"},
	    {"::ffff:10.0.0.1", "private"},
	    {"64:ff9b::a9fe:a9fe", "link-local"},
	    {"2002:7f00:1::", "loopback"},
	    {"::127.0.0.1", "loopback"},
	    {"192.0.2.2", "documentation"},
	    {"2001:db8::1", "documentation"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const char *why = refuses(NULL, cases[i][0]);
		cr_assert(why && strstr(why, cases[i][1]), "%s: %s", cases[i][0],
		          why ? why : "allowed");
	}
	static const char *const public[] = {"93.184.215.14", "8.8.8.8",      "172.32.0.1",
	                                     "100.128.0.1",   "2606:4700::1", "::ffff:8.8.8.8",
	                                     "2002:808:808::"};
	for (size_t i = 0; i < sizeof public / sizeof public[0]; i++)
		cr_assert_null(refuses(NULL, public[i]), "%s was refused: %s", public[i], why_text);
}

/*
 * Every block the policy refuses, as the IANA IPv4 and IPv6 Special-Purpose
 * Address Registries write it (and multicast, reserved, site-local), with
 * the first and the last address its own row judges (where a more specific
 * row holds the block's edge, the nearest address it leaves) and its RFC.
 */
static const struct {
	const char *block, *first, *last, *rfc;
} REFUSED_BLOCKS[] = {
    {"0.0.0.0/8", "0.0.0.1", "0.255.255.255", "RFC 791"},
    {"0.0.0.0/32", "0.0.0.0", "0.0.0.0", "RFC 1122"},
    {"10.0.0.0/8", "10.0.0.0", "10.255.255.255", "RFC 1918"},
    {"100.64.0.0/10", "100.64.0.0", "100.127.255.255", "RFC 6598"},
    {"127.0.0.0/8", "127.0.0.0", "127.255.255.255", "RFC 1122"},
    {"169.254.0.0/16", "169.254.0.0", "169.254.255.255", "RFC 3927"},
    {"172.16.0.0/12", "172.16.0.0", "172.31.255.255", "RFC 1918"},
    {"192.0.0.0/24", "192.0.0.11", "192.0.0.255", "RFC 6890"},
    {"192.0.0.0/29", "192.0.0.0", "192.0.0.7", "RFC 7335"},
    {"192.0.0.8/32", "192.0.0.8", "192.0.0.8", "RFC 7600"},
    {"192.0.0.170/32", "192.0.0.170", "192.0.0.170", "RFC 8880"},
    {"192.0.0.171/32", "192.0.0.171", "192.0.0.171", "RFC 8880"},
    {"192.0.2.0/24", "192.0.2.0", "192.0.2.255", "RFC 5737"},
    {"192.88.99.0/24", "192.88.99.0", "192.88.99.255", "RFC 7526"},
    {"192.88.99.2/32", "192.88.99.2", "192.88.99.2", "RFC 6751"},
    {"192.168.0.0/16", "192.168.0.0", "192.168.255.255", "RFC 1918"},
    {"198.18.0.0/15", "198.18.0.0", "198.19.255.255", "RFC 2544"},
    {"198.51.100.0/24", "198.51.100.0", "198.51.100.255", "RFC 5737"},
    {"203.0.113.0/24", "203.0.113.0", "203.0.113.255", "RFC 5737"},
    {"224.0.0.0/4", "224.0.0.0", "239.255.255.255", "RFC 5771"},
    {"240.0.0.0/4", "240.0.0.0", "255.255.255.254", "RFC 1112"},
    {"255.255.255.255/32", "255.255.255.255", "255.255.255.255", "RFC 919"},
    {"::/128", "::", "::", "RFC 4291"},
    {"::1/128", "::1", "::1", "RFC 4291"},
    {"64:ff9b:1::/48", "64:ff9b:1::", "64:ff9b:1:ffff:ffff:ffff:ffff:ffff", "RFC 8215"},
    {"100::/64", "100::", "100::ffff:ffff:ffff:ffff", "RFC 6666"},
    {"100:0:0:1::/64", "100:0:0:1::", "100:0:0:1:ffff:ffff:ffff:ffff", "RFC 9780"},
    {"2001::/23", "2001:1::", "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", "RFC 2928"},
    {"2001::/32", "2001::", "2001:0:ffff:ffff:ffff:ffff:ffff:ffff", "RFC 4380"},
    {"2001:2::/48", "2001:2::", "2001:2:0:ffff:ffff:ffff:ffff:ffff", "RFC 5180"},
    {"2001:10::/28", "2001:10::", "2001:1f:ffff:ffff:ffff:ffff:ffff:ffff", "RFC 4843"},
    {"2001:db8::/32", "2001:db8::", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "RFC 3849"},
    {"3fff::/20", "3fff::", "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", "RFC 9637"},
    {"5f00::/16", "5f00::", "5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "RFC 9602"},
    {"fc00::/7", "fc00::", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "RFC 4193"},
    {"fe80::/10", "fe80::", "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "RFC 4291"},
    {"fec0::/10", "fec0::", "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "RFC 3879"},
    {"ff00::/8", "ff00::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "RFC 4291"},
};

Test(netpolicy, refuses_every_block_of_the_special_purpose_registries_not_globally_reachable)
{
	for (size_t i = 0; i < sizeof REFUSED_BLOCKS / sizeof REFUSED_BLOCKS[0]; i++) {
		const char *ends[] = {REFUSED_BLOCKS[i].first, REFUSED_BLOCKS[i].last};
		for (int e = 0; e < 2; e++) {
			const char *why = refuses(NULL, ends[e]);
			cr_expect(why && strstr(why, REFUSED_BLOCKS[i].block) &&
			              strstr(why, REFUSED_BLOCKS[i].rfc),
			          "%s (%s, %s): %s", ends[e], REFUSED_BLOCKS[i].block,
			          REFUSED_BLOCKS[i].rfc, why ? why : "allowed");
		}
	}
}

Test(netpolicy, an_allow_list_naming_a_refused_block_lets_its_addresses_through)
{
	for (size_t i = 0; i < sizeof REFUSED_BLOCKS / sizeof REFUSED_BLOCKS[0]; i++) {
		netpolicy *p = allowing(REFUSED_BLOCKS[i].block);
		cr_expect_null(refuses(p, REFUSED_BLOCKS[i].first), "%s allowed, %s: %s",
		               REFUSED_BLOCKS[i].block, REFUSED_BLOCKS[i].first, why_text);
		cr_expect_null(refuses(p, REFUSED_BLOCKS[i].last), "%s allowed, %s: %s",
		               REFUSED_BLOCKS[i].block, REFUSED_BLOCKS[i].last, why_text);
		netpolicy_free(p);
	}
}

Test(netpolicy, keeps_the_registries_global_exceptions_and_public_addresses_beside_refused_blocks)
{
	static const char *const public[] = {
	    /* globally reachable inside refused blocks: first and last */
	    "192.0.0.9", "192.0.0.10", "2001:1::1", "2001:1::2", "2001:1::3",
	    "2001:3::", "2001:3:ffff:ffff:ffff:ffff:ffff:ffff",
	    "2001:4:112::", "2001:4:112:ffff:ffff:ffff:ffff:ffff",
	    "2001:20::", "2001:2f:ffff:ffff:ffff:ffff:ffff:ffff",
	    "2001:30::", "2001:3f:ffff:ffff:ffff:ffff:ffff:ffff",
	    /* the registries' other globally reachable blocks */
	    "192.31.196.1", "192.52.193.1", "192.175.48.1", "2620:4f:8000::1",
	    /* public addresses just outside refused blocks */
	    "1.0.0.0", "9.255.255.255", "11.0.0.0", "100.63.255.255", "100.128.0.0",
	    "126.255.255.255", "128.0.0.0", "169.253.255.255", "169.255.0.0", "172.15.255.255",
	    "172.32.0.0", "191.255.255.255", "192.0.1.0", "192.0.1.255", "192.0.3.0",
	    "192.88.98.255", "192.88.100.0", "192.167.255.255", "192.169.0.0", "198.17.255.255",
	    "198.20.0.0", "198.51.99.255", "198.51.101.0", "203.0.112.255", "203.0.114.0",
	    "223.255.255.255", "2001:200::", "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff",
	    "2001:db9::", "2003::", "3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
	    "3fff:1000::", "2606:4700::1", "2a00:1450:4001::1"};
	for (size_t i = 0; i < sizeof public / sizeof public[0]; i++)
		cr_expect_null(refuses(NULL, public[i]), "%s was refused: %s", public[i], why_text);
}

Test(netpolicy, judges_mapped_compatible_nat64_and_6to4_addresses_by_the_ipv4_they_carry)
{
	/* The address, the block that carries an IPv4 address ("" when the
	 * address is written IPv4-mapped: it is that IPv4 address), the IPv4
	 * address and the rule that refuses it. */
	static const char *const carried[][4] = {
	    {"::ffff:127.0.0.1", "", "127.0.0.1", "127.0.0.0/8"},
	    {"::ffff:192.0.2.1", "", "192.0.2.1", "192.0.2.0/24"},
	    {"::127.0.0.1", "::/96", "127.0.0.1", "127.0.0.0/8"},
	    {"::2", "::/96", "0.0.0.2", "0.0.0.0/8"},
	    {"64:ff9b::127.0.0.1", "64:ff9b::/96", "127.0.0.1", "127.0.0.0/8"},
	    {"64:ff9b::a9fe:a9fe", "64:ff9b::/96", "169.254.169.254", "169.254.0.0/16"},
	    {"64:ff9b::198.51.100.7", "64:ff9b::/96", "198.51.100.7", "198.51.100.0/24"},
	    {"2002:7f00:1::", "2002::/16", "127.0.0.1", "127.0.0.0/8"},
	    {"2002:7f00:1:ffff:ffff:ffff:ffff:ffff", "2002::/16", "127.0.0.1", "127.0.0.0/8"},
	    {"2002:a00:1::", "2002::/16", "10.0.0.1", "10.0.0.0/8"},
	    {"2002:c000:201::1", "2002::/16", "192.0.2.1", "192.0.2.0/24"},
	};
	for (size_t i = 0; i < sizeof carried / sizeof carried[0]; i++) {
		const char *why = refuses(NULL, carried[i][0]);
		cr_expect(why && strstr(why, carried[i][1]) && strstr(why, carried[i][3]) &&
		              (!carried[i][1][0] || strstr(why, carried[i][2])),
		          "%s carries %s (%s): %s", carried[i][0], carried[i][2], carried[i][3],
		          why ? why : "allowed");
	}
	/* Carrying a public IPv4 address, or one of the registry's global
	 * exceptions, they are public. */
	static const char *const public[] = {
	    "::ffff:8.8.8.8",  "::8.8.8.8",      "64:ff9b::8.8.8.8",
	    "64:ff9b::c000:9", "2002:808:808::", "2002:808:808:ffff:ffff:ffff:ffff:ffff",
	    "2002:c000:a::1",
	};
	for (size_t i = 0; i < sizeof public / sizeof public[0]; i++)
		cr_expect_null(refuses(NULL, public[i]), "%s was refused: %s", public[i], why_text);
}

Test(netpolicy, refuses_teredo_whatever_it_carries_unless_the_allow_list_names_it)
{
	/* RFC 4380's example (server 65.54.227.120, client 192.0.2.45), and
	 * one whose server and client are both public (8.8.8.8, 1.1.1.1). */
	static const char *const teredo[] = {"2001:0:4136:e378:8000:63bf:3fff:fdd2",
	                                     "2001:0:808:808:0:0:fefe:fefe"};
	netpolicy *p = allowing("2001::/32");
	for (size_t i = 0; i < sizeof teredo / sizeof teredo[0]; i++) {
		const char *why = refuses(NULL, teredo[i]);
		cr_expect(why && strstr(why, "Teredo") && strstr(why, "2001::/32"), "%s: %s",
		          teredo[i], why ? why : "allowed");
		cr_expect_null(refuses(p, teredo[i]), "%s: %s", teredo[i], why_text);
	}
	netpolicy_free(p);
}

Test(netpolicy, an_ipv4_entry_opens_its_mapped_form_but_not_the_forms_that_tunnel_it)
{
	netpolicy *p = allowing("127.0.0.1");
	cr_assert_null(refuses(p, "127.0.0.1"));
	cr_assert_null(refuses(p, "::ffff:127.0.0.1"), "the mapped form is the same address");
	cr_assert_not_null(refuses(p, "2002:7f00:1::"), "6to4 must be named itself");
	cr_assert_not_null(refuses(p, "64:ff9b::7f00:1"), "NAT64 must be named itself");
	cr_assert_not_null(refuses(p, "::127.0.0.1"), "IPv4-compatible must be named itself");
	netpolicy_free(p);
	p = allowing("2002:7f00:1::/48, 64:ff9b::7f00:1");
	cr_assert_null(refuses(p, "2002:7f00:1::5"));
	cr_assert_null(refuses(p, "64:ff9b::7f00:1"));
	netpolicy_free(p);
}

Test(netpolicy, an_allow_list_opens_addresses_cidrs_and_host_names)
{
	netpolicy *p;
	char err[512];
	cr_assert_eq(netpolicy_parse(" 10.0.0.0/8, 127.0.0.1 ,fd00::/16,api.Internal,.corp, "
	                             "*.svc.local",
	                             &p, err, sizeof err),
	             0, "%s", err);
	cr_assert_null(refuses(p, "10.200.3.4"));
	cr_assert_null(refuses(p, "::ffff:10.0.0.1"), "an IPv4 CIDR covers the mapped address");
	cr_assert_null(refuses(p, "127.0.0.1"));
	cr_assert_not_null(refuses(p, "127.0.0.2"), "a bare address is a /32");
	cr_assert_null(refuses(p, "fd00:1::5"));
	cr_assert_not_null(refuses(p, "fd01::5"));
	cr_assert_not_null(refuses(p, "192.168.0.1"));
	cr_assert(netpolicy_allows_host(p, "API.internal"));
	cr_assert(!netpolicy_allows_host(p, "x.api.internal"), "a name is exact");
	cr_assert(netpolicy_allows_host(p, "db.corp"));
	cr_assert(!netpolicy_allows_host(p, "corp"), ".corp is every name under corp");
	cr_assert(!netpolicy_allows_host(p, "evilcorp"));
	cr_assert(netpolicy_allows_host(p, "a.b.svc.local"));
	netpolicy_free(p);
	cr_assert_eq(netpolicy_parse("", &p, err, sizeof err), 0);
	cr_assert_not_null(refuses(p, "127.0.0.1"));
	cr_assert(!netpolicy_allows_host(p, "localhost"));
	netpolicy_free(p);
}

Test(netpolicy, a_bad_entry_is_refused_by_name)
{
	static const char *const bad[] = {
	    "10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/x", "1.2.3.4/-1",   "a..b",
	    ".",           "*.",     "host name", "a,,b",       "fe80::1%eth0", "a/b"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		netpolicy *p = NULL;
		char err[512] = "";
		cr_assert_eq(netpolicy_parse(bad[i], &p, err, sizeof err), -1, "%s was accepted",
		             bad[i]);
		cr_assert_null(p);
		cr_assert(strstr(err, "is not an address, a CIDR"), "%s: %s", bad[i], err);
	}
}

Test(link, a_token_opens_with_its_key_until_it_expires_and_not_once_altered)
{
	unsigned char key[LINK_KEY_BYTES], other[LINK_KEY_BYTES];
	char err[256];
	cr_assert_eq(
	    link_key_parse("q8RzO2m0mJbQm2Q0p7Z8pU4cK5tJz6k2lY0vX3wN1aE=", key, err, sizeof err), 0,
	    "%s", err);
	cr_assert_eq(
	    link_key_parse("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8", other, err, sizeof err),
	    0, "base64url without padding is accepted too: %s", err);
	cr_assert_eq(link_key_parse("c2hvcnQ=", other, err, sizeof err), -1);
	cr_assert(strstr(err, "32 random bytes") && !strstr(err, "c2hvcnQ"), "%s", err);
	link_claims c = {.run_id = 42, .signal = "approval", .expires_unix = 2000, .nonce = "new"};
	buf t = BUF_INIT;
	cr_assert_eq(link_make(key, &c, &t), 0);
	cr_assert_eq(strlen(c.nonce), 32, "a fresh nonce: %s", c.nonce);
	link_claims got;
	cr_assert_eq(link_open(key, buf_str(&t), 1999, &got, err, sizeof err), 0, "%s", err);
	cr_assert_eq(got.run_id, 42);
	cr_assert_str_eq(got.signal, "approval");
	cr_assert_eq(got.expires_unix, 2000);
	cr_assert_str_eq(got.nonce, c.nonce);
	cr_assert_eq(link_open(key, buf_str(&t), 2000, &got, err, sizeof err), -2);
	cr_assert(strstr(err, "expired"), "%s", err);
	cr_assert_eq(link_open(other, buf_str(&t), 1999, &got, err, sizeof err), -1);
	/* Every single character changed makes it fail. */
	char *s = strdup(buf_str(&t));
	for (size_t i = 0; s[i]; i++) {
		char was = s[i];
		s[i] = was == 'A' ? 'B' : 'A';
		cr_assert_lt(link_open(key, s, 1999, &got, err, sizeof err), 0, "changed at %zu",
		             i);
		s[i] = was;
	}
	free(s);
	buf_reset(&t);
	link_claims again = {.run_id = 7, .signal = "go", .expires_unix = 10};
	cr_assert_eq(link_make(key, &again, &t), 0);
	cr_assert_eq(link_open(key, buf_str(&t), 5, &got, err, sizeof err), 0, "%s", err);
	cr_assert_str_eq(got.nonce, "", "a link that may be used again has no nonce");
	static const char *const bad[] = {"", "v1", "v1.", "v1..", "v2.AAAA.AAAA", "v1.!!!.AAAA"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_assert_eq(link_open(key, bad[i], 5, &got, err, sizeof err), -1, "%s", bad[i]);
	buf_free(&t);
}

#define K1 "q8RzO2m0mJbQm2Q0p7Z8pU4cK5tJz6k2lY0vX3wN1aE="
#define K2 "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"

Test(seal, keys_parse_with_the_first_current_and_bad_entries_named_but_never_shown)
{
	seal_keys *k;
	char why[512];
	cr_assert_eq(
	    seal_keys_parse("# rotated 2026-12\nk2=" K2 "\n k1=" K1 ", ", &k, why, sizeof why), 0,
	    "%s", why);
	cr_assert_eq(seal_keys_count(k), 2);
	cr_assert_str_eq(seal_key_id(k, 0), "k2");
	cr_assert_str_eq(seal_key_id(k, 1), "k1");
	seal_keys_free(k);
	cr_assert_eq(seal_keys_parse(" \n# nothing\n", &k, why, sizeof why), 0);
	cr_assert_null(k, "no entry is no keys");
	static const struct {
		const char *spec, *says;
	} bad[] = {
	    {"k1=" K1 ",k1=" K2, "\"k1\" appears twice"},
	    {K1, "entry 1 (44 characters, not shown): expected ID=BASE64"},
	    {"k1=c2hvcnQ=", "key \"k1\" (entry 1) is not the base64 of 32 bytes"},
	    {"bad id=" K1, "entry 1"},
	    {"=" K1, "expected ID=BASE64"},
	    {"k/1=" K1, "of A-Z a-z 0-9 _ -"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cr_assert_eq(seal_keys_parse(bad[i].spec, &k, why, sizeof why), -CAIRN_EINVAL, "%s",
		             bad[i].spec);
		cr_assert_null(k);
		cr_assert(strstr(why, bad[i].says), "%s: %s", bad[i].spec, why);
		cr_assert(!strstr(why, "q8RzO2m0") && !strstr(why, "c2hvcnQ"), "%s", why);
	}
}

Test(seal, a_keys_file_is_read_and_both_settings_at_once_are_refused)
{
	char path[] = "/tmp/cairn-keys-XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	FILE *f = fdopen(fd, "w");
	fputs("# current first\nk2=" K2 "\nk1=" K1 "\n", f);
	fclose(f);
	seal_keys *k;
	buf err = BUF_INIT;
	cr_assert_eq(seal_keys_load(NULL, path, &k, &err), 0, "%s", buf_str(&err));
	cr_assert_str_eq(seal_key_id(k, 0), "k2");
	seal_keys_free(k);
	cr_assert_eq(seal_keys_load("k1=" K1, path, &k, &err), -CAIRN_EINVAL);
	cr_assert(strstr(buf_str(&err), "both set"), "%s", buf_str(&err));
	buf_reset(&err);
	unlink(path);
	cr_assert_eq(seal_keys_load("", path, &k, &err), -CAIRN_EINVAL);
	cr_assert(strstr(buf_str(&err), "CAIRN_ENCRYPTION_KEYS_FILE") &&
	              strstr(buf_str(&err), "cannot open it"),
	          "%s", buf_str(&err));
	buf_free(&err);
}

/* Opens stored with k as a field f: the rc, the plaintext in out. */
static int open_as(const seal_keys *k, seal_field f, const char *stored, buf *out, char *id)
{
	return seal_open(k, f, stored, out, id);
}

Test(seal, a_value_opens_with_the_key_it_names_in_its_own_field_and_nowhere_else)
{
	seal_keys *old, *both, *none = NULL;
	char why[256], id[SEAL_ID_MAX + 1];
	cr_assert_eq(seal_keys_parse("k1=" K1, &old, why, sizeof why), 0);
	cr_assert_eq(seal_keys_parse("k2=" K2 ",k1=" K1, &both, why, sizeof why), 0);
	buf s = BUF_INIT, out = BUF_INIT;
	const char *json = "{\"card\": \"4242 4242 4242 4242\", \"n\": [1, 2]}";
	cr_assert_eq(seal_value(old, SEAL_RUN_INPUT, json, &s), 0);
	cr_assert(!strstr(buf_str(&s), "4242"), "%s", buf_str(&s));
	cr_assert(strncmp(buf_str(&s), "\"" SEAL_PREFIX "k1:", 14) == 0, "a JSON string: %s",
	          buf_str(&s));
	cr_assert(seal_is_sealed(SEAL_RUN_INPUT, buf_str(&s), id));
	cr_assert_str_eq(id, "k1");
	/* After a rotation the old value still opens, with the old key. */
	cr_assert_eq(open_as(both, SEAL_RUN_INPUT, buf_str(&s), &out, id), 0);
	cr_assert_str_eq(buf_str(&out), json);
	/* Not in another field; not without its key; not altered. */
	cr_assert_eq(open_as(both, SEAL_STEP_OUTPUT, buf_str(&s), &out, id), -CAIRN_EINVAL);
	cr_assert_eq(open_as(none, SEAL_RUN_INPUT, buf_str(&s), &out, id), SEAL_NOKEY);
	cr_assert_str_eq(id, "k1");
	char *t = strdup(buf_str(&s));
	for (size_t i = 14; t[i + 1]; i++) {
		char was = t[i];
		t[i] = was == 'A' ? 'B' : 'A';
		cr_assert_lt(open_as(both, SEAL_RUN_INPUT, t, &out, id), 0, "changed at %zu", i);
		t[i] = was;
	}
	free(t);
	/* New values use the current key; errors are bare text. */
	buf_reset(&s);
	cr_assert_eq(seal_value(both, SEAL_RUN_ERROR, "card declined: 4242", &s), 0);
	cr_assert(strncmp(buf_str(&s), SEAL_PREFIX "k2:", 13) == 0, "%s", buf_str(&s));
	cr_assert_eq(open_as(both, SEAL_RUN_ERROR, buf_str(&s), &out, id), 0);
	cr_assert_str_eq(buf_str(&out), "card declined: 4242");
	cr_assert_eq(open_as(old, SEAL_RUN_ERROR, buf_str(&s), &out, id), SEAL_NOKEY);
	/* Plaintext is plaintext; an empty value seals too. */
	cr_assert_eq(open_as(both, SEAL_RUN_INPUT, "{\"a\": 1}", &out, id), 1);
	cr_assert_eq(open_as(both, SEAL_RUN_ERROR, "cancelled", &out, id), 1);
	buf_reset(&s);
	cr_assert_eq(seal_value(both, SEAL_STEP_ERROR, "", &s), 0);
	cr_assert_eq(open_as(both, SEAL_STEP_ERROR, buf_str(&s), &out, id), 0);
	cr_assert_str_eq(buf_str(&out), "");
	static const char *const bad[] = {SEAL_PREFIX, SEAL_PREFIX "k2",
	                                  SEAL_PREFIX "k2:", SEAL_PREFIX "k2:!!!!",
	                                  SEAL_PREFIX ":AAAA"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_assert_eq(open_as(both, SEAL_RUN_ERROR, bad[i], &out, id), -CAIRN_EINVAL, "%s",
		             bad[i]);
	buf_reset(&s);
	cr_assert_eq(seal_value(NULL, SEAL_RUN_OUTPUT, "[1]", &s), 0);
	cr_assert_str_eq(buf_str(&s), "[1]", "without keys a value is written as it is");
	buf_free(&s);
	buf_free(&out);
	seal_keys_free(old);
	seal_keys_free(both);
}

/* A runner owning shard 3 of "default" with epoch 4, and the row of run 42
 * claimed there: its start, counted by the claim. */
static shardmap *claim_map(void)
{
	char *const groups[] = {"default"};
	shardmap *m;
	cr_assert_eq(shardmap_new(groups, 1, &m), 0);
	cr_assert_eq(shardmap_set_shards(m, 8), 0);
	shardmap_acquired(m, 0, 3, 4);
	return m;
}

static void claim_row(const char *v[CLAIM_NCOLS])
{
	static const char *const row[CLAIM_NCOLS] = {[CLAIM_ID] = "42",
	                                             [CLAIM_GROUP] = "default",
	                                             [CLAIM_SHARD] = "3",
	                                             [CLAIM_EPOCH] = "4",
	                                             [CLAIM_MSGS] = "{0,17}",
	                                             [CLAIM_WORKFLOW] = "order",
	                                             [CLAIM_STATUS] = "running",
	                                             [CLAIM_INPUT] = "{\"id\": 7}",
	                                             [CLAIM_ATTEMPT] = "1",
	                                             [CLAIM_MAX_ATTEMPTS] = "3",
	                                             [CLAIM_CANCEL] = "f",
	                                             [CLAIM_SCHEDULED] = "1764763292000",
	                                             [CLAIM_NOW] = "1764763292417",
	                                             [CLAIM_CLAIMS] = "1",
	                                             [CLAIM_JOURNAL_BYTES] = "0",
	                                             [CLAIM_MARKED] = "t",
	                                             [CLAIM_FLOW] = "f",
	                                             [CLAIM_QUEUED] = "9",
	                                             [CLAIM_PRIORITY] = "-7",
	                                             [CLAIM_JOURNAL_FROM] = "0",
	                                             [CLAIM_JOURNAL_CUTS] = "0",
	                                             [CLAIM_CHAIN] = "42",
	                                             [CLAIM_TRACEPARENT] =
	                                                 "00-4bf92f3577b34da6a3ce929d0e0e4736-"
	                                                 "00f067aa0ba902b7-01",
	                                             [CLAIM_CREATED] = "1764763291000123"};
	memcpy(v, row, sizeof row);
}

Test(claimrow, a_claimed_row_decodes_into_the_job_of_its_run)
{
	shardmap *m = claim_map();
	claimrow_env env = {.map = m, .owner = 11, .mono_at_load = 5000, .max_journal_bytes = 100};
	const char *v[CLAIM_NCOLS];
	claim_row(v);
	job *j;
	cr_assert_eq(claimrow_decode(&env, v, &j), 0);
	cr_assert_eq(j->run_id, 42);
	cr_assert_str_eq(j->group_name, "default");
	cr_assert(j->group == 0 && j->shard == 3 && j->epoch == 4 && j->owner == 11);
	cr_assert(j->nmsgs == 2 && j->msgs[0] == MSG_START_ID && j->msgs[1] == 17);
	cr_assert_str_eq(j->workflow, "order");
	cr_assert_str_eq(j->input, "{\"id\": 7}");
	cr_assert_eq(j->status, RUN_RUNNING);
	cr_assert_str_eq(j->traceparent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
	cr_assert_eq(j->created_us, 1764763291000123);
	cr_assert(j->attempt == 1 && j->max_attempts == 3 && !j->cancel_requested);
	cr_assert(j->scheduled_ms == 1764763292000 && j->db_now_ms == 1764763292417);
	cr_assert(j->marked && j->claims == 0, "the claim's own count is not an earlier stop");
	cr_assert_eq(j->queued_seq, 9, "counted by its claim, it waits in the queue");
	cr_assert_eq(j->priority, -7);
	cr_assert(!j->journal && !j->signals && !j->last_step && !j->load_error[0]);
	job_free(j);
	v[CLAIM_JOURNAL_BYTES] = "101";
	cr_assert_eq(claimrow_decode(&env, v, &j), 0);
	cr_assert(strstr(j->load_error, "101 bytes"), "%s", j->load_error);
	cr_assert(strstr(j->load_error, "continue as new (cairn_continue_as_new)"), "%s",
	          j->load_error);
	job_free(j);
	v[CLAIM_JOURNAL_BYTES] = "0";
	v[CLAIM_JOURNAL_FROM] = "64";
	v[CLAIM_JOURNAL_CUTS] = "2";
	v[CLAIM_CHAIN] = "40";
	cr_assert_eq(claimrow_decode(&env, v, &j), 0);
	cr_assert(j->journal_from == 64 && j->journal_cuts == 2 && j->chain_id == 40);
	job_free(j);
	cr_assert_eq(claimrow_next_due_ms(v), -1, "NULL: nothing due later");
	v[CLAIM_NEXT_DUE] = "250";
	cr_assert_eq(claimrow_next_due_ms(v), 250);
	v[CLAIM_NEXT_DUE] = "soon";
	cr_assert_eq(claimrow_next_due_ms(v), -1);
	shardmap_free(m);
}

Test(claimrow, a_row_the_claim_cannot_write_or_of_another_lease_is_refused)
{
	shardmap *m = claim_map();
	claimrow_env env = {.map = m, .owner = 11, .max_journal_bytes = 100};
	static const struct {
		int col;
		const char *value;
		int rc;
	} bad[] = {
	    {CLAIM_ID, "0", -CAIRN_EINVAL},
	    {CLAIM_ID, "42x", -CAIRN_EINVAL},
	    {CLAIM_ID, NULL, -CAIRN_EINVAL},
	    {CLAIM_GROUP, "billing", -CAIRN_ESTATE},
	    {CLAIM_SHARD, "4", -CAIRN_ESTATE},
	    {CLAIM_SHARD, "4294967299", -CAIRN_EINVAL},
	    {CLAIM_EPOCH, "5", -CAIRN_ESTATE},
	    {CLAIM_EPOCH, "0", -CAIRN_EINVAL},
	    {CLAIM_MSGS, "{}", -CAIRN_EINVAL},
	    {CLAIM_MSGS, "{1,,2}", -CAIRN_EINVAL},
	    {CLAIM_MSGS, "{-1}", -CAIRN_EINVAL},
	    {CLAIM_MSGS, "1,2", -CAIRN_EINVAL},
	    {CLAIM_MSGS, "{1,2} ", -CAIRN_EINVAL},
	    {CLAIM_STATUS, "Running", -CAIRN_EINVAL},
	    {CLAIM_WORKFLOW, NULL, -CAIRN_EINVAL},
	    {CLAIM_ATTEMPT, "-1", -CAIRN_EINVAL},
	    {CLAIM_MAX_ATTEMPTS, "0", -CAIRN_EINVAL},
	    {CLAIM_ATTEMPT, "2147483648", -CAIRN_EINVAL},
	    {CLAIM_CANCEL, "true", -CAIRN_EINVAL},
	    {CLAIM_SCHEDULED, "-9223372036854775808", -CAIRN_EINVAL},
	    {CLAIM_NOW, "", -CAIRN_EINVAL},
	    {CLAIM_CLAIMS, "0", -CAIRN_EINVAL}, /* marked, so counted at least once */
	    {CLAIM_MARKED, NULL, -CAIRN_EINVAL},
	    {CLAIM_MARKED, "f", -CAIRN_EINVAL}, /* queued, so counted by its claim */
	    {CLAIM_QUEUED, "0", -CAIRN_EINVAL},
	    {CLAIM_QUEUED, "t", -CAIRN_EINVAL},
	    {CLAIM_PRIORITY, NULL, -CAIRN_EINVAL},
	    {CLAIM_PRIORITY, "1001", -CAIRN_EINVAL},
	    {CLAIM_JOURNAL_FROM, "-1", -CAIRN_EINVAL},
	    {CLAIM_JOURNAL_FROM, NULL, -CAIRN_EINVAL},
	    {CLAIM_JOURNAL_CUTS, "2147483648", -CAIRN_EINVAL},
	    {CLAIM_CHAIN, "0", -CAIRN_EINVAL},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		const char *v[CLAIM_NCOLS];
		claim_row(v);
		v[bad[i].col] = bad[i].value;
		job *j = NULL;
		cr_assert_eq(claimrow_decode(&env, v, &j), bad[i].rc, "column %d = %s", bad[i].col,
		             bad[i].value ? bad[i].value : "NULL");
		cr_assert_null(j);
	}
	shardmap_releasing(m, 0, 3);
	const char *v[CLAIM_NCOLS];
	claim_row(v);
	job *j;
	cr_assert_eq(claimrow_decode(&env, v, &j), -CAIRN_ESTATE, "a shard being released");
	shardmap_free(m);
}

Test(route, each_request_gets_its_page_or_action_and_the_token_where_it_is_needed)
{
	route r;
	route_request("GET", "/healthz", NULL, "secret", &r);
	cr_assert_eq(r.kind, ROUTE_HEALTHZ, "probes need no token");
	route_request("HEAD", "/readyz", NULL, "secret", &r);
	cr_assert_eq(r.kind, ROUTE_READYZ);
	route_request("GET", "/status", NULL, "secret", &r);
	cr_assert_eq(r.kind, ROUTE_UNAUTHORIZED);
	route_request("GET", "/status", "Bearer secretx", "secret", &r);
	cr_assert_eq(r.kind, ROUTE_UNAUTHORIZED);
	route_request("GET", "/metrics", "bearer secret", "secret", &r);
	cr_assert_eq(r.kind, ROUTE_METRICS, "the scheme's case does not matter");
	route_request("GET", "/status", NULL, "", &r);
	cr_assert_eq(r.kind, ROUTE_STATUS, "no token set: none needed");
	route_request("GET", "/nope", NULL, "", &r);
	cr_assert_eq(r.kind, ROUTE_NOT_FOUND);
	route_request("DELETE", "/status", NULL, "", &r);
	cr_assert_eq(r.kind, ROUTE_BAD_METHOD);
	route_request("GET", "/signal/v1.abc", NULL, "secret", &r);
	cr_assert(r.kind == ROUTE_SIGNAL && strcmp(r.arg, "v1.abc") == 0,
	          "a signal link is its own credential");
	route_request("POST", "/wake", "Bearer secret", "secret", &r);
	cr_assert(r.kind == ROUTE_WAKE && !r.cancel && r.nruns == 0);
	route_request("POST", "/wake/cancel/12,13", NULL, "", &r);
	cr_assert(r.kind == ROUTE_WAKE && r.cancel && r.nruns == 2 && r.runs[0] == 12 &&
	          r.runs[1] == 13);
	route_request("POST", "/wake/1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", NULL, "", &r);
	cr_assert_eq(r.kind, ROUTE_BAD_POST, "more than CAIRN_WAKE_RUNS ids");
	route_request("POST", "/wakeup", NULL, "", &r);
	cr_assert_eq(r.kind, ROUTE_BAD_POST);
	route_request("POST", "/healthz", NULL, "", &r);
	cr_assert_eq(r.kind, ROUTE_BAD_POST);
	cr_assert_eq(route_poke("/members/0a1b", &r), 0);
	cr_assert(r.kind == ROUTE_MEMBERS && strcmp(r.arg, "0a1b") == 0);
	cr_assert_eq(route_poke("/members/0A1B", &r), -1);
	cr_assert_eq(r.kind, ROUTE_BAD_POST);
}

/* cron_next from the wall-clock time text "YYYY-MM-DD HH:MM:SS". */
static const char *next_of(const char *expr, const char *after, char out[32])
{
	cron c;
	char err[512];
	cr_assert_eq(cron_parse(expr, &c, err, sizeof err), 0, "%s: %s", expr, err);
	struct tm t = {0}, n;
	sscanf(after, "%d-%d-%d %d:%d:%d", &t.tm_year, &t.tm_mon, &t.tm_mday, &t.tm_hour, &t.tm_min,
	       &t.tm_sec);
	t.tm_year -= 1900;
	t.tm_mon -= 1;
	if (cron_next(&c, &t, &n) < 0)
		return "none";
	strftime(out, 32, "%Y-%m-%d %H:%M:%S", &n);
	return out;
}

Test(cron, the_next_time_follows_each_field_steps_names_and_the_either_day_rule)
{
	char b[32];
	static const char *const cases[][3] = {
	    {"*/15 * * * *", "2026-12-03 10:07:30", "2026-12-03 10:15:00"},
	    {"0 9 * * MON-FRI", "2026-12-04 09:00:00", "2026-12-07 09:00:00"}, /* Fri -> Mon */
	    {"0 0 29 2 *", "2026-03-01 00:00:00", "2028-02-29 00:00:00"},
	    {"*/10 * * * * *", "2026-12-03 10:07:55", "2026-12-03 10:08:00"},
	    {"5 0 * * *", "2026-12-31 23:59:00", "2027-01-01 00:05:00"},
	    /* both day fields restricted: the 13th or a Friday */
	    {"0 0 13 * FRI", "2026-12-01 00:00:00", "2026-12-04 00:00:00"},
	    {"0 0 13 * 5", "2026-12-05 00:00:00", "2026-12-11 00:00:00"},
	    {"0 12 * * 7", "2026-12-03 00:00:00", "2026-12-06 12:00:00"}, /* 7 is Sunday */
	    {"0 0 1 jan,jul *", "2026-02-01 00:00:00", "2026-07-01 00:00:00"},
	    {"30 8-18/4 * * *", "2026-12-03 12:31:00", "2026-12-03 16:30:00"},
	    {"@daily", "2026-12-03 10:00:00", "2026-12-04 00:00:00"},
	    {"@hourly", "2026-12-03 10:00:00", "2026-12-03 11:00:00"},
	    {"0 0 30 2 *", "2026-01-01 00:00:00", "none"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		cr_assert_str_eq(next_of(cases[i][0], cases[i][1], b), cases[i][2], "%s after %s",
		                 cases[i][0], cases[i][1]);
}

Test(cron, a_bad_expression_is_refused_naming_the_field)
{
	static const char *const bad[][2] = {
	    {"61 * * * *", "minute field \"61\""},  {"* 24 * * *", "hour field"},
	    {"* * 0 * *", "day of month field"},    {"* * * 13 *", "month field"},
	    {"* * * * 8", "day of week field"},     {"* * * *", "expected 5 fields"},
	    {"* * * * * * *", "expected 5 fields"}, {"*/0 * * * *", "minute field"},
	    {"1,,2 * * * *", "minute field"},       {"5-1 * * * *", "minute field"},
	    {"@often", "expected 5 fields"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		cron c;
		char err[512];
		cr_assert_eq(cron_parse(bad[i][0], &c, err, sizeof err), -1, "%s", bad[i][0]);
		cr_assert(strstr(err, bad[i][1]), "%s: %s", bad[i][0], err);
	}
}

/* Europe/Berlin by its rule: CEST (UTC+2) from 01:00 UTC of the last Sunday
 * of March to 01:00 UTC of the last Sunday of October, CET (UTC+1) else. */
static int64_t last_sunday_0100(int year, int mon)
{
	struct tm t = {.tm_year = year - 1900, .tm_mon = mon - 1, .tm_mday = 31, .tm_hour = 1};
	time_t s = timegm(&t);
	gmtime_r(&s, &t);
	return (int64_t)s - (int64_t)t.tm_wday * 86400;
}

static int berlin(void *arg, int64_t lo, int64_t hi, cron_offsets *o)
{
	(void)arg;
	time_t s = (time_t)lo;
	struct tm t;
	gmtime_r(&s, &t);
	int y = t.tm_year + 1900;
	o->lo = o->at[0] = lo;
	o->hi = hi;
	o->off[0] = lo >= last_sunday_0100(y, 3) && lo < last_sunday_0100(y, 10) ? 7200 : 3600;
	o->n = 1;
	for (;; y++)
		for (int k = 0; k < 2; k++) {
			int64_t at = last_sunday_0100(y, k ? 10 : 3);
			if (at > hi)
				return 0;
			if (at > lo) {
				o->at[o->n] = at;
				o->off[o->n++] = k ? 3600 : 7200;
			}
		}
}

/* A zone of a single offset, `off` s (its arg). */
static int fixed(void *arg, int64_t lo, int64_t hi, cron_offsets *o)
{
	*o = (cron_offsets){.lo = lo, .hi = hi, .n = 1, .at = {lo}, .off = {*(int32_t *)arg}};
	return 0;
}

/* Unix s of a UTC time text "YYYY-MM-DD HH:MM:SS". */
static int64_t utc_s(const char *text)
{
	struct tm t = {0};
	sscanf(text, "%d-%d-%d %d:%d:%d", &t.tm_year, &t.tm_mon, &t.tm_mday, &t.tm_hour, &t.tm_min,
	       &t.tm_sec);
	t.tm_year -= 1900;
	t.tm_mon -= 1;
	return (int64_t)timegm(&t);
}

/* The fires of expr in Berlin from a to b (UTC texts) as "HH:MM" UTC, the
 * way the scheduler meets them (at each next time, what is due then), after
 * checking that one call over the whole span gives the same. */
static void berlin_fires(const char *expr, const char *a, const char *b, buf *out)
{
	cron c;
	char err[512];
	cr_assert_eq(cron_parse(expr, &c, err, sizeof err), 0, "%s", err);
	static int64_t due[1000], all[1000];
	int64_t next = utc_s(a), end = utc_s(b), last;
	int n, nall;
	cr_assert_eq(cron_fires(&c, berlin, NULL, next, end, 0, all, 1000, &nall, &last), 0);
	cr_assert_gt(last, end);
	int k = 0;
	while (next <= end) {
		int64_t woke = next;
		cr_assert_eq(cron_fires(&c, berlin, NULL, woke, woke, 0, due, 1000, &n, &next), 0);
		cr_assert(next > woke, "%s: the next fire is not after %lld", expr,
		          (long long)woke);
		for (int i = 0; i < n; i++, k++) {
			cr_assert(k < nall && due[i] == all[k], "%s: fire %d differs", expr, k);
			time_t s = (time_t)due[i];
			struct tm t;
			gmtime_r(&s, &t);
			buf_printf(out, "%s%02d:%02d", out->len ? " " : "", t.tm_hour, t.tm_min);
		}
	}
	cr_assert_eq(k, nall, "%s: %d fires one by one, %d in one call", expr, k, nall);
}

Test(cron, berlins_clock_changes_fire_a_skipped_time_shifted_and_a_repeated_one_at_its_first)
{
	/* 2026-03-29 01:00 UTC: 02:00 CET jumps to 03:00 CEST. 2026-10-25
	 * 01:00 UTC: 03:00 CEST falls back to 02:00 CET. Fires from 22:00 UTC the
	 * day before to 03:59 UTC. */
	static const char *const cases[][3] = {
	    {"30 2 * * *", "2026-03-28", "01:30"},
	    {"0 3 * * *", "2026-03-28", "01:00"},
	    {"59 1 * * *", "2026-03-28", "00:59"},
	    {"0 * * * *", "2026-03-28", "22:00 23:00 00:00 01:00 02:00 03:00"},
	    {"*/30 * * * *", "2026-03-28",
	     "22:00 22:30 23:00 23:30 00:00 00:30 01:00 01:30 02:00 02:30 03:00 03:30"},
	    {"0,30 2 * * *", "2026-03-28", "01:00 01:30"},
	    {"30 2 * * *", "2026-10-24", "00:30"},
	    {"0 3 * * *", "2026-10-24", "02:00"},
	    {"59 1 * * *", "2026-10-24", "23:59"},
	    {"0 * * * *", "2026-10-24", "22:00 23:00 00:00 02:00 03:00"},
	    {"*/30 * * * *", "2026-10-24",
	     "22:00 22:30 23:00 23:30 00:00 00:30 02:00 02:30 03:00 03:30"},
	    {"* 2 * * *", "2026-10-24", NULL}, /* 60 fires, 00:00 to 00:59, and none after */
	};
	buf b = BUF_INIT;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char a[32], z[32];
		snprintf(a, sizeof a, "%s 22:00:00", cases[i][1]);
		snprintf(z, sizeof z, "%.8s%02d 03:59:59", cases[i][1], atoi(cases[i][1] + 8) + 1);
		berlin_fires(cases[i][0], a, z, &b);
		if (cases[i][2])
			cr_expect_str_eq(buf_str(&b), cases[i][2], "%s on %s", cases[i][0],
			                 cases[i][1]);
		else
			cr_expect(strlen(buf_str(&b)) == 60 * 6 - 1 &&
			              strncmp(buf_str(&b), "00:00 00:01", 11) == 0 &&
			              strcmp(buf_str(&b) + 59 * 6, "00:59") == 0,
			          "%s: %s", cases[i][0], buf_str(&b));
		buf_reset(&b);
	}
	buf_free(&b);
}

Test(cron, fires_are_capped_in_order_the_last_alone_when_asked_and_a_bad_zone_or_date_refused)
{
	cron c;
	char err[512];
	cr_assert_eq(cron_parse("*/10 * * * * *", &c, err, sizeof err), 0);
	int64_t due[4], next, t = utc_s("2026-12-03 10:00:00");
	int32_t off = -5 * 3600;
	int n;
	/* 10:00:00 to 10:01:00 has 7 fires: the first 3, then the 4th next. */
	cr_assert_eq(cron_fires(&c, fixed, &off, t, t + 60, 0, due, 3, &n, &next), 0);
	cr_assert(n == 3 && due[0] == t && due[1] == t + 10 && due[2] == t + 20 && next == t + 30);
	/* Only the last: 10:01:00; next 10:01:10. From a ms-free instant after one. */
	cr_assert_eq(cron_fires(&c, fixed, &off, t + 1, t + 60, 1, due, 3, &n, &next), 0);
	cr_assert(n == 1 && due[0] == t + 60 && next == t + 70);
	cr_assert_eq(cron_fires(&c, fixed, &off, t + 61, t + 61, 1, due, 3, &n, &next), 0);
	cr_assert(n == 0 && next == t + 70);
	off = 30 * 3600; /* no zone is 30 h from UTC */
	cr_assert_eq(cron_fires(&c, fixed, &off, t, t, 0, due, 3, &n, &next), CRON_EZONE);
	off = 0;
	cr_assert_eq(cron_parse("0 0 30 2 *", &c, err, sizeof err), 0);
	cr_assert_eq(cron_fires(&c, fixed, &off, t, t, 0, due, 3, &n, &next), CRON_NEVER);
}

/* ------------------------------------------------------------------ form */

Test(form, a_field_is_decoded_and_a_cut_escape_refused)
{
	char out[16];
	cr_assert_eq(form_value("a=1&token=x%2By+z&b=2", "token", out, sizeof out), 5);
	cr_assert_str_eq(out, "x+y z");
	cr_assert_eq(form_value("token=%4", "token", out, sizeof out), -2);
	cr_assert_eq(form_value("token=%", "token", out, sizeof out), -2);
	cr_assert_eq(form_value("token=%g0", "token", out, sizeof out), -2);
	cr_assert_eq(form_value("tokens=1", "token", out, sizeof out), -1);
	cr_assert_eq(form_value("token=0123456789abcdef", "token", out, sizeof out), -2,
	             "longer than the buffer");
	cr_assert_eq(form_value("token=", "token", out, sizeof out), 0);
	cr_assert_str_eq(out, "");
}

Test(form, a_cookie_counts_only_under_its_own_name)
{
	size_t n = 0;
	const char *v = form_cookie("xcairn_ui=bad; cairn_ui=good ; y=1", "cairn_ui", &n);
	cr_assert(v && n == 4 && strncmp(v, "good", 4) == 0, "%.*s", (int)n, v ? v : "");
	cr_assert_null(form_cookie("xcairn_ui=bad", "cairn_ui", &n));
	cr_assert_null(form_cookie(NULL, "cairn_ui", &n));
	v = form_cookie("cairn_ui=", "cairn_ui", &n);
	cr_assert(v && n == 0);
}

/* ------------------------------------------------------- secrets of a URL */

/* Ten malformed connection strings, each with a password that contains
 * SECRET: libpq's message for each, and the string itself, lose it. */
static const char *const malformed_urls[] = {
    "postgresql://u:SECRETPW6@[::1:5432/cairn",
    "postgresql://u:SECRET%zzPW@h/db",
    "postgresql://u:SECRET%00PW@h/db",
    "postgres://u:SECRET%41B@h:99999999/db",
    "postgresql://u:SECRETPW@h/db?password=SECRET2&bogus=1",
    "postgresql://u@h/db?sslpassword=SECRETQ%zz",
    "host=h password=SECRETKV bogus=1",
    "host=h password='SECRET \\' KV2",
    "host=h sslpassword = SECRETSSL port=abc = x",
    "postgres://u:SECRETX@@h/db?x",
};

Test(db, a_malformed_connection_string_never_shows_its_password)
{
	for (size_t i = 0; i < sizeof malformed_urls / sizeof *malformed_urls; i++) {
		const char *u = malformed_urls[i];
		char *perr = NULL;
		PQconninfoOption *o = PQconninfoParse(u, &perr);
		PQconninfoFree(o);
		buf msg = BUF_INIT, out = BUF_INIT;
		buf_printf(&msg, "%s | \"%s\"", perr ? perr : "(parsed)", u);
		PQfreemem(perr);
		db_scrub(u, buf_str(&msg), &out);
		cr_assert(!strstr(buf_str(&out), "SECRET"), "%s\nbecame\n%s", buf_str(&msg),
		          buf_str(&out));
		cr_assert(strstr(buf_str(&out), "****"), "%s", buf_str(&out));
		buf_free(&msg);
		buf_free(&out);
	}
}

/* A parent's map of its children holds keys only until it takes an end. */
Test(idmap, keys_put_without_values_then_values_put_later_are_all_found)
{
	idmap m = IDMAP_INIT;
	enum { N = 100000 };
	for (int64_t k = 1; k <= N; k++)
		cr_assert_eq(idmap_put(&m, k * 7919, NULL), 0);
	cr_assert_null(m.vals, "values allocated while every value was NULL");
	static const int v = 42;
	cr_assert_eq(idmap_put(&m, 7919 * 500, &v), 0);
	for (int64_t k = N + 1; k <= 2 * N; k++) /* grows with values */
		cr_assert_eq(idmap_put(&m, k * 7919, NULL), 0);
	const void *got = &v;
	for (int64_t k = 1; k <= 2 * N; k++) {
		cr_assert(idmap_get(&m, k * 7919, &got), "key %" PRId64 " lost", k * 7919);
		cr_assert(k == 500 ? got == &v : got == NULL);
	}
	cr_assert_not(idmap_get(&m, 3, &got));
	cr_assert_eq(m.n, 2 * N);
	idmap_free(&m);
}

/* Ids out of order (orphans found again, a wait's own order) land in
 * their place: every key is found with its value, at its rank, and the
 * keys stay sorted, 8 bytes each with no values. */
Test(idmap, keys_out_of_order_keep_their_values_and_ranks_and_cost_8_bytes_each)
{
	idmap m = IDMAP_INIT;
	enum { N = 4096 };
	static int vals[N];
	for (int64_t k = N; k >= 1; k -= 2) /* the even ones, descending */
		cr_assert_eq(idmap_put(&m, k, NULL), 0);
	for (int64_t k = 1; k <= N; k += 2) /* then the odd ones, ascending */
		cr_assert_eq(idmap_put(&m, k, NULL), 0);
	cr_assert_null(m.vals);
	cr_assert_leq(m.cap, (size_t)N, "%zu slots for %d keys", m.cap, N);
	for (int64_t k = 1; k <= N; k += 3)
		cr_assert_eq(idmap_put(&m, k, &vals[k - 1]), 0);
	cr_assert_eq(idmap_put(&m, 10 * N, &vals[0]), 0); /* a new key with a value */
	cr_assert_eq(m.n, (size_t)N + 1);
	for (size_t i = 1; i < m.n; i++)
		cr_assert_lt(m.keys[i - 1], m.keys[i]);
	for (int64_t k = 1; k <= N; k++) {
		const void *got;
		size_t at;
		cr_assert(idmap_get(&m, k, &got), "key %" PRId64 " lost", k);
		cr_assert_eq(got, (k - 1) % 3 == 0 ? (const void *)&vals[k - 1] : NULL);
		cr_assert(idmap_index(&m, k, &at));
		cr_assert_eq(at, (size_t)(k - 1));
	}
	size_t at;
	cr_assert_not(idmap_index(&m, N + 1, &at));
	cr_assert_not(idmap_index(&m, 0, &at));
	idmap_free(&m);
}

/* pgarr_add_i64 writes its digits by hand: the extremes too. */
Test(pgarr, integers_are_written_as_printf_writes_them)
{
	pgarr a = PGARR_INIT;
	int64_t v[] = {0, 7, -7, 1234567890123LL, INT64_MAX, INT64_MIN};
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
		pgarr_add_i64(&a, v[i]);
	cr_assert_str_eq(pgarr_str(&a),
	                 "{0,7,-7,1234567890123,9223372036854775807,-9223372036854775808}");
	pgarr_free(&a);
}
