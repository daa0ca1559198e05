#!/bin/sh
# demo.sh - `make demo`: runs cairn for real. With DATABASE_URL unset it
# starts a private PostgreSQL (tests/pg.sh); it migrates, starts a
# cairn-worker, enqueues an `order` run, shows it charged and waiting for its
# approval signal, approves it through a signed link used once (as an
# approver's click in an e-mail would), and waits for the result. Stops and removes
# everything it started, also when a step fails or it is interrupted.
# CAIRN_DEMO_BIN names the directory of the binaries it runs (default: bin/
# of this checkout; /usr/bin for an installed package).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
bin=${CAIRN_DEMO_BIN:-$top/bin}
cairn="$bin/cairn"
pgdir=""
worker=""
log=$(mktemp /tmp/cairn-demo-worker.XXXXXX)
cleanup() {
	if [ -n "$worker" ]; then
		kill -TERM "$worker" 2>/dev/null || true
		wait "$worker" 2>/dev/null || true
	fi
	if [ -n "$pgdir" ]; then
		sh "$top/tests/pg.sh" stop "$pgdir"
	fi
	rm -f "$log"
	return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

fail() {
	echo "demo: $*" >&2
	if [ -s "$log" ]; then
		echo "demo: the worker's log:" >&2
		tail -n 30 "$log" >&2
	fi
	exit 1
}

# The run's own status (the first "status" of `cairn status --json`; the
# journal's entries come after it).
run_status() {
	"$cairn" status --json "$1" | sed -n 's/^[[:space:]]*"status":[[:space:]]*"\([a-z]*\)".*/\1/p' |
		head -n 1
}

# wait_status RUN STATUS SECONDS
wait_status() {
	end=$(($(date +%s) + $3))
	while [ "$(run_status "$1")" != "$2" ]; do
		[ "$(date +%s)" -lt "$end" ] || fail "run $1 is not $2 after $3 s"
		sleep 0.1
	done
}

step() {
	printf '\n$ cairn %s\n' "$*"
	"$cairn" "$@"
}

if [ -z "${DATABASE_URL:-}" ]; then
	pgdir=$(mktemp -d /tmp/cairn-demo-pg.XXXXXX)
	DATABASE_URL=$(sh "$top/tests/pg.sh" start "$pgdir")
	export DATABASE_URL
	echo "demo: started a private PostgreSQL in $pgdir"
else
	echo "demo: using DATABASE_URL"
fi

step migrate

port=$((20000 + $$ % 20000))
# The key that signs signal links; the workers and `cairn signal-link` share it.
CAIRN_SIGNING_KEY=$(head -c 32 /dev/urandom | base64)
export CAIRN_SIGNING_KEY
printf '\n$ CAIRN_SIGNING_KEY=$(head -c 32 /dev/urandom | base64) CAIRN_HTTP_ADDR=127.0.0.1:%s cairn-worker 2>%s &\n' "$port" "$log"
CAIRN_HTTP_ADDR=127.0.0.1:$port "$bin/cairn-worker" 2>"$log" &
worker=$!
end=$(($(date +%s) + 30))
until curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; do
	kill -0 "$worker" 2>/dev/null || { wait "$worker" || true; worker=""; fail "the worker exited"; }
	[ "$(date +%s)" -lt "$end" ] || fail "the worker is not ready after 30 s"
	sleep 0.1
done
echo "demo: the worker is ready (http://127.0.0.1:$port/readyz)"

printf '\n$ cairn enqueue order --input '\''{"item": "book", "amount": 12}'\''\n'
run=$("$cairn" enqueue order --input '{"item": "book", "amount": 12}') || fail "enqueue failed"
echo "$run"

# The order charges, then waits for a human: the run is parked in the
# database, not in a thread, until the signal arrives.
wait_status "$run" waiting 15
step status "$run"

# The approval comes through a link: no database access, no credentials but
# the link itself, good once (`cairn signal RUN approval --input ...` works too).
printf '\n$ cairn signal-link %s approval --once --ttl 1h\n' "$run"
link=$("$cairn" signal-link "$run" approval --once --ttl 1h) || fail "signal-link failed"
echo "$link"
printf '\n$ curl -X POST -d '\''{"approved": true, "by": "demo"}'\'' LINK   # the approver'\''s click\n'
curl -fsS -X POST -H 'Content-Type: application/json' -d '{"approved": true, "by": "demo"}' "$link" ||
	fail "the link was refused"
printf '\n$ curl -X POST -d true LINK   # a second use of a --once link\n'
code=$(curl -sS -o /dev/null -w '%{http_code}' -X POST -d true "$link")
echo "HTTP $code"
[ "$code" = 409 ] || fail "a second use of the link answered $code, not 409"
printf '\n$ cairn result %s --wait --timeout 30s\n' "$run"
result=$("$cairn" result "$run" --wait --timeout 30s) || fail "run $run did not complete"
echo "$result"
step status "$run"

printf '\n$ kill -TERM %s   # the worker drains and exits\n' "$worker"
kill -TERM "$worker"
wait "$worker" || fail "the worker did not exit cleanly"
worker=""
echo
echo "demo: the worker drained and exited; its last log lines:"
tail -n 3 "$log"
echo
echo "demo: order $run completed: $result"
