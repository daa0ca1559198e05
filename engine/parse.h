/*
 * parse.h - pure parsers and validators for everything that comes from
 * outside: durations, sizes, timestamps, integers, names, JSON text.
 * Each returns 0 on success or -1 and writes a message naming the value and
 * what is accepted into err (at least PARSE_ERR_MAX bytes).
 */
#ifndef CAIRN_PARSE_H
#define CAIRN_PARSE_H
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "buf.h"

#define PARSE_ERR_MAX  256
#define NAME_MAX_BYTES 128
#define KEY_MAX_BYTES  512

/* "500ms", "2s", "1m", "1h", "7d", "1m30s"; a bare 0 is allowed. */
int parse_duration_ms(const char *s, int64_t *out, char *err);
/* "1048576", "512KiB", "1MiB", "1GiB" (also KB/MB/GB as powers of 1000). */
int parse_size_bytes(const char *s, size_t *out, char *err);
/* RFC 3339: 2026-12-24T10:00:00Z, optional fraction, Z or +HH:MM. */
int parse_timestamp_ms(const char *s, int64_t *out, char *err);
/* A rate "N/PERIOD": N from 1 to 1000000 starts per PERIOD, a unit alone
 * (s, m, h, d: one of it) or a duration (500ms, 10s); the period from 1 ms
 * to 1 day. */
int parse_rate(const char *s, int *n, int64_t *period_ms, char *err);
/* A decimal integer in [min, max]. */
int parse_int(const char *s, int64_t min, int64_t max, int64_t *out, char *err);
/* Workflow, signal, group and step names: 1..128 bytes of [A-Za-z0-9_.:-]. */
int parse_check_name(const char *what, const char *s, char *err);
/* Run keys: 1..512 bytes of valid UTF-8 without control characters. */
int parse_check_key(const char *s, char *err);
/* "12,13,14": at most cap decimal ids (1 to 18 digits each) into ids; how
 * many, or -1 for anything else (empty, an empty item, a sign, a space). */
int parse_id_list(const char *s, int64_t *ids, int cap);

/* The deepest nesting of arrays and objects in any JSON value cairn accepts
 * (inputs, payloads, step results, outputs): what the client accepts, a
 * worker can always load, with room for the journal's own wrapping. */
#define JSON_MAX_DEPTH 64

/*
 * What cairn accepts as the characters of JSON text, from wherever it comes
 * (the C client, the CLI, the HTTP API, signal links, the console, and
 * what a workflow returns): valid UTF-8 (RFC 3629, as PostgreSQL checks
 * it: no overlong form, no surrogate, nothing past U+10FFFF), no NUL byte,
 * no control character unescaped in a string, and no \u0000 escape. Each
 * is refused because PostgreSQL's jsonb refuses it, and with encryption on
 * PostgreSQL never sees the text: a value it would refuse must not be
 * stored sealed instead; and cJSON ends a string at \u0000, which would
 * cut the value short. s holds n bytes. 0, or -CAIRN_EINVAL with a message
 * naming what, the byte and where in the value ("in $.items[2].name").
 */
int json_check_text(const char *what, const char *s, size_t n, char *err);
/* JSON text of at most max bytes, of characters json_check_text accepts,
 * at most JSON_MAX_DEPTH levels deep; on a syntax error names the byte
 * offset. The _n form takes text of n bytes that may hold a NUL byte (an
 * HTTP body), with s[n] == '\0'. */
int parse_check_json(const char *what, const char *s, size_t max, char *err);
int parse_check_json_n(const char *what, const char *s, size_t n, size_t max, char *err);
/* The deepest nesting of arrays and objects in JSON text (0 for a scalar);
 * strings are skipped, the text is not otherwise checked. */
int json_depth(const char *s);
/* Whether s is valid UTF-8 (RFC 3629, as json_check_text). */
int utf8_valid(const char *s);
/* Appends s to out with every byte that is not part of a valid UTF-8
 * sequence (a character cut in half, say) replaced by U+FFFD. */
void utf8_clean(const char *s, buf *out);
/* HOST:PORT ([v6]:PORT; :PORT or 0.0.0.0 or [::] for every interface;
 * localhost) into sa: 0, or -1 (the caller names the setting).
 * *wildcard is set when it listens on every interface. */
int parse_listen_addr(const char *a, struct sockaddr_storage *sa, socklen_t *len, int *wildcard);
/* 1 when sa is a loopback address (127.0.0.0/8, ::1). */
int parse_addr_loopback(const struct sockaddr_storage *sa);

/* The longest host name parse_check_hosts takes. */
#define PARSE_HOST_MAX 253
/* Whether a request naming host in its Host header may be answered (the
 * DNS rebinding policy of the HTTP servers, see docs/security.md): 1 for an
 * IP literal (a.b.c.d or [IPv6]), localhost, or one of names (a
 * comma-separated list, compared without case), each with or without
 * :PORT; 0 for anything else. */
int parse_host_allowed(const char *host, const char *names);
/* names (what: the setting) is a comma-separated list of host names, each
 * 1 to PARSE_HOST_MAX letters, digits, '-', '_' and '.', without a port;
 * "" is none. 0, or -1 with err naming the setting and the bad name. */
int parse_check_hosts(const char *what, const char *names, char *err);
#endif
