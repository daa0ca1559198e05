/* ui.h - `cairn ui`, the operator console (ui.c). */
#ifndef CAIRN_UI_H
#define CAIRN_UI_H
#include "cli.h"

/* Its options (cli.h). */
extern const cli_opt UI_OPTS[];
/* The command: argv after "ui"; returns the exit code. */
int cmd_ui(int argc, char **argv);
#endif
