#!/bin/sh
# Installs the Debian packages cairn needs to build, test and run its demo.
# One script for `make test`, `make demo` and CI: as root it runs apt-get for
# whatever is missing; otherwise it prints the exact apt-get line and stops.
#
#   sh scripts/deps.sh           install what is missing (root), or say how
#   sh scripts/deps.sh --check   install nothing: print one line naming what
#                                is missing and what to run, exit 1; exit 0
#                                silently when everything is installed
#   sh scripts/deps.sh --fuzz    also clang and its libFuzzer (`make fuzz`)
#   sh scripts/deps.sh --citus   also what building the vendored Citus needs
#                                (scripts/citus.sh build): PostgreSQL's
#                                server headers and the compression
#                                libraries of Citus's columnar storage
#   sh scripts/deps.sh --runtime only what the built binaries need to run
#                                (the Dockerfile's runtime stage): no
#                                compiler, PostgreSQL, PgBouncer or Chromium
#   --list (after any of them)   print the packages, one a line; install nothing
set -eu

# What cairn and cairn-worker link, by Debian package: the names
# dpkg-shlibdeps gives the cairn package (make deb; tests/test_install.c
# checks that they agree), and ca-certificates for HTTPS steps, curl for a
# container's health check.
RUNTIME="libpq5 libcjson1 libcurl4 libsodium23 libmicrohttpd12 libsystemd0 ca-certificates curl"

# libsystemd-dev is optional for a build (the worker then cannot speak to
# systemd) but `make test` checks that it does; dpkg-dev builds the .deb
# (make deb) and lintian checks it, man-db and groff-base render the man
# pages, zsh checks the zsh completion script (cairn completion zsh), mkdocs
# with mkdocs-material and python3-pymdownx (its snippets include the example
# files into the guide) build docs/ into a site (make docs); python3-venv
# gives a venv its pip, which the Python SDK's test installs the package
# with (tests/test_sdk_python.c); prometheus (with promtool) scrapes a fleet
# in tests/test_metrics.c and checks the metrics and deploy/prometheus/'s
# alert rules.
PACKAGES="build-essential pkg-config libpq-dev libcjson-dev libcurl4-openssl-dev
libsodium-dev libmicrohttpd-dev libcriterion-dev postgresql postgresql-client curl pgbouncer
xxd chromium chromium-driver libsystemd-dev dpkg-dev lintian man-db groff-base python3-psycopg
zsh mkdocs mkdocs-material python3-pymdownx python3-venv prometheus"
# The Node example (workers/examples/node) and the TypeScript SDK
# (sdk/typescript) need node and npm: Debian's, unless both are installed
# already (from another source, say); the SDK is compiled by Debian's tsc.
PACKAGES="$PACKAGES node-typescript"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	PACKAGES="$PACKAGES nodejs npm"
fi

check=0
list=0
for arg in "$@"; do
	case $arg in
	--check) check=1 ;;
	--fuzz) PACKAGES="$PACKAGES clang libclang-rt-14-dev" ;;
	# vendor/citus/ (scripts/citus.sh): PGXS and the server's headers
	# (whose libpq-be.h includes GSSAPI's, from libkrb5-dev), and lz4 and
	# zstd for Citus's columnar storage. No libcurl: Citus is configured
	# --without-libcurl (no statistics sent, no update check).
	--citus) PACKAGES="$PACKAGES postgresql-server-dev-15 libkrb5-dev liblz4-dev libzstd-dev" ;;
	--runtime) PACKAGES=$RUNTIME ;;
	--list) list=1 ;;
	*)
		echo "usage: sh scripts/deps.sh [--check | --fuzz | --citus | --runtime] [--list]" >&2
		exit 2
		;;
	esac
done
if [ $list -eq 1 ]; then
	printf '%s\n' $PACKAGES
	exit 0
fi

if ! command -v dpkg-query >/dev/null 2>&1; then
	echo "cairn: scripts/deps.sh knows only Debian: install pkg-config, a C compiler and the development files of libpq, cJSON, libcurl, libsodium, libmicrohttpd, libsystemd, Criterion, PostgreSQL and PgBouncer, xxd, Chromium and its chromedriver, dpkg-dev, lintian, man-db, groff-base, psycopg 3 and the venv module (with pip) for Python 3, zsh, mkdocs with mkdocs-material and pymdownx, Prometheus with promtool, and Node.js with npm" >&2
	exit 1
fi

missing=""
for p in $PACKAGES; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0

if [ $check -eq 1 ] || [ "$(id -u)" -ne 0 ]; then
	sudo=""
	[ "$(id -u)" -ne 0 ] && sudo="sudo "
	echo "cairn: missing Debian packages:$missing; run: ${sudo}make deps (or: ${sudo}apt-get install -y$missing)" >&2
	exit 1
fi
echo "cairn: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
# Wait for another apt run (another checkout's `make test`) instead of failing
# on its lock: install waits for the dpkg lock by itself, update does not.
tries=0
while ! out=$(apt-get update -qq 2>&1); do
	tries=$((tries + 1))
	if [ $tries -ge 150 ] || ! printf '%s\n' "$out" | grep -q "Could not get lock"; then
		printf '%s\n' "$out" >&2
		exit 1
	fi
	sleep 2
done
[ -z "$out" ] || printf '%s\n' "$out" >&2
# pgbouncer's package starts its system service (localhost:6432), and its
# install fails if that start fails (the port taken); prometheus's starts a
# server on port 9090: the tests run their own, so while installing, a
# policy-rc.d (unless one exists, as in Docker images) denies those two
# services their start.
policy=/usr/sbin/policy-rc.d
if [ ! -e $policy ]; then
	trap 'rm -f $policy' EXIT
	printf '#!/bin/sh\n# scripts/deps.sh, while it installs: no pgbouncer or prometheus service\nfor a; do case $a in pgbouncer | prometheus) exit 101 ;; esac; done\nexit 0\n' >$policy
	chmod 755 $policy
fi
# shellcheck disable=SC2086
apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends $missing >/dev/null
