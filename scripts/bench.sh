#!/bin/sh
# bench.sh - `make bench`: starts a private PostgreSQL with its durable
# defaults (PG_FSYNC=on; PG_FSYNC=off measures without fsync), migrates, and
# runs build/rel/bench, which measures the floors (a bare commit loop,
# pgbench), enqueues, starts cairn-worker (with the bench_flows plugin) and
# fleets of them, and prints a table; the JSON goes to $BENCH_OUT or
# ./bench.json. BENCH_MEMORY_RUNS=N (`make bench-memory`) runs only the floors
# and the memory phase. The bench empties cairn.runs between phases and
# creates and drops databases of its own on the server, so it never uses
# $DATABASE_URL: set BENCH_DATABASE_URL to point it at a server of its own.
# BENCH_BASELINE=COMMIT builds that commit once into build/baseline/SHA
# (git archive, its own `make all examples`, and tests/bench_load.c compiled
# against its library) and reports the throughput figures as ratios to it.
# Stops and removes everything it started, also when interrupted.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
out=${BENCH_OUT:-$(pwd)/bench.json}
pgdir=""
logs=$(mktemp -d /tmp/cairn-bench-logs.XXXXXX)
keep_logs=1
cleanup() {
	if [ -n "$pgdir" ]; then
		sh "$top/tests/pg.sh" stop "$pgdir"
	fi
	[ "$keep_logs" = 1 ] || rm -rf "$logs"
	return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# The older build to compare with, built once per commit.
set --
if [ -n "${BENCH_BASELINE:-}" ]; then
	sha=$(git -C "$top" rev-parse --verify --quiet "$BENCH_BASELINE^{commit}") || {
		echo "bench: BENCH_BASELINE=\"$BENCH_BASELINE\": not a commit of this repository" >&2
		exit 2
	}
	base="$top/build/baseline/$sha"
	if [ ! -f "$base/.built" ]; then
		echo "bench: building $BENCH_BASELINE ($sha) in $base"
		rm -rf "$base"
		mkdir -p "$base/build/rel"
		git -C "$top" archive "$sha" | tar -x -C "$base"
		libs=$(pkg-config --libs libpq libcjson libcurl libsodium libmicrohttpd)
		pkg-config --exists libsystemd 2>/dev/null && libs="$libs $(pkg-config --libs libsystemd)"
		# shellcheck disable=SC2086
		if ! make -C "$base" -j2 all examples >"$base/build.log" 2>&1 ||
			! cc -std=c17 -D_GNU_SOURCE -O2 -pthread -I"$base/include" \
				$(pkg-config --cflags libpq libcjson) -o "$base/build/rel/bench_load" \
				"$top/tests/bench_load.c" "$base/lib/libcairn.a" $libs -ldl -lm \
				>>"$base/build.log" 2>&1; then
			echo "bench: cannot build $BENCH_BASELINE; see $base/build.log" >&2
			exit 2
		fi
		touch "$base/.built"
	fi
	set -- --baseline "$base" --baseline-name "$(git -C "$top" rev-parse --short "$sha")"
fi

if [ -n "${BENCH_DATABASE_URL:-}" ]; then
	DATABASE_URL=$BENCH_DATABASE_URL
	echo "bench: using BENCH_DATABASE_URL (its runs are deleted)"
else
	pgdir=$(mktemp -d /tmp/cairn-bench-pg.XXXXXX)
	DATABASE_URL=$(PG_FSYNC=${PG_FSYNC:-on} PG_STATEMENTS=1 sh "$top/tests/pg.sh" start "$pgdir")
	echo "bench: private PostgreSQL in $pgdir (fsync=${PG_FSYNC:-on})"
fi
export DATABASE_URL
"$top/bin/cairn" migrate >/dev/null
# The logs only matter when a phase could not be measured (bench exits 3).
rc=0
pgbench=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)/pgbench
"$top/build/rel/bench" --worker "$top/bin/cairn-worker" --pgbench "$pgbench" \
	--plugin "$top/build/examples/bench_flows.so" --cli "$top/bin/cairn" \
	--load "$top/build/rel/bench_load" --out "$out" --logs "$logs" "$@" || rc=$?

# The same enqueue and drain phases on Citus (docs/architecture.md, "On
# Citus"): a coordinator and two worker nodes on this machine, from
# tests/citus.sh, migrated with `cairn migrate --citus`, beside the single
# server's figures of this run, with the statements and transactions each
# node served (scripts/bench-citus.py). It runs with every phase, or when
# BENCH_PHASES names "citus"; BENCH_CITUS_PHASES picks its own phases
# (enqueue,x8,drain). Citus is built once per machine (scripts/citus.sh).
citus_rc=0
case ",${BENCH_PHASES:-citus}," in
*,citus,*) citus=1 ;;
*) citus=0 ;;
esac
if [ "$citus" = 1 ] && [ -z "${BENCH_MEMORY_RUNS:-}" ]; then
	sh "$top/scripts/deps.sh" --citus >/dev/null
	sh "$top/scripts/citus.sh" build
	citusdir=$(mktemp -d /tmp/cairn-bench-citus.XXXXXX)
	trap 'cleanup; sh "$top/tests/citus.sh" stop "$citusdir" >/dev/null 2>&1 || true' EXIT
	PG_FSYNC=${PG_FSYNC:-on} PG_STATEMENTS=1 sh "$top/tests/citus.sh" start "$citusdir" >/dev/null
	curl=$(sh "$top/tests/citus.sh" createdb "$citusdir" cairn_bench)
	DATABASE_URL=$curl "$top/bin/cairn" migrate --citus >/dev/null
	out_citus=${out%.json}-citus.json
	echo "bench: Citus: a coordinator and two worker nodes in $citusdir (fsync=${PG_FSYNC:-on})"
	python3 "$top/scripts/bench-citus.py" reset "$citusdir" cairn_bench
	nodes="postgresql:///cairn_bench?host=$citusdir/w1&port=5432&user=cairn"
	nodes="$nodes postgresql:///cairn_bench?host=$citusdir/w2&port=5432&user=cairn"
	DATABASE_URL=$curl BENCH_OUT=$out_citus BENCH_PHASES=${BENCH_CITUS_PHASES:-enqueue,x8,drain} \
		BENCH_CITUS_SH="$top/tests/citus.sh" BENCH_CITUS_DIR=$citusdir BENCH_NODES=$nodes \
		"$top/build/rel/bench" --worker "$top/bin/cairn-worker" --pgbench "$pgbench" \
		--plugin "$top/build/examples/bench_flows.so" --cli "$top/bin/cairn" \
		--load "$top/build/rel/bench_load" --out "$out_citus" --logs "$logs" || citus_rc=$?
	if [ "$citus_rc" -eq 0 ] || [ "$citus_rc" -eq 3 ]; then
		python3 "$top/scripts/bench-citus.py" report "$citusdir" cairn_bench "$out" "$out_citus"
	fi
fi
if [ "$rc" -eq 3 ] || [ "$citus_rc" -eq 3 ]; then
	echo "bench: some phases were not measured; the worker logs stay in $logs"
	exit 0
fi
[ "$citus_rc" -eq 0 ] || exit "$citus_rc"
keep_logs=${BENCH_KEEP_LOGS:-0}
[ "$keep_logs" = 1 ] && echo "bench: worker logs kept in $logs"
exit "$rc"
