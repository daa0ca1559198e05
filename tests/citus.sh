#!/bin/sh
# citus.sh start DIR | createdb DIR NAME [TEMPLATE] | seal DIR NAME | addnode DIR NAME NODE |
#   restart DIR NODE | stop DIR -
# a throwaway Citus cluster for tests and the
# benchmark: a coordinator and two worker nodes, three PostgreSQL clusters
# made as tests/pg.sh makes one (initdb into DIR/coord, DIR/w1, DIR/w2, each
# listening only on a Unix socket in its own directory, run as an
# unprivileged system user when we are root), each loading Citus. `start`
# registers the workers with the coordinator in the database postgres and
# prints the coordinator's DATABASE_URL; `createdb` makes database NAME a
# Citus cluster of its own on the same three nodes (Citus's metadata is per
# database: the database, the extension and the nodes on each) and prints
# its URL (with TEMPLATE, a copy of database TEMPLATE on each node, which
# `seal` made ready: no session of it may be left on any node, so it
# allows none); `addnode` starts a worker node NODE (w3, w4, ...) beside them
# if it is not running, makes database NAME on it and adds it to NAME's
# cluster (a cluster that grows: its parts stay where they are until
# Citus's rebalancer moves some); `dropdb` drops database NAME on the
# three, if it exists, with the transactions the workers still hold
# prepared for it;
# `restart` restarts node NODE (coord, w1 or w2) with pg_ctl restart -m fast,
# cutting off every session of it (the chaos driver's node restarts);
# `stop` stops the three and removes DIR. Citus must be installed
# (sh scripts/citus.sh build).
#
# The nodes know each other by their socket directories (Citus connects to a
# node with host=NODENAME, and libpq takes a host that starts with / for a
# socket directory), all on port 5432 like pg.sh's server: no TCP port is
# taken, so several clusters (checkouts, test runs) never collide.
#
# citus.shard_count is 8, so cairn has 8 parts (docs/architecture.md, "On
# Citus"): a claim of all that is due is a statement per part a worker owns
# shards in, and 8 parts are 4 a node, enough for the rebalancer to spread
# over a node added to the two. Durability follows pg.sh (PG_FSYNC=on for
# a benchmark), and so does PG_STATEMENTS=1 (pg_stat_statements, loaded
# after Citus); PG_COMMIT_TS=1 turns track_commit_timestamp on on every
# node (the chaos driver's check for re-executed steps). CITUS_POOL=N sets
# the connections a session opens to a worker node for a statement over
# several shards (citus.max_adaptive_executor_pool_size, Citus's default
# 16): the test harness sets 1, as its sessions are many and short and each
# connection is a backend started on the node.
set -eu
cmd=${1:-}
dir=${2:-}
usage="usage: citus.sh start DIR | createdb DIR NAME [TEMPLATE] | seal DIR NAME | dropdb DIR NAME | addnode DIR NAME NODE | restart DIR NODE | stop DIR"
[ -n "$dir" ] || { echo "$usage" >&2; exit 2; }
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -n "$pgbin" ] || { echo "citus.sh: no PostgreSQL server found in /usr/lib/postgresql" >&2; exit 1; }
nodes="coord w1 w2"

pguser=$(id -un)
if [ "$(id -u)" -eq 0 ]; then
	pguser=postgres
	id -u "$pguser" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$pguser"
fi

as_user() {
	if [ "$(id -u)" -eq 0 ]; then
		runuser -u "$pguser" -- "$@"
	else
		"$@"
	fi
}

# Statement $1 on every node at once, in database postgres: fails if it
# failed on one.
each_node() {
	pids=""
	for n in $nodes; do
		node_sql "$n" -c "$1" &
		pids="$pids $!"
	done
	wait_all $pids
}

# Waits for the jobs $@: fails if one failed.
wait_all() {
	rc=0
	for p in "$@"; do
		wait "$p" || rc=1
	done
	return $rc
}

# psql as cairn on node $1's socket, database $db (postgres); the rest are
# psql's.
db=postgres
node_sql() {
	n=$1
	shift
	PGOPTIONS="-c client_min_messages=warning" \
		"$pgbin/psql" -X -q -v ON_ERROR_STOP=1 -At "host=$dir/$n port=5432 user=cairn dbname=$db" "$@"
}

# The workers' Citus in database $db, then the coordinator's, which
# registers itself and the workers.
add_nodes() {
	node_sql w1 -c "CREATE EXTENSION IF NOT EXISTS citus" &&
		node_sql w2 -c "CREATE EXTENSION IF NOT EXISTS citus" &&
		node_sql coord -c "CREATE EXTENSION IF NOT EXISTS citus" &&
		node_sql coord -c "SELECT citus_set_coordinator_host('$dir/coord', 5432)" >/dev/null &&
		node_sql coord -c "SELECT citus_add_node('$dir/w1', 5432)" >/dev/null &&
		node_sql coord -c "SELECT citus_add_node('$dir/w2', 5432)" >/dev/null
}

# Every node, those addnode added too.
stop_all() {
	for d in "$dir"/*/data; do
		if [ -f "$d/postmaster.pid" ]; then
			as_user "$pgbin/pg_ctl" -D "$d" -m immediate -w stop >/dev/null 2>&1 || true
		fi
	done
}

# A node's durability (PG_FSYNC) and preloaded libraries (PG_STATEMENTS).
node_options() {
	case "${PG_FSYNC:-off}" in
	on) durability="-c fsync=on -c full_page_writes=on" ;;
	off) durability="-c fsync=off -c full_page_writes=off" ;;
	*) echo "citus.sh: PG_FSYNC=\"$PG_FSYNC\": expected on or off" >&2; exit 2 ;;
	esac
	preload=""
	[ "${PG_STATEMENTS:-0}" = 1 ] && preload=",pg_stat_statements"
	case "${CITUS_POOL:-16}" in
	"" | *[!0-9]* | 0) echo "citus.sh: CITUS_POOL=\"$CITUS_POOL\": expected a number of connections, 1 or more" >&2; exit 2 ;;
	esac
	return 0
}

start_node() {
	n=$1
	mkdir -p "$dir/$n"
	[ "$(id -u)" -eq 0 ] && chown "$pguser" "$dir/$n"
	as_user "$pgbin/initdb" -D "$dir/$n/data" -U cairn -A trust --no-sync -E UTF8 >"$dir/$n/initdb.log" 2>&1 ||
		{ cat "$dir/$n/initdb.log" >&2; return 1; }
	# Citus's own settings: the node names itself by its socket directory
	# (local_hostname: shard moves connect to the node they run on), sends
	# no statistics and checks for no update (no network), and keeps a
	# coordinator or worker connection per node it reaches for the next
	# statement instead of opening one each time. On the command line,
	# pg.sh's options and three of Citus's needs: prepared transactions (a
	# transaction that writes on several nodes commits in two phases),
	# wal_level logical (the rebalancer moves shards by logical replication)
	# and background workers for the maintenance daemon of each database the
	# tests make (it recovers prepared transactions and breaks distributed
	# deadlocks). It recovers them every second, not every minute: a session
	# cut between the two phases of a write to a reference table (a test
	# terminates a worker's lease session in its heartbeat) holds the
	# table's write lock on a worker node, and every heartbeat, until then.
	cat >>"$dir/$n/data/postgresql.conf" <<-EOF
		shared_preload_libraries = 'citus$preload'
		citus.local_hostname = '$dir/$n'
		citus.enable_statistics_collection = off
		citus.shard_count = 8
		citus.max_cached_conns_per_worker = 4
		citus.max_adaptive_executor_pool_size = ${CITUS_POOL:-16}
		citus.recover_2pc_interval = '1s'
	EOF
	[ "${PG_COMMIT_TS:-0}" = 1 ] && echo "track_commit_timestamp = on" >>"$dir/$n/data/postgresql.conf"
	as_user "$pgbin/pg_ctl" -D "$dir/$n/data" -l "$dir/$n/server.log" -w -t 60 start \
		-o "-c listen_addresses='' -k $dir/$n -p 5432 $durability \
		    -c max_connections=400 -c max_locks_per_transaction=256 \
		    -c shared_buffers=128MB -c max_prepared_transactions=200 \
		    -c max_worker_processes=64 -c wal_level=logical" >/dev/null ||
		{ cat "$dir/$n/server.log" >&2; return 1; }
}

case "$cmd" in
start)
	[ -f "$("$pgbin/pg_config" --sharedir 2>/dev/null)/extension/citus.control" ] ||
		[ -f "/usr/share/postgresql/$(basename "$(dirname "$pgbin")")/extension/citus.control" ] ||
		{ echo "citus.sh: Citus is not installed: sh scripts/deps.sh --citus && sh scripts/citus.sh build" >&2; exit 1; }
	node_options
	mkdir -p "$dir"
	[ "$(id -u)" -eq 0 ] && chown "$pguser" "$dir"
	# A node that does not start stops the others: nothing is left running.
	for n in $nodes; do
		start_node "$n" || { stop_all; exit 1; }
	done
	add_nodes || { stop_all; exit 1; }
	echo "postgresql:///postgres?host=$dir/coord&port=5432&user=cairn"
	;;
createdb | dropdb | seal)
	name=${3:-}
	template=${4:-}
	case "$name" in
	"" | *[!a-z0-9_]*) echo "citus.sh: $cmd DIR NAME: NAME of a-z, 0-9 and _" >&2; exit 2 ;;
	esac
	case "$template" in
	*[!a-z0-9_]*) echo "citus.sh: createdb DIR NAME TEMPLATE: TEMPLATE of a-z, 0-9 and _" >&2; exit 2 ;;
	esac
	case "$cmd" in
	dropdb)
		# The coordinator's first: WITH (FORCE) ends its sessions, and a
		# session ended between Citus's PREPARE TRANSACTION on the workers
		# and its COMMIT PREPARED leaves the transaction prepared there,
		# which only this database's coordinator would resolve. Left, it
		# holds every worker's oldest transaction back, so a logical
		# replication slot (a part's move, in any database) waits for it
		# for ever, and it refuses the drop. So the workers' prepared
		# transactions of the database are rolled back, then it takes no
		# more sessions, then it is dropped: WITH (FORCE) ends Citus's
		# maintenance daemon of the database too, which a backend of it
		# could start again, and the drop failed ("being accessed by other
		# users"), leaving the database and its daemon, a background
		# worker, on the node (of 64: the next databases got none, so no
		# recovery of their prepared transactions).
		node_sql coord -c "DROP DATABASE IF EXISTS $name WITH (FORCE)" || exit 1
		pids=""
		for n in $nodes; do
			[ "$n" = coord ] && continue
			(
				if [ -n "$(node_sql "$n" -c "SELECT 1 FROM pg_database WHERE datname = '$name'")" ]; then
					db=$name
					node_sql "$n" -c "SELECT gid FROM pg_prepared_xacts WHERE database = '$name'" |
						while read -r gid; do
							node_sql "$n" -c "ROLLBACK PREPARED '$gid'"
						done
					db=postgres
					node_sql "$n" -c "ALTER DATABASE $name ALLOW_CONNECTIONS false"
				fi
				node_sql "$n" -c "DROP DATABASE IF EXISTS $name WITH (FORCE)"
			) &
			pids="$pids $!"
		done
		wait_all $pids
		exit $?
		;;
	seal)
		# A template: no session of it on any node, and none to come (not
		# even Citus's maintenance daemon), so that it can be copied.
		for n in $nodes; do
			node_sql "$n" -c "ALTER DATABASE $name ALLOW_CONNECTIONS false" \
				-c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '$name'" >/dev/null
		done
		exit 0
		;;
	esac
	if [ -n "$template" ]; then
		# A copy of a sealed database on every node: its schema, Citus's
		# metadata of its nodes and shards and the shards themselves.
		each_node "CREATE DATABASE $name TEMPLATE $template" || exit 1
	else
		# One at a time: Citus's extension made in two databases of a
		# node at once fails ("tuple concurrently updated"), and tests
		# run in parallel.
		exec 9>"$dir/createdb.lock"
		flock 9
		for n in $nodes; do
			node_sql "$n" -c "CREATE DATABASE $name"
		done
		db=$name
		add_nodes
	fi
	echo "postgresql:///$name?host=$dir/coord&port=5432&user=cairn"
	;;
addnode)
	name=${3:-}
	node=${4:-}
	case "$name" in
	"" | *[!a-z0-9_]*) echo "citus.sh: addnode DIR NAME NODE: NAME of a-z, 0-9 and _" >&2; exit 2 ;;
	esac
	case "$node" in
	coord | w1 | w2 | "" | *[!a-z0-9]*)
		echo "citus.sh: addnode DIR NAME NODE: NODE a new name of a-z and 0-9 (w3, w4, ...), not \"$node\"" >&2
		exit 2
		;;
	esac
	# The node starts before the lock is taken: its server would inherit
	# the lock's descriptor, and hold it for as long as it runs.
	if [ ! -f "$dir/$node/data/postmaster.pid" ]; then
		node_options
		start_node "$node"
	fi
	exec 9>"$dir/createdb.lock"
	flock 9
	node_sql "$node" -c "CREATE DATABASE $name"
	db=$name
	node_sql "$node" -c "CREATE EXTENSION IF NOT EXISTS citus"
	node_sql coord -c "SELECT citus_add_node('$dir/$node', 5432)" >/dev/null
	;;
restart)
	node=${3:-}
	case " $nodes " in
	*" $node "*) ;;
	*) echo "citus.sh: restart DIR NODE: NODE is one of $nodes, not \"$node\"" >&2; exit 2 ;;
	esac
	as_user "$pgbin/pg_ctl" -D "$dir/$node/data" -l "$dir/$node/server.log" -m fast -w -t 60 restart >/dev/null ||
		{ tail -n 20 "$dir/$node/server.log" >&2; exit 1; }
	;;
stop)
	stop_all
	rm -rf "$dir"
	;;
*)
	echo "$usage" >&2
	exit 2
	;;
esac
