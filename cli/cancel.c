/*
 * cancel.c - `cairn cancel`: cancels a run; one that has not started ends
 * cancelled at once, a started one at its next durable call.
 */
#include "cairn.h"
#include "client.h"
#include "commands.h"

int cmd_cancel(int argc, char **argv)
{
	return cli_run_action(
	    argc, argv, "cancel",
	    "usage: cairn cancel RUN [--json]\n\n"
	    "Cancels RUN. A run that has not started ends cancelled at once (status\n"
	    "cancelled); a started one ends cancelled at its next durable call, and\n"
	    "keeps its status until then.\n\n" CLI_RUN_ACTION_HELP,
	    client_cancel_outcome, "cancel requested");
}
