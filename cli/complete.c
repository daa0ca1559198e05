/*
 * complete.c - `cairn completion bash|zsh`: prints a shell's completion
 * script made from the command table (main.c's CLI_CMDS: each command's
 * name, summary, options and subcommands), the same table main dispatches on
 * and `cairn --help` lists, so the scripts cannot drift from the commands.
 * Only names are completed (commands, subcommands, options); after an option
 * that takes a value the shell's own completion (file names) applies. Owns
 * nothing; writes to stdout.
 */
#include <stdio.h>
#include <string.h>

#include "commands.h"

/* The command's options, space separated, "--" in front; with_arg selects
 * those that take a value (1), those that do not (0) or all (-1). */
static void print_opts(const cli_cmd *c, int with_arg)
{
	const char *sep = "";
	for (int k = 0; k < CLI_OPTS_MAX && c->opts[k].name; k++)
		if (with_arg < 0 || c->opts[k].has_arg == with_arg) {
			printf("%s--%s", sep, c->opts[k].name);
			sep = " ";
		}
}

static void print_subs(const cli_cmd *c)
{
	for (int k = 0; c->subs && c->subs[k]; k++)
		printf("%s%s", k ? " " : "", c->subs[k]);
}

static void bash(const cli_cmd *cmds, size_t n)
{
	printf("# bash completion for cairn, printed by `cairn completion bash` from the\n"
	       "# command table that `cairn --help` lists.\n"
	       "_cairn() {\n"
	       "\tlocal cur=${COMP_WORDS[COMP_CWORD]} prev= cmd= npos=0 i w\n"
	       "\t((COMP_CWORD > 1)) && prev=${COMP_WORDS[COMP_CWORD - 1]}\n"
	       "\t# The command: the first word that is not an option.\n"
	       "\tfor ((i = 1; i < COMP_CWORD; i++)); do\n"
	       "\t\t[[ ${COMP_WORDS[i]} == -* ]] || { cmd=${COMP_WORDS[i]}; break; }\n"
	       "\tdone\n"
	       "\tlocal opts= valued= subs=\n"
	       "\tcase $cmd in\n"
	       "\t\"\") opts=\"--help --version\" subs=\"");
	for (size_t i = 0; i < n; i++)
		printf("%s%s", i ? " " : "", cmds[i].name);
	printf("\" ;;\n");
	for (size_t i = 0; i < n; i++) {
		printf("\t%s)\n\t\topts=\"", cmds[i].name);
		print_opts(&cmds[i], -1);
		printf("\"\n\t\tvalued=\"");
		print_opts(&cmds[i], 1);
		printf("\"\n\t\tsubs=\"");
		print_subs(&cmds[i]);
		printf("\"\n\t\t;;\n");
	}
	printf(
	    "\t*) return 0 ;;\n"
	    "\tesac\n"
	    "\t# A value of an option (--dir DIR, --input @FILE): the shell's own.\n"
	    "\tif [[ -n $cmd && ( \" $valued \" == *\" $prev \"* || $prev == = || $cur == = ) ]]; "
	    "then\n"
	    "\t\tcompopt -o default 2>/dev/null\n"
	    "\t\tCOMPREPLY=()\n"
	    "\t\treturn 0\n"
	    "\tfi\n"
	    "\t# The command's arguments before the cursor: neither options nor\n"
	    "\t# their values.\n"
	    "\tfor ((i++; i < COMP_CWORD; i++)); do\n"
	    "\t\tw=${COMP_WORDS[i]}\n"
	    "\t\t[[ $w == -* || $w == = || ${COMP_WORDS[i - 1]} == = ]] && continue\n"
	    "\t\t[[ \" $valued \" == *\" ${COMP_WORDS[i - 1]} \"* ]] && continue\n"
	    "\t\t((npos++))\n"
	    "\tdone\n"
	    "\tif [[ $cur == -* ]]; then\n"
	    "\t\tCOMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
	    "\telif ((npos == 0)) && [[ -n $subs ]]; then\n"
	    "\t\tCOMPREPLY=($(compgen -W \"$subs\" -- \"$cur\"))\n"
	    "\telse\n"
	    "\t\tCOMPREPLY=()\n"
	    "\tfi\n"
	    "\treturn 0\n"
	    "}\n"
	    "complete -F _cairn cairn\n");
}

/* s inside single quotes, and with ':' escaped for _describe. */
static void zsh_quoted(const char *s, int colon)
{
	for (; *s; s++)
		if (*s == '\'')
			fputs("'\\''", stdout);
		else if (*s == ':' && colon)
			fputs("\\:", stdout);
		else
			putchar(*s);
}

static void zsh(const cli_cmd *cmds, size_t n)
{
	printf("#compdef cairn\n"
	       "# zsh completion for cairn, printed by `cairn completion zsh` from the\n"
	       "# command table that `cairn --help` lists.\n"
	       "_cairn() {\n"
	       "\tlocal -a commands\n"
	       "\tcommands=(\n");
	for (size_t i = 0; i < n; i++) {
		printf("\t\t'");
		zsh_quoted(cmds[i].name, 1);
		printf(":");
		zsh_quoted(cmds[i].summary, 1);
		printf("'\n");
	}
	printf("\t)\n"
	       "\tif ((CURRENT == 2)); then\n"
	       "\t\t_describe -t commands 'cairn command' commands\n"
	       "\t\treturn\n"
	       "\tfi\n"
	       "\tlocal cmd=${words[2]}\n"
	       "\tshift words\n"
	       "\t((CURRENT--))\n"
	       "\tcase $cmd in\n");
	for (size_t i = 0; i < n; i++) {
		const cli_cmd *c = &cmds[i];
		printf("\t%s)\n\t\t_arguments", c->name);
		for (int k = 0; k < CLI_OPTS_MAX && c->opts[k].name; k++)
			printf(c->opts[k].has_arg ? " '--%s=:value:_default'" : " '--%s'",
			       c->opts[k].name);
		if (c->subs) {
			printf(" '1:subcommand:(");
			print_subs(c);
			printf(")'");
		}
		printf(" '*:argument:_default'\n\t\t;;\n");
	}
	printf("\tesac\n"
	       "}\n"
	       "# Autoloaded from $fpath, or sourced.\n"
	       "if [[ ${funcstack[1]} == _cairn ]]; then\n"
	       "\t_cairn \"$@\"\n"
	       "else\n"
	       "\tcompdef _cairn cairn\n"
	       "fi\n");
}

/* Prints the completion script of shell ("bash" or "zsh") for the n
 * commands of cmds on stdout: 0, or -1 for a shell it does not know. */
static int print_script(const char *shell, const cli_cmd *cmds, size_t n)
{
	if (strcmp(shell, "bash") == 0)
		bash(cmds, n);
	else if (strcmp(shell, "zsh") == 0)
		zsh(cmds, n);
	else
		return -1;
	return 0;
}

const char *const COMPLETION_SUBS[] = {"bash", "zsh", NULL};
const cli_opt COMPLETION_OPTS[] = {{"help", 0}, {NULL, 0}};

int cmd_completion(int argc, char **argv)
{
	static const char help[] =
	    "usage: cairn completion bash|zsh\n"
	    "\n"
	    "Prints the completion script of the shell, made from the same tables of\n"
	    "commands and options that `cairn --help` and the commands read. The\n"
	    "package and `make install` put them where bash-completion and zsh find\n"
	    "them; for a shell of your own:\n"
	    "\n"
	    "  bash  source <(cairn completion bash)     (in ~/.bashrc)\n"
	    "  zsh   cairn completion zsh > ~/.zfunc/_cairn, with ~/.zfunc in $fpath\n"
	    "        before compinit\n"
	    "\n"
	    "  -h, --help        show this help\n";
	cli_args a = {COMPLETION_OPTS, {0}, {0}, 0};
	if (cli_parse("completion", argc, argv, &a))
		return EXIT_USAGE;
	if (cli_has(&a, "help"))
		return fputs(help, stdout), EXIT_OK;
	if (a.npos != 1 || print_script(a.pos[0], CLI_CMDS, CLI_NCMDS) < 0)
		return cli_error("completion", EXIT_USAGE, "%s%s%s: expected bash or zsh",
		                 a.npos ? "unknown shell \"" : "missing shell",
		                 a.npos ? a.pos[0] : "", a.npos ? "\"" : "");
	return EXIT_OK;
}
