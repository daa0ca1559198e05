#!/bin/sh
# pg.sh start DIR | stop DIR | restart DIR - a throwaway PostgreSQL cluster
# for tests and the demo: initdb into DIR, listening only on a Unix socket in
# DIR (so it never collides with another server's port), run as an
# unprivileged system user when we are root. `start` prints the DATABASE_URL
# to use. `restart` is a fast shutdown (every session is cut off) and a start
# with the same options and the same socket: what `make chaos` does to it.
#
# Durability is off by default (fsync=off, full_page_writes=off): the tests
# need speed, not crash safety. PG_FSYNC=on keeps PostgreSQL's durable
# defaults, which is what a benchmark has to measure. PG_STATEMENTS=1 loads
# pg_stat_statements, which the benchmark reads its statements per run from.
set -eu
cmd=$1
dir=$2
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -n "$pgbin" ] || { echo "pg.sh: no PostgreSQL server found in /usr/lib/postgresql" >&2; exit 1; }

as_user() {
	if [ "$(id -u)" -eq 0 ]; then
		runuser -u "$pguser" -- "$@"
	else
		"$@"
	fi
}

pguser=$(id -un)
if [ "$(id -u)" -eq 0 ]; then
	pguser=postgres
	id -u "$pguser" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$pguser"
fi

case "$cmd" in
start)
	mkdir -p "$dir"
	[ "$(id -u)" -eq 0 ] && chown "$pguser" "$dir"
	as_user "$pgbin/initdb" -D "$dir/data" -U cairn -A trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 ||
		{ cat "$dir/initdb.log" >&2; exit 1; }
	case "${PG_FSYNC:-off}" in
	on) durability="-c fsync=on -c full_page_writes=on" ;;
	off) durability="-c fsync=off -c full_page_writes=off" ;;
	*) echo "pg.sh: PG_FSYNC=\"$PG_FSYNC\": expected on or off" >&2; exit 2 ;;
	esac
	preload=""
	[ "${PG_STATEMENTS:-0}" = 1 ] && preload="-c shared_preload_libraries=pg_stat_statements"
	# Tests start many workers; each holds a lease connection and advisory
	# locks on every shard it owns.
	as_user "$pgbin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start \
		-o "-c listen_addresses='' -k $dir -p 5432 $durability \
		    -c max_connections=400 -c max_locks_per_transaction=256 \
		    -c shared_buffers=256MB $preload" >/dev/null ||
		{ cat "$dir/server.log" >&2; exit 1; }
	echo "postgresql:///postgres?host=$dir&port=5432&user=cairn"
	;;
restart)
	as_user "$pgbin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -m fast -w -t 60 restart >/dev/null ||
		{ tail -n 20 "$dir/server.log" >&2; exit 1; }
	;;
stop)
	if [ -f "$dir/data/postmaster.pid" ]; then
		as_user "$pgbin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
	fi
	rm -rf "$dir"
	;;
*)
	echo "usage: pg.sh start|stop|restart DIR" >&2
	exit 2
	;;
esac
