#!/bin/sh
# run.sh BUILD_DIR - runs every Criterion suite in BUILD_DIR/tests against a
# private PostgreSQL (or $DATABASE_URL when set: each test then creates and
# drops its own database there), then every libFuzzer target built in
# build/fuzz for FUZZ_TEST_SECONDS (10) each. The private cluster is stopped
# and removed on exit, whether the tests pass, fail or are interrupted.
# ONLY="test_http fuzz_form" runs just the suites and fuzz targets it names
# (a quicker loop while working on one part; `make test` runs them all).
# When a suite that needs Citus (CITUS_SUITES) is selected and Citus is
# installed (scripts/citus.sh check), a coordinator and two worker nodes
# (tests/citus.sh) are started beside it, their URL in $CAIRN_CITUS_URL, and
# stopped on exit in the same way; without Citus those suites skip. The
# suites of CITUS_ENGINE_SUITES (the engine's that touch storage, the SQL
# and HTTP API's, the CLI's, the console's and the worker's endpoint's; set
# in the environment, it names others) then run a
# second time with CAIRN_TEST_CITUS=1, beside the single server's run:
# every database their tests make is one of that cluster, distributed by
# `cairn migrate --citus`
# (tests/support.c).
set -u
out=$1
top=$(cd "$(dirname "$0")/.." && pwd)
export CAIRN_BIN_DIR="$top/$out/bin"
export CAIRN_SQL_DIR="$top/sql/migrations"
export CAIRN_TEST_PLUGIN="$top/$out/tests/plugin_test.so"
export CAIRN_TEST_FLOWS="$top/$out/tests/plugin_flows.so"
export CAIRN_FUZZ_DIR="$top/tests/fuzz"
export CAIRN_SRC_DIR="$top"

pgdir=""
citusdir=""
cleanup() {
	[ -n "$pgdir" ] && sh "$top/tests/pg.sh" stop "$pgdir"
	[ -n "$citusdir" ] && sh "$top/tests/citus.sh" stop "$citusdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

selected() {
	[ -z "${ONLY:-}" ] && return 0
	case " $ONLY " in *" $1 "*) return 0 ;; esac
	return 1
}

if [ -z "${DATABASE_URL:-}" ]; then
	pgdir=$(mktemp -d /tmp/cairn-test-pg.XXXXXX)
	DATABASE_URL=$(sh "$top/tests/pg.sh" start "$pgdir") || exit 1
	export DATABASE_URL
	echo "tests: private PostgreSQL in $pgdir"
else
	echo "tests: using DATABASE_URL (each test makes its own database)"
fi

CITUS_SUITES="test_citus"
CITUS_ENGINE_SUITES=${CITUS_ENGINE_SUITES:-"test_exec test_journal test_cli test_wake test_lease test_worker test_api test_flow test_schedule test_children test_ui test_http"}
wants_citus=0
for s in $CITUS_SUITES $CITUS_ENGINE_SUITES; do
	selected "$s" && wants_citus=1
done
if [ $wants_citus -eq 1 ] && [ -z "${CAIRN_CITUS_URL:-}" ]; then
	if sh "$top/scripts/citus.sh" check 2>/dev/null; then
		citusdir=$(mktemp -d /tmp/cairn-test-citus.XXXXXX)
		CAIRN_CITUS_URL=$(CITUS_POOL=1 sh "$top/tests/citus.sh" start "$citusdir") || exit 1
		# Where the cluster is, for tests that make a database of their own
		# on it (tests/citus.sh createdb).
		CAIRN_CITUS_DIR=$citusdir
		CAIRN_CITUS_SH=$top/tests/citus.sh
		export CAIRN_CITUS_URL CAIRN_CITUS_DIR CAIRN_CITUS_SH
		echo "tests: private Citus cluster (a coordinator, two workers) in $citusdir"
	else
		echo "tests: Citus is not installed ($CITUS_SUITES skip): sh scripts/deps.sh --citus && sh scripts/citus.sh build"
	fi
fi

failures=$(mktemp)
tally=$(mktemp)
# run_suite PATH NAME [VAR=VALUE]: runs the suite at PATH, counted as NAME,
# with VAR=VALUE in its environment; its counts go to $tally as a line
# "PASSED FAILED EXIT" (also from the Citus pass, which runs in a
# subshell of its own).
run_suite() {
	t=$1
	name=$2
	log=$(mktemp)
	began=$(date +%s)
	env ${3:-} "$t" --jobs 2 --timeout 240 >"$log" 2>&1
	rc=$?
	cat "$log"
	echo "tests: $name took $(($(date +%s) - began)) s"
	# What failed is repeated at the end, where a log's tail shows it.
	grep -E '\[(FAIL|----)\]|CRASH|Assertion|ERROR: AddressSanitizer|runtime error:' "$log" |
		sed "s|^|$name: |" >>"$failures"
	line=$(grep 'Synthesis:' "$log" | tail -n 1)
	rm -f "$log"
	p=$(echo "$line" | sed -n 's/.*Passing: \([0-9]*\).*/\1/p')
	f=$(echo "$line" | sed -n 's/.*Failing: \([0-9]*\).*Crashing: \([0-9]*\).*/\1 \2/p')
	nf=0
	for n in ${f:-0}; do nf=$((nf + n)); done
	[ $rc -ne 0 ] && [ -z "$line" ] && nf=$((nf + 1))
	echo "${p:-0} $nf $rc" >>"$tally"
	[ $rc -ne 0 ] && echo "tests: $name FAILED (exit $rc)"
	return 0
}
# The Citus pass runs beside the single server's, in the background (most
# of a test is waiting for workers and databases), its output kept until
# the single server's is done.
citus_pid=""
if [ -n "${CAIRN_CITUS_URL:-}" ]; then
	citus_log=$(mktemp)
	(
		for name in $CITUS_ENGINE_SUITES; do
			selected "$name" || continue
			echo "tests: $name again, on the Citus cluster"
			run_suite "$top/$out/tests/$name" "$name-on-citus" CAIRN_TEST_CITUS=1
		done
	) >"$citus_log" 2>&1 &
	citus_pid=$!
fi
for t in "$top/$out"/tests/test_*; do
	[ -x "$t" ] || continue
	name=$(basename "$t")
	selected "$name" || continue
	run_suite "$t" "$name"
done
# Every libFuzzer target (make fuzz-build) for a short while, each a test:
# a harness that no longer builds, or an oracle that no longer holds, fails
# here and not only in a long `make fuzz`. They run while the Citus pass
# (the longer) ends.
secs=${FUZZ_TEST_SECONDS:-10}
for f in "$top"/build/fuzz/fuzz_*; do
	[ -x "$f" ] || continue
	name=$(basename "$f")
	selected "$name" || continue
	if FUZZ_SECONDS=$secs sh "$top/scripts/fuzz.sh" "$f"; then
		echo "1 0 0" >>"$tally"
	else
		echo "0 1 1" >>"$tally"
		echo "tests: $name FAILED (its input is in build/fuzz/artifacts)"
		echo "$name: found a problem in ${secs}s (see build/fuzz/$(echo "$name" | sed 's/^fuzz_//').log)" >>"$failures"
	fi
done
if [ -n "$citus_pid" ]; then
	wait "$citus_pid"
	cat "$citus_log"
	rm -f "$citus_log"
fi
passed=0
failed=0
status=0
while read -r p f rc; do
	passed=$((passed + p))
	failed=$((failed + f))
	[ "$rc" -ne 0 ] && status=1
done <"$tally"
rm -f "$tally"
if [ -s "$failures" ]; then
	echo "tests: what failed:"
	cat "$failures"
fi
rm -f "$failures"
echo "tests: $passed passed, $failed failed"
exit $status
