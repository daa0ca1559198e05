/*
 * state.c - the tables of names behind state.h's enums, generated from the
 * same X-macro lists, and the lookups both ways.
 */
#include "state.h"

#include <string.h>

#include "cairn.h"

#define STATE_NAME(id, name) [id] = name,
static const char *const RUN_STATUS_NAMES[] = {RUN_STATUS_MAP(STATE_NAME)};
static const char *const STEP_STATUS_NAMES[] = {STEP_STATUS_MAP(STATE_NAME)};
static const char *const STEP_KIND_NAMES[] = {STEP_KIND_MAP(STATE_NAME)};
static const char *const MSG_KIND_NAMES[] = {MSG_KIND_MAP(STATE_NAME)};
#undef STATE_NAME

#define COUNT(a) ((int)(sizeof a / sizeof a[0]))
_Static_assert(COUNT(RUN_STATUS_NAMES) == RUN_STATUS_COUNT, "a run status has no name");
_Static_assert(COUNT(STEP_STATUS_NAMES) == STEP_STATUS_COUNT, "a step status has no name");
_Static_assert(COUNT(STEP_KIND_NAMES) == STEP_KIND_COUNT, "a step kind has no name");
_Static_assert(COUNT(MSG_KIND_NAMES) == MSG_KIND_COUNT, "a message kind has no name");

static const char *name_of(const char *const *names, int n, int v)
{
	return v >= 0 && v < n ? names[v] : "?";
}

static int parse(const char *const *names, int n, const char *s, int *out)
{
	for (int i = 0; s && i < n; i++)
		if (strcmp(names[i], s) == 0) {
			*out = i;
			return 0;
		}
	return -CAIRN_EINVAL;
}

const char *run_status_name(run_status s)
{
	return name_of(RUN_STATUS_NAMES, RUN_STATUS_COUNT, (int)s);
}

const char *step_status_name(step_status s)
{
	return name_of(STEP_STATUS_NAMES, STEP_STATUS_COUNT, (int)s);
}

const char *step_kind_name(step_kind k)
{
	return name_of(STEP_KIND_NAMES, STEP_KIND_COUNT, (int)k);
}

const char *msg_kind_name(msg_kind k)
{
	return name_of(MSG_KIND_NAMES, MSG_KIND_COUNT, (int)k);
}

int run_status_parse(const char *s, run_status *out)
{
	int v, rc = parse(RUN_STATUS_NAMES, RUN_STATUS_COUNT, s, &v);
	if (!rc)
		*out = (run_status)v;
	return rc;
}

int step_status_parse(const char *s, step_status *out)
{
	int v, rc = parse(STEP_STATUS_NAMES, STEP_STATUS_COUNT, s, &v);
	if (!rc)
		*out = (step_status)v;
	return rc;
}

int step_kind_parse(const char *s, step_kind *out)
{
	int v, rc = parse(STEP_KIND_NAMES, STEP_KIND_COUNT, s, &v);
	if (!rc)
		*out = (step_kind)v;
	return rc;
}

int step_status_settled(step_status s)
{
	return s == STEP_COMPLETED || s == STEP_TIMED_OUT;
}

int run_status_finished(run_status s)
{
	return s == RUN_COMPLETED || s == RUN_FAILED || s == RUN_CANCELLED;
}
