/*
 * link.h - signed signal links (`cairn signal-link`): a token that names a
 * run, a signal and an expiry (and, for a link used once, a random nonce),
 * authenticated with libsodium's crypto_auth (HMAC-SHA-512-256) under
 * CAIRN_SIGNING_KEY. Whoever holds the token can send that one signal to
 * that one run until it expires, and nothing else. Pure but for the random
 * nonce.
 *
 * A token is "v1." BASE64URL(fields) "." BASE64URL(mac), the fields being
 * "run\nsignal\nexpires\nnonce" (Unix seconds; nonce "-" when the link may
 * be used again), the MAC taken over "cairn-signal-link-v1\n" and the fields.
 */
#ifndef CAIRN_LINK_H
#define CAIRN_LINK_H
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define LINK_KEY_BYTES 32
#define LINK_TOKEN_MAX 512

typedef struct link_claims {
	int64_t run_id;
	char signal[129];
	int64_t expires_unix;
	char nonce[33]; /* 32 hex digits, or "" for a link that may be used again */
} link_claims;

/* A CAIRN_SIGNING_KEY value (base64 of 32 bytes) into key; 0, or -1 with
 * err saying what is wrong (never the value). */
int link_key_parse(const char *text, unsigned char key[LINK_KEY_BYTES], char *err, size_t n);
/* The token of c (c->nonce: "" for a link used any number of times, "new"
 * for a fresh random nonce, which is written back) into out; 0 or -1. */
int link_make(const unsigned char key[LINK_KEY_BYTES], link_claims *c, buf *out);
/* Checks token at now_unix: 0 with its claims; -1 when it is not one of
 * ours (malformed, or its MAC does not verify), -2 when it has expired.
 * why says which, for the reply. */
int link_open(const unsigned char key[LINK_KEY_BYTES], const char *token, int64_t now_unix,
              link_claims *out, char *why, size_t n);
#endif
