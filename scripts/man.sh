#!/bin/sh
# man.sh - writes a man page on stdout, generated from what the code itself
# says, so the pages cannot drift from it:
#
#   sh scripts/man.sh cli BIN/cairn           cairn(1): `cairn --help` and
#                                             every command's --help
#   sh scripts/man.sh worker BIN/cairn-worker cairn-worker(8): its --help, one
#                                             entry per row of its settings table
#   sh scripts/man.sh api include/cairn.h     cairn(3): the header's comments
#                                             and declarations, by section
set -eu

# Text as roff: backslashes, leading dots and quotes, and hyphens escaped.
esc() {
	sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/" -e 's/-/\\-/g'
}

# A block shown as it is, in the page's fixed-width font.
verbatim() {
	printf '.nf\n'
	esc
	printf '.fi\n'
}

header() { # NAME SECTION VERSION TITLE
	printf '.TH %s %s "" "cairn %s" "%s"\n' "$1" "$2" "$3" "$4"
	printf '.nh\n'
}

cli() {
	bin=$1
	version=$("$bin" --version | sed 's/^cairn //')
	header CAIRN 1 "$version" "cairn manual"
	printf '.SH NAME\ncairn \\- durable workflows on PostgreSQL: migrate the schema, enqueue runs, signal, inspect\n'
	printf '.SH SYNOPSIS\n.B cairn\n[\\-\\-version] [\\-\\-help]\n.I COMMAND\n.RI [ ARGS ]\n'
	printf '.SH DESCRIPTION\n'
	"$bin" --help | sed 1,2d | verbatim
	printf '.SH COMMANDS\n'
	# The commands are the indented names under "Commands:" in --help.
	for cmd in $("$bin" --help | sed -n '/Commands:$/,/^$/s/^  \([a-z-]*\) .*/\1/p'); do
		printf '.SS "cairn %s"\n' "$cmd"
		"$bin" "$cmd" --help | verbatim
	done
	printf '.SH FILES\n.TP\n.I share/bash\\-completion/completions/cairn\nbash completion, as\n.B cairn completion bash\nprints it\n.TP\n.I share/zsh/vendor\\-completions/_cairn\nzsh completion, as\n.B cairn completion zsh\nprints it\n.PP\nBoth under the installation prefix\n.RI ( /usr\nfor the package).\n'
	printf '.SH SEE ALSO\n.BR cairn\\-worker (8),\n.BR cairn (3)\n'
}

worker() {
	bin=$1
	version=$("$bin" --version | sed 's/^cairn-worker \([^ ]*\).*/\1/')
	help=$("$bin" --help)
	header CAIRN-WORKER 8 "$version" "cairn manual"
	printf '.SH NAME\ncairn\\-worker \\- the cairn worker daemon: leases shards and executes workflow runs\n'
	printf '.SH SYNOPSIS\n.B cairn\\-worker\n[\\-\\-help] [\\-\\-version] [\\-\\-check\\-config] [\\-\\-NAME VALUE ...]\n'
	printf '.SH DESCRIPTION\n'
	printf '%s\n' "$help" | sed -n '3,/^Settings come from/p' | sed '$d' | verbatim
	printf '.SH SETTINGS\n'
	printf '%s\n' "$help" | sed -n '/^Settings come from/,/:$/p' | esc
	# One row per setting: "  NAME  --flag  meaning (default D)". The flag
	# opens the row's text, not its tag: a long name and flag together
	# (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) are wider than 80 columns.
	printf '%s\n' "$help" | sed -n 's/^  \([A-Z][A-Z_]*\)  *\(--[a-z-]*\)  *\(.*\)$/\1\t\2\t\3/p' |
		while IFS='	' read -r name flag text; do
			printf '.TP\n.B %s\n.RB ( %s ):\n%s\n' "$name" "$(printf '%s' "$flag" | esc)" \
				"$(printf '%s\n' "$text" | esc)"
		done
	printf '.SH SIGNALS\nSIGTERM or SIGINT drains: the worker stops claiming, lets in\\-flight runs reach a durable point within\n.BR CAIRN_SHUTDOWN_TIMEOUT ,\nreleases its shards and exits 0; a second signal exits at once (1).\n'
	printf '.SH SYSTEMD\nThe unit\n.I cairn\\-worker.service\nruns it with\n.BR Type=notify :\nit sends READY=1 once\n.I /readyz\nwould answer 200, WATCHDOG=1 at half of\n.B WatchdogSec=\nwhile its loops are alive, and STOPPING=1 when it drains.\nIts settings are read from the environment file\n.IR /etc/cairn/cairn\\-worker.env \n(under the installation prefix for a\n.B make install\nelsewhere than /usr).\n'
	printf '.SH EXIT STATUS\n0 after a clean drain (also when the shutdown timeout cut a step off), 1 on a runtime error or a second signal, 2 for a bad setting.\n'
	printf '.SH SEE ALSO\n.BR cairn (1),\n.BR cairn (3),\n.BR systemd.service (5)\n'
}

api() {
	h=$1
	version=$(sed -n 's/^#define CAIRN_VERSION "\(.*\)"/\1/p' "$h")
	header CAIRN 3 "$version" "cairn manual"
	printf '.SH NAME\ncairn \\- the C API of cairn, a durable workflow engine on PostgreSQL\n'
	printf '.SH SYNOPSIS\n.nf\n.B #include <cairn.h>\n.PP\ncc app.c $(pkg\\-config \\-\\-cflags \\-\\-libs cairn)\ncc app.c $(pkg\\-config \\-\\-cflags \\-\\-libs cairn\\-static)\n.fi\n'
	printf '.SH DESCRIPTION\n'
	# The header's opening comment, as it is written.
	sed -n '2,/^ \*\//p' "$h" | sed -e '$d' -e 's/^ \* \{0,1\}//' | verbatim
	# Every declaration with its comment, one section of the page per
	# section of the header ("/* ---- client */" is CLIENT); what precedes
	# the first is STATUS CODES.
	printf '.SH "STATUS CODES"\n'
	sed -n '/^#define CAIRN_VERSION/,/^#ifdef __cplusplus$/p' "$h" | sed '$d' | esc |
		awk '/^\/\* \\-\\-\\-/ { name = $NF == "*/" ? $(NF - 1) : $NF
		                         if (open) print ".fi"
		                         printf ".SH %s\n.nf\n", toupper(name); open = 1; next }
		     !open && !started { print ".nf"; started = 1 }
		     { print }
		     END { print ".fi" }'
	printf '.SH "SEE ALSO"\n.BR cairn (1),\n.BR cairn\\-worker (8)\n'
}

case "${1:-}" in
cli | worker | api) "$1" "$2" ;;
*)
	echo "usage: sh scripts/man.sh cli|worker|api FILE" >&2
	exit 2
	;;
esac
