#!/bin/sh
# demo.sh - runs cairn for real: a private PostgreSQL when DATABASE_URL is
# unset, migrations, then a demo run. Stops everything it started.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cairn="$top/bin/cairn"
pgdir=""
worker=""
cleanup() {
	if [ -n "$worker" ]; then
		kill -TERM "$worker" 2>/dev/null || true
		wait "$worker" 2>/dev/null || true
	fi
	if [ -n "$pgdir" ]; then
		sh "$top/tests/pg.sh" stop "$pgdir"
	fi
	return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

if [ -z "${DATABASE_URL:-}" ]; then
	pgdir=$(mktemp -d /tmp/cairn-demo-pg.XXXXXX)
	DATABASE_URL=$(sh "$top/tests/pg.sh" start "$pgdir")
	export DATABASE_URL
	echo "demo: started a private PostgreSQL in $pgdir"
fi

step() { printf '\n$ %s\n' "$*"; "$@"; }
step "$cairn" migrate
key="demo-$(date +%s)"
step "$cairn" enqueue order --key "$key" --input '{"item": "book", "amount": 12}'
step "$cairn" status "order/$key"
step "$cairn" list --limit 5

port=$((20000 + $$ % 20000))
CAIRN_HTTP_ADDR=127.0.0.1:$port "$top/bin/cairn-worker" &
worker=$!
for _ in $(seq 1 100); do
	curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
	sleep 0.1
done
step curl -sS "http://127.0.0.1:$port/readyz"
step curl -sS "http://127.0.0.1:$port/status"
kill -TERM "$worker"
wait "$worker"
worker=""
echo
echo "demo: the worker drained and exited; executing runs lands with the workflow engine"
