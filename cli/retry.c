/*
 * retry.c - `cairn retry`: re-drives a failed or cancelled run with a fresh
 * attempt count; its completed steps replay from the journal.
 */
#include <stdio.h>

#include "cairn.h"
#include "client.h"
#include "commands.h"
#include "state.h"

/* A retried run is pending again: the statement sets it so. */
static int retry_outcome(cairn_client *c, int64_t id, char *status)
{
	int rc = cairn_retry(c, id);
	if (!rc)
		snprintf(status, CLIENT_OUTCOME_MAX, "%s", run_status_name(RUN_PENDING));
	return rc;
}

int cmd_retry(int argc, char **argv)
{
	return cli_run_action(
	    argc, argv, "retry",
	    "usage: cairn retry RUN [--json]\n\n"
	    "Re-drives a failed or cancelled RUN with a fresh attempt count (status\n"
	    "pending). Its completed steps are replayed from the journal, not run\n"
	    "again.\n\n" CLI_RUN_ACTION_HELP,
	    retry_outcome, "re-driven");
}
