#!/bin/sh
# demo.sh - runs cairn for real: a private PostgreSQL when DATABASE_URL is
# unset, migrations, then a demo run. Stops everything it started.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cairn="$top/bin/cairn"
pgdir=""
cleanup() {
	[ -n "$pgdir" ] && sh "$top/tests/pg.sh" stop "$pgdir"
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
echo
echo "demo: the run is pending: executing it needs cairn-worker, which is not built yet"
