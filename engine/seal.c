/*
 * seal.c - the key ring and the sealed-value format of seal.h.
 */
#include "seal.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_BYTES   crypto_aead_xchacha20poly1305_ietf_KEYBYTES
#define NONCE_BYTES crypto_aead_xchacha20poly1305_ietf_NPUBBYTES
#define TAG_BYTES   crypto_aead_xchacha20poly1305_ietf_ABYTES
#define B64         sodium_base64_VARIANT_URLSAFE_NO_PADDING
#define ID_CHARS    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
#define FILE_MAX    (64 * 1024)

struct seal_keys {
	int n;
	struct {
		char id[SEAL_ID_MAX + 1];
		unsigned char key[KEY_BYTES];
	} k[SEAL_KEYS_MAX];
};

static const char *const FIELD_NAMES[] = {
    [SEAL_RUN_INPUT] = "run.input",     [SEAL_RUN_OUTPUT] = "run.output",
    [SEAL_RUN_ERROR] = "run.error",     [SEAL_STEP_OUTPUT] = "step.output",
    [SEAL_STEP_ERROR] = "step.error",   [SEAL_SIGNAL_PAYLOAD] = "signal.payload",
    [SEAL_EVENT_VALUE] = "event.value",
};

static int is_json(seal_field f)
{
	return f != SEAL_RUN_ERROR && f != SEAL_STEP_ERROR;
}

int seal_key_decode(const char *b64, size_t len, unsigned char key[32])
{
	static const int variants[] = {sodium_base64_VARIANT_ORIGINAL,
	                               sodium_base64_VARIANT_ORIGINAL_NO_PADDING,
	                               sodium_base64_VARIANT_URLSAFE, B64};
	for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
		size_t got = 0;
		const char *end;
		if (sodium_base642bin(key, KEY_BYTES, b64, len, " \n", &got, &end, variants[v]) ==
		        0 &&
		    end == b64 + len && got == KEY_BYTES)
			return 0;
	}
	sodium_memzero(key, KEY_BYTES);
	return -1;
}

/* One entry "ID=BASE64" of len bytes; entry is its position, for messages. */
static int parse_entry(seal_keys *k, const char *p, size_t len, int entry, char *why, size_t n)
{
	const char *eq = memchr(p, '=', len);
	size_t idlen = eq ? (size_t)(eq - p) : 0;
	if (!eq || idlen == 0 || idlen > SEAL_ID_MAX || strspn(p, ID_CHARS) < idlen) {
		snprintf(why, n,
		         "entry %d (%zu characters, not shown): expected ID=BASE64, the ID 1 to %d "
		         "of A-Z a-z 0-9 _ -",
		         entry, len, SEAL_ID_MAX);
		return -CAIRN_EINVAL;
	}
	char id[SEAL_ID_MAX + 1];
	memcpy(id, p, idlen);
	id[idlen] = '\0';
	for (int i = 0; i < k->n; i++)
		if (strcmp(k->k[i].id, id) == 0) {
			snprintf(why, n, "entry %d: key id \"%s\" appears twice", entry, id);
			return -CAIRN_EINVAL;
		}
	if (k->n == SEAL_KEYS_MAX) {
		snprintf(why, n, "more than %d keys", SEAL_KEYS_MAX);
		return -CAIRN_EINVAL;
	}
	if (seal_key_decode(eq + 1, len - idlen - 1, k->k[k->n].key) < 0) {
		snprintf(
		    why, n,
		    "key \"%s\" (entry %d) is not the base64 of 32 bytes (not shown); make one "
		    "with `openssl rand -base64 32`",
		    id, entry);
		return -CAIRN_EINVAL;
	}
	memcpy(k->k[k->n].id, id, idlen + 1);
	k->n++;
	return 0;
}

int seal_keys_parse(const char *text, seal_keys **out, char *why, size_t n)
{
	*out = NULL;
	if (sodium_init() < 0) {
		snprintf(why, n, "libsodium cannot start");
		return -CAIRN_ENOMEM;
	}
	seal_keys *k = sodium_malloc(sizeof *k);
	if (!k) {
		snprintf(why, n, "out of memory");
		return -CAIRN_ENOMEM;
	}
	k->n = 0;
	int entry = 0;
	for (const char *p = text ? text : ""; *p;) {
		if (*p == '#') {
			p += strcspn(p, "\n");
			continue;
		}
		size_t skip = strspn(p, ", \t\r\n");
		if (skip) {
			p += skip;
			continue;
		}
		size_t len = strcspn(p, ", \t\r\n#");
		int rc = parse_entry(k, p, len, ++entry, why, n);
		if (rc) {
			seal_keys_free(k);
			return rc;
		}
		p += len;
	}
	if (k->n == 0)
		seal_keys_free(k);
	else
		*out = k;
	return 0;
}

/* The file's text, at most FILE_MAX bytes: 0, or -CAIRN_EINVAL with why. */
static int read_file(const char *path, buf *text, char *why, size_t n)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(why, n, "cannot open it: %s", strerror(errno));
		return -CAIRN_EINVAL;
	}
	char chunk[4096];
	size_t got;
	while ((got = fread(chunk, 1, sizeof chunk, f)) > 0 && text->len <= FILE_MAX)
		buf_append(text, chunk, got);
	int bad = ferror(f);
	fclose(f);
	if (bad || text->len > FILE_MAX || text->oom) {
		snprintf(why, n, "%s",
		         bad         ? "cannot read it"
		         : text->oom ? "out of memory"
		                     : "larger than 64 KiB");
		return -CAIRN_EINVAL;
	}
	return 0;
}

int seal_keys_from_env(seal_keys **out, buf *err)
{
	return seal_keys_load(getenv("CAIRN_ENCRYPTION_KEYS"), getenv("CAIRN_ENCRYPTION_KEYS_FILE"),
	                      out, err);
}

int seal_keys_load(const char *text, const char *path, seal_keys **out, buf *err)
{
	char why[512];
	*out = NULL;
	if (text && *text && path && *path) {
		buf_printf(err,
		           "CAIRN_ENCRYPTION_KEYS and CAIRN_ENCRYPTION_KEYS_FILE are both set: "
		           "set one of them");
		return -CAIRN_EINVAL;
	}
	if (!path || !*path) {
		int rc = seal_keys_parse(text, out, why, sizeof why);
		if (rc)
			buf_printf(err, "invalid value for CAIRN_ENCRYPTION_KEYS: %s", why);
		return rc;
	}
	buf file = BUF_INIT;
	int rc = read_file(path, &file, why, sizeof why);
	if (!rc)
		rc = seal_keys_parse(buf_str(&file), out, why, sizeof why);
	if (!rc && !*out) {
		snprintf(why, sizeof why, "it holds no key");
		rc = -CAIRN_EINVAL;
	}
	if (rc)
		buf_printf(err, "invalid value for CAIRN_ENCRYPTION_KEYS_FILE: \"%s\": %s", path,
		           why);
	sodium_memzero(file.data, file.cap);
	buf_free(&file);
	return rc;
}

void seal_keys_free(seal_keys *k)
{
	if (k)
		sodium_free(k);
}

int seal_keys_count(const seal_keys *k)
{
	return k ? k->n : 0;
}

const char *seal_key_id(const seal_keys *k, int i)
{
	return k && i >= 0 && i < k->n ? k->k[i].id : NULL;
}

/* The sealed text inside stored (after the opening quote of a JSON string)
 * and its length, or NULL when stored is not sealed. */
static const char *sealed_text(seal_field f, const char *stored, size_t *len)
{
	if (!stored)
		return NULL;
	size_t n = strlen(stored);
	if (is_json(f)) {
		if (n < 2 || stored[0] != '"' || stored[n - 1] != '"')
			return NULL;
		stored++;
		n -= 2;
	}
	if (n < sizeof SEAL_PREFIX - 1 || memcmp(stored, SEAL_PREFIX, sizeof SEAL_PREFIX - 1) != 0)
		return NULL;
	*len = n;
	return stored;
}

/* The key id of sealed text s (len bytes) into id: its length, or -1. */
static int sealed_id(const char *s, size_t len, char *id)
{
	const char *p = s + sizeof SEAL_PREFIX - 1;
	const char *colon = memchr(p, ':', len - (size_t)(p - s));
	size_t n = colon ? (size_t)(colon - p) : 0;
	if (!colon || n == 0 || n > SEAL_ID_MAX || strspn(p, ID_CHARS) < n)
		return -1;
	memcpy(id, p, n);
	id[n] = '\0';
	return (int)n;
}

int seal_is_sealed(seal_field f, const char *stored, char *id)
{
	size_t len;
	char own[SEAL_ID_MAX + 1];
	const char *s = sealed_text(f, stored, &len);
	return s && sealed_id(s, len, id ? id : own) >= 0;
}

/* The additional data: the value's prefix (key id included) and its field. */
static void aad_of(seal_field f, const char *id, buf *aad)
{
	buf_printf(aad, SEAL_PREFIX "%s:%s", id, FIELD_NAMES[f]);
}

int seal_value(const seal_keys *k, seal_field f, const char *value, buf *out)
{
	if (!k) {
		buf_puts(out, value);
		return out->oom ? -CAIRN_ENOMEM : 0;
	}
	const char *id = k->k[0].id;
	size_t len = strlen(value), raw = NONCE_BYTES + len + TAG_BYTES;
	unsigned char *box = malloc(raw);
	buf aad = BUF_INIT;
	aad_of(f, id, &aad);
	if (!box || aad.oom) {
		free(box);
		buf_free(&aad);
		return -CAIRN_ENOMEM;
	}
	randombytes_buf(box, NONCE_BYTES);
	crypto_aead_xchacha20poly1305_ietf_encrypt(
	    box + NONCE_BYTES, NULL, (const unsigned char *)value, len,
	    (const unsigned char *)aad.data, aad.len, NULL, box, k->k[0].key);
	buf_free(&aad);
	size_t b64 = sodium_base64_ENCODED_LEN(raw, B64);
	const char *q = is_json(f) ? "\"" : "";
	buf_printf(out, "%s" SEAL_PREFIX "%s:", q, id);
	if (buf_reserve(out, b64 + 2) == 0) {
		sodium_bin2base64(out->data + out->len, b64, box, raw, B64);
		out->len += b64 - 1;
		buf_puts(out, q);
	}
	free(box);
	return out->oom ? -CAIRN_ENOMEM : 0;
}

int seal_open(const seal_keys *k, seal_field f, const char *stored, buf *out, char *id)
{
	size_t len;
	char own[SEAL_ID_MAX + 1];
	id = id ? id : own;
	id[0] = '\0';
	const char *s = sealed_text(f, stored, &len);
	if (!s)
		return 1;
	int idlen = sealed_id(s, len, id);
	if (idlen < 0)
		return -CAIRN_EINVAL;
	int ki = 0;
	while (ki < seal_keys_count(k) && strcmp(k->k[ki].id, id) != 0)
		ki++;
	if (ki == seal_keys_count(k))
		return SEAL_NOKEY;
	const char *b64 = s + sizeof SEAL_PREFIX - 1 + idlen + 1;
	size_t b64len = len - (size_t)(b64 - s), raw = b64len / 4 * 3 + 3, got = 0;
	unsigned char *box = malloc(raw);
	buf aad = BUF_INIT;
	aad_of(f, id, &aad);
	buf_reset(out);
	int rc = !box || aad.oom ? -CAIRN_ENOMEM : 0;
	const char *end;
	if (!rc && (sodium_base642bin(box, raw, b64, b64len, NULL, &got, &end, B64) != 0 ||
	            end != b64 + b64len || got < NONCE_BYTES + TAG_BYTES))
		rc = -CAIRN_EINVAL;
	size_t plain = got - NONCE_BYTES - TAG_BYTES;
	if (!rc && buf_reserve(out, plain + 1) < 0)
		rc = -CAIRN_ENOMEM;
	if (!rc && crypto_aead_xchacha20poly1305_ietf_decrypt(
	               (unsigned char *)out->data, NULL, NULL, box + NONCE_BYTES, got - NONCE_BYTES,
	               (const unsigned char *)aad.data, aad.len, box, k->k[ki].key) != 0)
		rc = -CAIRN_EINVAL;
	if (!rc && memchr(out->data, '\0', plain))
		rc = -CAIRN_EINVAL; /* not text: no value of ours */
	if (!rc) {
		out->len = plain;
		out->data[plain] = '\0';
	}
	free(box);
	buf_free(&aad);
	return rc;
}

void seal_explain(int rc, const char *id, buf *out)
{
	if (rc == SEAL_NOKEY)
		buf_printf(
		    out,
		    "it is encrypted with key \"%s\", which is not among the configured keys "
		    "(CAIRN_ENCRYPTION_KEYS)",
		    id);
	else if (rc == -CAIRN_ENOMEM)
		buf_puts(out, "out of memory decrypting it");
	else if (id && *id)
		buf_printf(
		    out,
		    "it does not decrypt with key \"%s\": it was altered, corrupted or moved "
		    "from another field",
		    id);
	else
		buf_puts(out, "it starts with \"" SEAL_PREFIX "\" but is no encrypted value");
}

/* Why a field is unreadable, by cause: one table for every output. */
static const struct {
	const char *cause, *format;
} UNREADABLE[] = {
    {"missing_key",
     "it is encrypted with key \"%s\", which is not configured (CAIRN_ENCRYPTION_KEYS)"},
    {"not_authentic",
     "it does not authenticate under key \"%s\", which is configured: the key's bytes "
     "differ from the ones it was written with, or the stored value was altered"},
};

const char *cairn_unreadable_why(unsigned locked, unsigned unauthentic, const char *locked_key,
                                 const char *unauthentic_key, unsigned bit, char *out, size_t n,
                                 const char **key)
{
	if (n)
		out[0] = '\0';
	if (!(locked & bit))
		return NULL;
	int forged = (unauthentic & bit) != 0;
	const char *id = forged ? unauthentic_key : locked_key;
	if (key)
		*key = id;
	if (n)
		snprintf(out, n, UNREADABLE[forged].format, id);
	return UNREADABLE[forged].cause;
}
