#!/bin/sh
# fuzz.sh TARGET... - `make fuzz`: runs each libFuzzer target for
# FUZZ_SECONDS (default 600) on a corpus in build/fuzz/corpus/NAME, seeded
# from tests/fuzz/seeds/NAME and tests/fuzz/regress/NAME, and prints its
# executions and coverage. A crash (or a leak, or a sanitizer report) stops
# the target; its input is kept in build/fuzz/artifacts/NAME/: copy it to
# tests/fuzz/regress/NAME/ so that `make test` replays it (test_fuzz.c).
# Exits 1 if any target found something.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
secs=${FUZZ_SECONDS:-600}
case "$secs" in
'' | *[!0-9]*)
	echo "fuzz.sh: FUZZ_SECONDS=\"$secs\": expected a whole number of seconds" >&2
	exit 2
	;;
esac
failed=0
for bin in "$@"; do
	name=$(basename "$bin" | sed 's/^fuzz_//')
	corpus=$top/build/fuzz/corpus/$name
	artifacts=$top/build/fuzz/artifacts/$name
	mkdir -p "$corpus" "$artifacts"
	for d in seeds regress; do
		[ -d "$top/tests/fuzz/$d/$name" ] && cp -n "$top/tests/fuzz/$d/$name"/* "$corpus"/ 2>/dev/null || true
	done
	log=$top/build/fuzz/$name.log
	echo "fuzz: $name for ${secs}s (log in $log)"
	rc=0
	"$bin" -max_total_time="$secs" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix="$artifacts/" "$corpus" >"$log" 2>&1 || rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
	ft=$(grep -o 'ft: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
	corp=$(ls "$corpus" | wc -l)
	if [ "$rc" -eq 0 ]; then
		echo "fuzz: $name: clean, ${execs:-?} executions, coverage ${cov:-?} edges, ${ft:-?} features, corpus $corp inputs"
	else
		echo "fuzz: $name: FOUND A PROBLEM (exit $rc) after ${execs:-?} executions; input in $artifacts:" >&2
		ls "$artifacts" >&2
		tail -n 30 "$log" >&2
		failed=1
	fi
done
exit $failed
