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
	e->row = (cJSON *)o;
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

/* Parses text into a JSON array; NULL or "" is an empty one. */
static int parse_array(const char *text, cJSON **out, const char *what, buf *err)
{
	*out = text && *text ? cJSON_Parse(text) : cJSON_CreateArray();
	if (cJSON_IsArray(*out))
		return 0;
	cJSON_Delete(*out);
	*out = NULL;
	if (!text || !*text)
		return -CAIRN_ENOMEM;
	buf_printf(err, "%s is not a JSON array", what);
	return -CAIRN_EINVAL;
}

int journal_parse(const char *text, journal *j, buf *err)
{
	memset(j, 0, sizeof *j);
	int rc = parse_array(text, &j->tree, "the journal", err);
	if (rc)
		return rc;
	int n = cJSON_GetArraySize(j->tree);
	j->e = calloc((size_t)n + 1, sizeof *j->e);
	if (!j->e) {
		journal_free(j);
		return -CAIRN_ENOMEM;
	}
	const cJSON *it;
	cJSON_ArrayForEach(it, j->tree)
	{
		buf why = BUF_INIT;
		if (parse_entry(it, &j->e[j->n], &why) < 0) {
			buf_printf(err, "journal row %d: %s", j->n + 1, buf_str(&why));
			buf_free(&why);
			journal_free(j);
			return -CAIRN_EINVAL;
		}
		j->n++;
	}
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

/* Opens the value *v of row's field name (read from a field f) and puts its
 * plaintext in the tree in its place; what names the value for err. */
static int unseal_field(cJSON *row, const char *name, const char **v, const seal_keys *k,
                        seal_field f, const char *what, buf *err, char *key)
{
	buf plain = BUF_INIT;
	int rc = *v ? seal_open(k, f, *v, &plain, key) : 1;
	cJSON *item = rc == 0 ? cJSON_CreateString(buf_str(&plain)) : NULL;
	buf_free(&plain);
	if (rc == 0 && (!item || !cJSON_ReplaceItemInObjectCaseSensitive(row, name, item))) {
		cJSON_Delete(item);
		rc = -CAIRN_ENOMEM;
	}
	if (rc == 0)
		*v = item->valuestring;
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
		int rc =
		    unseal_field(e->row, "output", &e->output, k, SEAL_STEP_OUTPUT, what, err, key);
		if (!rc)
			rc = unseal_field(e->row, "error", &e->error, k, SEAL_STEP_ERROR, what, err,
			                  key);
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
		int rc = unseal_field(s->row, "payload", &s->payload, k, SEAL_SIGNAL_PAYLOAD, what,
		                      err, key);
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
	cJSON_Delete(j->tree);
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
	int rc = parse_array(text, &b->tree, "the signal list", err);
	if (rc)
		return rc;
	int n = cJSON_GetArraySize(b->tree);
	b->e = calloc((size_t)n + 1, sizeof *b->e);
	if (!b->e) {
		signals_free(b);
		return -CAIRN_ENOMEM;
	}
	const cJSON *it;
	cJSON_ArrayForEach(it, b->tree)
	{
		signal_entry *s = &b->e[b->n];
		buf why = BUF_INIT;
		s->name = str_field(it, "name");
		s->payload = str_field(it, "payload");
		s->row = (cJSON *)it;
		if (int_field(it, "id", 1, INT64_MAX, 0, &s->id, &why) < 0 || !s->name ||
		    !s->payload) {
			buf_printf(err, "signal row %d: %s", b->n + 1,
			           why.len ? buf_str(&why) : "name or payload is missing");
			buf_free(&why);
			signals_free(b);
			return -CAIRN_EINVAL;
		}
		b->n++;
	}
	return 0;
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
	cJSON_Delete(b->tree);
	free(b->e);
	free(b->by_name);
	memset(b, 0, sizeof *b);
}
