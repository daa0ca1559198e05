/*
 * link.c - see link.h.
 */
#include "link.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parse.h"
#include "seal.h"

static const char CONTEXT[] = "cairn-signal-link-v1\n";
#define B64 sodium_base64_VARIANT_URLSAFE_NO_PADDING

int link_key_parse(const char *text, unsigned char key[LINK_KEY_BYTES], char *err, size_t n)
{
	if (sodium_init() < 0) {
		snprintf(err, n, "libsodium cannot start");
		return -1;
	}
	if (!text || !*text) {
		snprintf(err, n, "it is not set");
		return -1;
	}
	if (seal_key_decode(text, strlen(text), key) == 0)
		return 0;
	snprintf(err, n,
	         "expected the base64 of 32 random bytes (%zu characters, not shown), for example "
	         "from `openssl rand -base64 32`",
	         strlen(text));
	return -1;
}

static void mac_of(const unsigned char key[LINK_KEY_BYTES], const char *fields, size_t len,
                   unsigned char mac[crypto_auth_BYTES])
{
	crypto_auth_hmacsha512256_state st;
	crypto_auth_hmacsha512256_init(&st, key, LINK_KEY_BYTES);
	crypto_auth_hmacsha512256_update(&st, (const unsigned char *)CONTEXT, sizeof CONTEXT - 1);
	crypto_auth_hmacsha512256_update(&st, (const unsigned char *)fields, len);
	crypto_auth_hmacsha512256_final(&st, mac);
}

int link_make(const unsigned char key[LINK_KEY_BYTES], link_claims *c, buf *out)
{
	if (strcmp(c->nonce, "new") == 0) {
		unsigned char r[16];
		randombytes_buf(r, sizeof r);
		sodium_bin2hex(c->nonce, sizeof c->nonce, r, sizeof r);
	}
	char fields[256];
	int len = snprintf(fields, sizeof fields, "%" PRId64 "\n%s\n%" PRId64 "\n%s", c->run_id,
	                   c->signal, c->expires_unix, c->nonce[0] ? c->nonce : "-");
	if (len < 0 || (size_t)len >= sizeof fields)
		return -1;
	unsigned char mac[crypto_auth_BYTES];
	mac_of(key, fields, (size_t)len, mac);
	char a[sodium_base64_ENCODED_LEN(sizeof fields, B64)];
	char m[sodium_base64_ENCODED_LEN(crypto_auth_BYTES, B64)];
	sodium_bin2base64(a, sizeof a, (const unsigned char *)fields, (size_t)len, B64);
	sodium_bin2base64(m, sizeof m, mac, sizeof mac, B64);
	buf_printf(out, "v1.%s.%s", a, m);
	return out->oom ? -1 : 0;
}

int link_open(const unsigned char key[LINK_KEY_BYTES], const char *token, int64_t now_unix,
              link_claims *out, char *why, size_t n)
{
	memset(out, 0, sizeof *out);
	const char *dot = token ? strchr(token, '.') : NULL;
	const char *dot2 = dot ? strchr(dot + 1, '.') : NULL;
	char fields[256];
	unsigned char mac[crypto_auth_BYTES], want[crypto_auth_BYTES];
	size_t flen = 0, mlen = 0;
	if (!dot2 || strlen(token) > LINK_TOKEN_MAX || strncmp(token, "v1.", 3) != 0 ||
	    sodium_base642bin((unsigned char *)fields, sizeof fields - 1, dot + 1,
	                      (size_t)(dot2 - dot - 1), NULL, &flen, NULL, B64) != 0 ||
	    sodium_base642bin(mac, sizeof mac, dot2 + 1, strlen(dot2 + 1), NULL, &mlen, NULL,
	                      B64) != 0 ||
	    mlen != sizeof mac) {
		snprintf(why, n, "this is no signal link of this fleet: the token is malformed");
		return -1;
	}
	mac_of(key, fields, flen, want);
	if (crypto_verify_32(mac, want) != 0) {
		snprintf(why, n,
		         "this is no signal link of this fleet: its signature does not verify "
		         "(altered, or signed with another CAIRN_SIGNING_KEY)");
		return -1;
	}
	fields[flen] = '\0';
	/* Signed by us: the fields are as link_make wrote them. */
	char *save = NULL, *run = strtok_r(fields, "\n", &save), *sig = strtok_r(NULL, "\n", &save),
	     *exp = strtok_r(NULL, "\n", &save), *nonce = strtok_r(NULL, "\n", &save);
	char perr[PARSE_ERR_MAX];
	if (!nonce || parse_int(run, 1, INT64_MAX, &out->run_id, perr) < 0 ||
	    parse_int(exp, 0, INT64_MAX, &out->expires_unix, perr) < 0 ||
	    strlen(sig) >= sizeof out->signal || strlen(nonce) >= sizeof out->nonce) {
		snprintf(why, n, "this is no signal link of this fleet: the token is malformed");
		return -1;
	}
	snprintf(out->signal, sizeof out->signal, "%s", sig);
	snprintf(out->nonce, sizeof out->nonce, "%s", strcmp(nonce, "-") == 0 ? "" : nonce);
	if (now_unix >= out->expires_unix) {
		snprintf(why, n, "the link expired %" PRId64 " s ago",
		         now_unix - out->expires_unix);
		return -2;
	}
	return 0;
}
