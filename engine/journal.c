/*
 * journal.c - parses and indexes a claimed run's journal and signals (see
 * journal.h). Every field is checked: integers are decimal text in range,
 * names and states are known, a seq appears once.
 */
#include "journal.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cairn.h"
#include "parse.h"

static const cJSON *field(const cJSON *o, const char *k)
{
	return cJSON_GetObjectItemCaseSensitive(o, k);
}

/* An integer field rendered as text; JSON null (or absent) gives 0 when nullable. */
static int int_field(const cJSON *o, const char *k, int64_t min, int64_t max, int nullable,
                     int64_t *out, buf *err)
{
	const cJSON *v = field(o, k);
	char perr[PARSE_ERR_MAX];
	if ((!v || cJSON_IsNull(v)) && nullable) {
		*out = 0;
		return 0;
	}
	if (!cJSON_IsString(v) || parse_int(v->valuestring, min, max, out, perr) < 0) {
		buf_printf(err, "%s is %s", k,
		           cJSON_IsString(v) ? perr : "missing or not an integer text");
		return -CAIRN_EINVAL;
	}
	return 0;
}

static const char *str_field(const cJSON *o, const char *k)
{
	const cJSON *v = field(o, k);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int parse_entry(const cJSON *o, journal_entry *e, buf *err)
{
	int64_t v;
	if (!cJSON_IsObject(o)) {
		buf_puts(err, "not an object");
		return -CAIRN_EINVAL;
	}
	if (int_field(o, "seq", 0, INT_MAX, 0, &v, err))
		return -CAIRN_EINVAL;
	e->seq = (int)v;
	e->name = str_field(o, "name");
	if (!e->name || !*e->name) {
		buf_puts(err, "name is missing");
		return -CAIRN_EINVAL;
	}
	const char *kind = str_field(o, "kind"), *status = str_field(o, "status");
	if (step_kind_parse(kind, &e->kind) < 0) {
		buf_printf(err, "unknown kind \"%s\"", kind ? kind : "(none)");
		return -CAIRN_EINVAL;
	}
	if (step_status_parse(status, &e->status) < 0) {
		buf_printf(err, "unknown status \"%s\"", status ? status : "(none)");
		return -CAIRN_EINVAL;
	}
	const cJSON *out = field(o, "output");
	if (out && !cJSON_IsNull(out) && !cJSON_IsString(out)) {
		buf_puts(err, "output is not JSON text in a string");
		return -CAIRN_EINVAL;
	}
	e->output = cJSON_IsString(out) ? out->valuestring : NULL;
	e->error = str_field(o, "error");
	if (int_field(o, "attempts", 0, INT_MAX, 0, &v, err))
		return -CAIRN_EINVAL;
	e->attempts = (int)v;
	if (int_field(o, "wake_at", INT64_MIN, INT64_MAX, 1, &e->wake_ms, err) ||
	    int_field(o, "started_at", INT64_MIN, INT64_MAX, 1, &e->started_ms, err) ||
	    int_field(o, "size", 0, INT64_MAX, 1, &e->db_bytes, err))
		return -CAIRN_EINVAL;
	return 0;
}

static int by_seq(const void *a, const void *b)
{
	int x = ((const journal_entry *)a)->seq, y = ((const journal_entry *)b)->seq;
	return (x > y) - (x < y);
}

/* ------------------------------------------------------------- strings */

struct jstrings {
	jstrings *next;
	size_t used, cap;
	char data[];
};

const char *jstrings_dup(jstrings **b, const char *s)
{
	if (!s)
		return NULL;
	size_t n = strlen(s) + 1;
	jstrings *h = *b;
	if (!h || h->cap - h->used < n) {
		/* Blocks double from 1 kB: a small journal (or a cached one)
		 * holds little more than its strings. */
		size_t cap = h ? h->cap * 2 : 1024;
		cap = cap > JSTRINGS_BLOCK ? JSTRINGS_BLOCK : cap;
		cap = n > cap ? n : cap;
		jstrings *g = malloc(sizeof *g + cap);
		if (!g)
			return NULL;
		*g = (jstrings){.cap = cap};
		/* A block for one large string goes behind the one being
		 * filled, which keeps taking the small ones. */
		if (h && n > JSTRINGS_BLOCK) {
			g->next = h->next;
			h->next = g;
		} else {
			g->next = h;
			*b = g;
		}
		h = g;
	}
	char *d = h->data + h->used;
	memcpy(d, s, n);
	h->used += n;
	return d;
}

size_t jstrings_bytes(const jstrings *b)
{
	size_t n = 0;
	for (; b; b = b->next)
		n += sizeof *b + b->cap;
	return n;
}

void jstrings_free(jstrings *b)
{
	while (b) {
		jstrings *next = b->next;
		free(b);
		b = next;
	}
}

/* ---------------------------------------------------------------- rows */

/* The elements of a JSON array's text, parsed one at a time (the array is
 * never one tree). */
typedef struct rows {
	const char *p, *end; /* end: the text's NUL */
	int started, done;
} rows;

static const char *skip_ws(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	return p;
}

/* The next element into *row (the caller deletes it), NULL after the last:
 * 0, or -CAIRN_EINVAL when the text is not a JSON array ("what is not a
 * JSON array" in err). NULL or "" is an empty array. */
static int rows_next(rows *r, cJSON **row, const char *what, buf *err)
{
	*row = NULL;
	if (!r->p || r->done)
		return 0;
	const char *p = skip_ws(r->p);
	if (!r->started) {
		if (!*p) {
			r->done = 1;
			return 0;
		}
		if (*p != '[')
			goto bad;
		r->started = 1;
		p = skip_ws(p + 1);
		if (*p == ']') {
			r->done = 1;
			return 0;
		}
	}
	/* With its length: cJSON_ParseWithOpts measures the rest of the
	 * text for each element, which made a journal quadratic. */
	if (!r->end)
		r->end = p + strlen(p);
	const char *end = NULL;
	cJSON *v = cJSON_ParseWithLengthOpts(p, (size_t)(r->end - p) + 1, &end, 0);
	if (!v)
		goto bad;
	p = skip_ws(end);
	if (*p == ']' && !*skip_ws(p + 1)) {
		r->done = 1;
	} else if (*p == ',') {
		p++;
	} else {
		cJSON_Delete(v);
		goto bad;
	}
	r->p = p;
	*row = v;
	return 0;
bad:
	buf_printf(err, "%s is not a JSON array", what);
	return -CAIRN_EINVAL;
}

/* Room for one more element of size each in *e (*cap of them). */
static int grow(void **e, int n, int *cap, size_t each)
{
	if (n < *cap)
		return 0;
	int c = *cap ? *cap * 2 : 64;
	void *g = realloc(*e, (size_t)c * each);
	if (!g)
		return -CAIRN_ENOMEM;
	*e = g;
	*cap = c;
	return 0;
}

/* The strings of e, copied into strs: 0 or -CAIRN_ENOMEM. */
static int keep_entry_strings(jstrings **strs, journal_entry *e)
{
	const char *out = e->output, *er = e->error;
	e->name = jstrings_dup(strs, e->name);
	e->output = jstrings_dup(strs, out);
	e->error = jstrings_dup(strs, er);
	return !e->name || (out && !e->output) || (er && !e->error) ? -CAIRN_ENOMEM : 0;
}

int journal_parse(const char *text, journal *j, buf *err)
{
	memset(j, 0, sizeof *j);
	rows r = {.p = text};
	cJSON *row;
	int rc;
	while (!(rc = rows_next(&r, &row, "the journal", err)) && row) {
		buf why = BUF_INIT;
		if ((rc = grow((void **)&j->e, j->n, &j->cap, sizeof *j->e)) == 0) {
			journal_entry *e = &j->e[j->n];
			*e = (journal_entry){0};
			if (parse_entry(row, e, &why) < 0) {
				buf_printf(err, "journal row %d: %s", j->n + 1, buf_str(&why));
				rc = -CAIRN_EINVAL;
			} else {
				rc = keep_entry_strings(&j->strs, e);
			}
		}
		cJSON_Delete(row);
		buf_free(&why);
		if (rc)
			break;
		j->n++;
	}
	if (rc) {
		journal_free(j);
		return rc;
	}
	if (j->n)
		qsort(j->e, (size_t)j->n, sizeof *j->e, by_seq);
	for (int i = 1; i < j->n; i++)
		if (j->e[i].seq == j->e[i - 1].seq) {
			buf_printf(err, "journal row with seq %d: the seq appears twice",
			           j->e[i].seq);
			journal_free(j);
			return -CAIRN_EINVAL;
		}
	return 0;
}

/* Opens the value *v (read from a field f) and puts its plaintext in
 * strs in its place; what names the value for err. */
static int unseal_field(jstrings **strs, const char **v, const seal_keys *k, seal_field f,
                        const char *what, buf *err, char *key)
{
	buf plain = BUF_INIT;
	int rc = *v ? seal_open(k, f, *v, &plain, key) : 1;
	if (rc == 0) {
		const char *d = jstrings_dup(strs, buf_str(&plain));
		if (d && !plain.oom)
			*v = d;
		else
			rc = -CAIRN_ENOMEM;
	}
	buf_free(&plain);
	if (rc > 0)
		return 0;
	if (rc < 0) {
		buf_printf(err, "%s: ", what);
		seal_explain(rc, key, err);
	}
	return rc;
}

int journal_unseal(journal *j, const seal_keys *k, buf *err, char *key)
{
	for (int i = 0; i < j->n; i++) {
		journal_entry *e = &j->e[i];
		char what[64];
		snprintf(what, sizeof what, "journal row with seq %d", e->seq);
		int rc = unseal_field(&j->strs, &e->output, k, SEAL_STEP_OUTPUT, what, err, key);
		if (!rc)
			rc = unseal_field(&j->strs, &e->error, k, SEAL_STEP_ERROR, what, err, key);
		if (rc)
			return rc;
	}
	return 0;
}

int signals_unseal(signal_box *b, const seal_keys *k, buf *err, char *key)
{
	for (int i = 0; i < b->n; i++) {
		signal_entry *s = &b->e[i];
		char what[64];
		snprintf(what, sizeof what, "signal %" PRId64, s->id);
		int rc =
		    unseal_field(&b->strs, &s->payload, k, SEAL_SIGNAL_PAYLOAD, what, err, key);
		if (rc)
			return rc;
	}
	return 0;
}

journal_entry *journal_find(journal *j, int seq)
{
	journal_entry key = {.seq = seq};
	return j->n ? bsearch(&key, j->e, (size_t)j->n, sizeof *j->e, by_seq) : NULL;
}

const journal_entry *journal_at(const journal *j, int seq)
{
	return journal_find((journal *)j, seq);
}

void journal_free(journal *j)
{
	for (int i = 0; i < j->n; i++)
		cJSON_Delete(j->e[i].value);
	jstrings_free(j->strs);
	free(j->e);
	memset(j, 0, sizeof *j);
}

size_t journal_value_bytes(const cJSON *v)
{
	size_t n = 0;
	for (; v; v = v->next) {
		n += sizeof *v + (v->string ? strlen(v->string) + 1 : 0) +
		     (v->valuestring ? strlen(v->valuestring) + 1 : 0);
		n += journal_value_bytes(v->child);
	}
	return n;
}

int journal_value(journal_entry *e, const cJSON **out, size_t *added, buf *err)
{
	*added = 0;
	if (!e->value) {
		/* A value sealed before cairn refused \u0000 (PostgreSQL never saw
		 * it) would be cut short where cJSON reads it. */
		char why[PARSE_ERR_MAX];
		const char *text = e->output ? e->output : "null";
		if (json_check_text("a journaled value", text, strlen(text), why) < 0) {
			buf_puts(err, why);
			return -CAIRN_EINVAL;
		}
		if (!(e->value = cJSON_Parse(text))) {
			buf_puts(err, "a journaled value is not valid JSON");
			return -CAIRN_EINVAL;
		}
		*added = journal_value_bytes(e->value);
	}
	*out = e->value;
	return 0;
}

int signals_parse(const char *text, signal_box *b, buf *err)
{
	memset(b, 0, sizeof *b);
	rows r = {.p = text};
	cJSON *row;
	int rc;
	while (!(rc = rows_next(&r, &row, "the signal list", err)) && row) {
		buf why = BUF_INIT;
		if ((rc = grow((void **)&b->e, b->n, &b->cap, sizeof *b->e)) == 0) {
			signal_entry *s = &b->e[b->n];
			*s = (signal_entry){.name = str_field(row, "name"),
			                    .payload = str_field(row, "payload")};
			if (int_field(row, "id", 1, INT64_MAX, 0, &s->id, &why) < 0 || !s->name ||
			    !s->payload) {
				buf_printf(err, "signal row %d: %s", b->n + 1,
				           why.len ? buf_str(&why) : "name or payload is missing");
				rc = -CAIRN_EINVAL;
			} else if (!(s->name = jstrings_dup(&b->strs, s->name)) ||
			           !(s->payload = jstrings_dup(&b->strs, s->payload))) {
				rc = -CAIRN_ENOMEM;
			}
		}
		cJSON_Delete(row);
		buf_free(&why);
		if (rc)
			break;
		b->n++;
	}
	if (rc)
		signals_free(b);
	return rc;
}

static int by_name_id(const void *a, const void *b)
{
	const signal_entry *x = *(signal_entry *const *)a, *y = *(signal_entry *const *)b;
	int c = strcmp(x->name, y->name);
	return c ? c : (x->id > y->id) - (x->id < y->id);
}

/* Sorts the box's signals by name, then id, once. */
static int index_names(signal_box *b)
{
	if (b->by_name || !b->n)
		return 0;
	b->by_name = malloc((size_t)b->n * sizeof *b->by_name);
	if (!b->by_name)
		return -CAIRN_ENOMEM;
	for (int i = 0; i < b->n; i++)
		b->by_name[i] = &b->e[i];
	qsort(b->by_name, (size_t)b->n, sizeof *b->by_name, by_name_id);
	return 0;
}

signal_entry *signals_find(signal_box *b, const char *name, int *oom)
{
	*oom = 0;
	if (index_names(b) < 0) {
		*oom = 1;
		return NULL;
	}
	int lo = 0, hi = b->n; /* the first of the name: lower bound */
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		if (strcmp(b->by_name[mid]->name, name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < b->n && strcmp(b->by_name[lo]->name, name) == 0; lo++)
		if (!b->by_name[lo]->taken)
			return b->by_name[lo];
	return NULL;
}

signal_entry *signals_take(signal_box *b, const char *name)
{
	int oom;
	signal_entry *s = signals_find(b, name, &oom);
	if (s)
		s->taken = 1;
	return s;
}

void signals_free(signal_box *b)
{
	jstrings_free(b->strs);
	free(b->e);
	free(b->by_name);
	memset(b, 0, sizeof *b);
}
