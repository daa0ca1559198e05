#!/bin/sh
# citus.sh build | check | dir - Citus, from vendor/citus/ alone.
#
#   sh scripts/citus.sh build   verify the vendored tarball and patch against
#                               vendor/citus/SHA256SUMS, build them once per
#                               machine into a cache outside the checkout, and
#                               install the build into PostgreSQL (root); a
#                               second run finds both done and returns at once
#   sh scripts/citus.sh check   exit 0 when this Citus is installed into the
#                               PostgreSQL that tests/pg.sh would start, 1
#                               (with a line saying why) when not
#   sh scripts/citus.sh dir     print the cache directory of the build
#
# The build needs `sh scripts/deps.sh --citus` first (PostgreSQL's server
# headers, lz4, zstd); it takes about 8 minutes on 2 cores, so it is kept in
# ${CAIRN_CACHE:-/var/cache/cairn} (root) or ~/.cache/cairn, in a directory
# named by the Citus version, PostgreSQL's major version and the hash of
# SHA256SUMS (so of the tarball and the patch): another checkout, or the next
# `make test`, reuses it. A build that did not finish leaves no stamp and is
# started again from a fresh tree. Builds of the same directory take turns
# (flock), so two checkouts' `make test` at once compile it once.
#
# Configured --without-libcurl: a Citus built with libcurl reports anonymous
# statistics to its vendor's server and checks for updates, which a test
# cluster must not try. CITUS_JOBS (default: the number of CPUs) is make's -j.
set -eu
cmd=${1:-}
top=$(cd "$(dirname "$0")/.." && pwd)
vendor=$top/vendor/citus
version=13.2.2
tarball=citus-$version.tar.gz
patchfile=citus-$version-pg15-have_createdb_privilege.patch

# The PostgreSQL that tests/pg.sh starts: the newest under /usr/lib/postgresql.
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -n "$pgbin" ] || { echo "citus.sh: no PostgreSQL server found in /usr/lib/postgresql" >&2; exit 1; }
major=$(basename "$(dirname "$pgbin")")
pg_config=$pgbin/pg_config

if [ "$(id -u)" -eq 0 ]; then
	cache=${CAIRN_CACHE:-/var/cache/cairn}
else
	cache=${CAIRN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cairn}
fi
sums=$(sha256sum <"$vendor/SHA256SUMS" | cut -c1-12)
build=$cache/citus-$version-pg$major-$sums
configure_flags="--without-libcurl"

# What the build was made from and with: a stamp that differs (other
# headers after a point release, other flags) means build again.
stamp_text() {
	printf 'citus %s\n%s\n%s\nconfigure %s\nmake with_llvm=no\n' \
		"$version" "$(cat "$vendor/SHA256SUMS")" "$("$pg_config" --version)" "$configure_flags"
}

# Installed means: this build's citus.so is PostgreSQL's, byte for byte, and
# its control file and install scripts are in the extension directory.
installed() {
	libdir=$("$pg_config" --pkglibdir)
	extdir=$("$pg_config" --sharedir)/extension
	[ -f "$build/stamp" ] || { why="not built yet ($build)"; return 1; }
	[ -f "$extdir/citus.control" ] || { why="no citus.control in $extdir"; return 1; }
	cmp -s "$build/src/src/backend/distributed/citus.so" "$libdir/citus.so" ||
		{ why="$libdir/citus.so is not the build in $build"; return 1; }
	cmp -s "$build/src/src/backend/columnar/citus_columnar.so" "$libdir/citus_columnar.so" ||
		{ why="$libdir/citus_columnar.so is not the build in $build"; return 1; }
	return 0
}

verify() {
	(cd "$vendor" && sha256sum --check --quiet --strict SHA256SUMS) ||
		{ echo "citus.sh: vendor/citus/ does not match its SHA256SUMS" >&2; exit 1; }
}

compile() {
	if [ -f "$build/stamp" ] && [ "$(cat "$build/stamp")" = "$(stamp_text)" ]; then
		return 0
	fi
	[ -x "$pg_config" ] || { echo "citus.sh: no $pg_config: run sh scripts/deps.sh --citus first" >&2; exit 1; }
	rm -rf "$build/src" "$build/stamp"
	mkdir -p "$build/src"
	echo "citus.sh: building Citus $version for PostgreSQL $major in $build (about 8 minutes on 2 cores)" >&2
	start=$(date +%s)
	tar -xzf "$vendor/$tarball" -C "$build/src" --strip-components=1
	(cd "$build/src" && patch -p1 --quiet <"$vendor/$patchfile")
	(cd "$build/src" && ./configure PG_CONFIG="$pg_config" $configure_flags) >"$build/configure.log" 2>&1 ||
		{ tail -n 30 "$build/configure.log" >&2; exit 1; }
	make -C "$build/src" -j"${CITUS_JOBS:-$(nproc)}" with_llvm=no >"$build/make.log" 2>&1 ||
		{ grep -E "error:" "$build/make.log" | head -n 20 >&2; tail -n 20 "$build/make.log" >&2; exit 1; }
	stamp_text >"$build/stamp"
	echo "citus.sh: built in $(($(date +%s) - start)) s" >&2
}

case "$cmd" in
build)
	verify
	if ! "$pg_config" --version >/dev/null 2>&1; then
		echo "citus.sh: no $pg_config: run sh scripts/deps.sh --citus first" >&2
		exit 1
	fi
	server=$("$pgbin/postgres" --version | sed 's/^postgres (PostgreSQL) //')
	headers=$("$pg_config" --version | sed 's/^PostgreSQL //')
	[ "$server" = "$headers" ] ||
		echo "citus.sh: note: PostgreSQL's server is $server, its headers $headers (minor versions keep the ABI)" >&2
	mkdir -p "$cache"
	exec 9>"$cache/citus-$version-pg$major-$sums.lock"
	flock 9
	compile
	if installed; then
		echo "citus.sh: Citus $version is installed (build $build)" >&2
		exit 0
	fi
	if [ "$(id -u)" -ne 0 ]; then
		echo "citus.sh: built in $build; installing into PostgreSQL needs root: sudo make -C $build/src install with_llvm=no" >&2
		exit 1
	fi
	make -C "$build/src" install with_llvm=no >"$build/install.log" 2>&1 ||
		{ tail -n 20 "$build/install.log" >&2; exit 1; }
	installed || { echo "citus.sh: installed, yet: $why" >&2; exit 1; }
	echo "citus.sh: installed Citus $version into PostgreSQL $major" >&2
	;;
check)
	if installed; then
		exit 0
	fi
	echo "citus.sh: Citus $version is not installed: $why; run sh scripts/deps.sh --citus && sh scripts/citus.sh build" >&2
	exit 1
	;;
dir)
	echo "$build"
	;;
*)
	echo "usage: sh scripts/citus.sh build | check | dir" >&2
	exit 2
	;;
esac
