/*
 * seal.h - payloads encrypted at rest (CAIRN_ENCRYPTION_KEYS): run inputs,
 * outputs and errors, step results and errors, signal payloads. A value is
 * sealed with libsodium's XChaCha20-Poly1305 under the current key (the first
 * one configured) and stored as
 *
 *     cairn:enc:KEYID:BASE64URL(nonce || ciphertext)
 *
 * (inside a JSON string in a jsonb column, bare in a text column), so a
 * stored value names its key: new writes use the current key, older values
 * open with whichever configured key they name, and `cairn reencrypt` moves
 * them to the current one. The additional data binds a value to its kind of
 * field, so a ciphertext moved into another column does not open. A value
 * without the prefix is plaintext (written with no keys, or through SQL) and
 * is read as it is. Pure but for the random nonce and the key file.
 *
 * Owns: the key ring, in memory from sodium_malloc (locked, zeroed when
 * freed).
 */
#ifndef CAIRN_SEAL_H
#define CAIRN_SEAL_H
#include <stddef.h>

#include "buf.h"
#include "cairn.h"

#define SEAL_PREFIX   "cairn:enc:"
#define SEAL_ID_MAX   CAIRN_KEY_ID_MAX /* a key id: 1 to 32 of A-Z a-z 0-9 _ - */
#define SEAL_KEYS_MAX 16
/* seal_open: the value names a key this ring does not have. */
#define SEAL_NOKEY (-CAIRN_ESCHEMA)

typedef struct seal_keys seal_keys;

/* The kinds of field a sealed value is bound to; the errors are text, the
 * others JSON. */
typedef enum seal_field {
	SEAL_RUN_INPUT,
	SEAL_RUN_OUTPUT,
	SEAL_RUN_ERROR,
	SEAL_STEP_OUTPUT,
	SEAL_STEP_ERROR,
	SEAL_SIGNAL_PAYLOAD,
	SEAL_EVENT_VALUE,
} seal_field;

/*
 * Parses keys: entries ID=BASE64 (32 bytes, standard or URL-safe base64)
 * separated by commas, spaces or newlines, '#' starting a comment to the end
 * of its line; the first is the current key. 0 with *out (NULL when text
 * holds no entry), -CAIRN_EINVAL with why naming the entry but never its
 * key, or -CAIRN_ENOMEM.
 */
int seal_keys_parse(const char *text, seal_keys **out, char *why, size_t n);
/* A key of 32 bytes in base64 (standard or URL-safe, padded or not;
 * spaces and newlines skipped), len bytes of b64: 0, or -1 (key zeroed).
 * Signal links' signing key is read the same way (link.h). */
int seal_key_decode(const char *b64, size_t len, unsigned char key[32]);
/* The keys of text (CAIRN_ENCRYPTION_KEYS), or of the file at path
 * (CAIRN_ENCRYPTION_KEYS_FILE), at most one of them set (NULL or ""): as
 * seal_keys_parse, err naming the variable. */
int seal_keys_load(const char *text, const char *path, seal_keys **out, buf *err);
/* seal_keys_load of the two variables of the environment. */
int seal_keys_from_env(seal_keys **out, buf *err);
void seal_keys_free(seal_keys *k);
/* How many keys; the id of key i (0 is the current one). */
int seal_keys_count(const seal_keys *k);
const char *seal_key_id(const seal_keys *k, int i);

/* Whether stored (as read from a field of this kind) is sealed; with id,
 * its key id is copied there (SEAL_ID_MAX + 1 bytes). */
int seal_is_sealed(seal_field f, const char *stored, char *id);
/* Appends value sealed under k's current key to out, or value itself when
 * k is NULL: 0 or -CAIRN_ENOMEM. */
int seal_value(const seal_keys *k, seal_field f, const char *value, buf *out);
/*
 * Opens stored into out (which it resets): 0; 1 when stored is plaintext
 * (out untouched: use stored); SEAL_NOKEY when k lacks the key it names;
 * -CAIRN_EINVAL when it is malformed or does not authenticate (altered, or
 * moved from another kind of field); -CAIRN_ENOMEM. id receives the key id
 * when there is one.
 */
int seal_open(const seal_keys *k, seal_field f, const char *stored, buf *out, char *id);
/* What seal_open's rc means, for a message: "it names key K, which is not
 * configured (CAIRN_ENCRYPTION_KEYS)" and the like. */
void seal_explain(int rc, const char *id, buf *out);
#endif
