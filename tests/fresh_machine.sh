#!/bin/sh
# fresh_machine.sh - CI only (.ci/run runs it when CI=true, as root): the two
# commands on a machine that lacks a -dev package. It removes $PKG (a -dev
# package only, never PostgreSQL or the compiler), then, in a fresh clone of
# this checkout's HEAD in a temporary directory:
#   1. plain `make` (and `make examples`, `make bench`, `make install`) must
#      exit non-zero with one line saying what to run, not a compiler error;
#   2. `make -j2 demo` (DATABASE_URL unset) must install the package again
#      through scripts/deps.sh, build and run the demo.
# On exit, pass or fail, scripts/deps.sh reinstalls whatever is missing and
# the temporary directory is removed. Not part of `make test`: a developer's
# `make test` must never uninstall packages. Prints one PASS or FAIL line.
set -u
PKG=${PKG:-libmicrohttpd-dev}
top=$(cd "$(dirname "$0")/.." && pwd)
tmp=""
passed=""
start=$(date +%s)

say() { echo "fresh-machine: $*"; }
failed=""
fail() {
	say "FAIL: $*"
	failed=1
	exit 1
}

case $PKG in
*-dev) ;;
*) fail "PKG=$PKG is not a -dev package; refusing to remove it" ;;
esac
[ "$(id -u)" -eq 0 ] || fail "must run as root (it removes and reinstalls $PKG)"
command -v apt-get >/dev/null 2>&1 || fail "apt-get not found"

installed() {
	dpkg-query -W -f='${Status}' "$PKG" 2>/dev/null | grep -q "install ok installed"
}

cleanup() {
	rc=$?
	trap - EXIT INT TERM HUP
	if ! sh "$top/scripts/deps.sh"; then
		say "FAIL: scripts/deps.sh could not reinstall the packages"
		rc=1
	elif ! installed; then
		say "FAIL: $PKG is not installed again"
		rc=1
	elif [ $rc -ne 0 ] && [ -z "$failed" ]; then
		say "FAIL: stopped (exit $rc)"
	fi
	[ -n "$tmp" ] && rm -rf "$tmp"
	if [ $rc -eq 0 ] && [ -n "$passed" ]; then
		say "PASS: $passed ($(($(date +%s) - start)) s)"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

tmp=$(mktemp -d /tmp/cairn-fresh.XXXXXX)
head=$(git -C "$top" rev-parse HEAD) || fail "$top is not a git checkout"
{ git clone -q --no-checkout "$top" "$tmp/cairn" && git -C "$tmp/cairn" checkout -q "$head"; } ||
	fail "git clone of $top failed"
say "clone of $head in $tmp/cairn"

# Remove only $PKG: refuse if apt would remove anything else with it.
removes=$(apt-get remove -s "$PKG" 2>/dev/null | grep -c '^Remv ')
[ "$removes" = 1 ] || fail "removing $PKG would remove $removes packages; refusing"
DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 remove -y -qq "$PKG" >/dev/null ||
	fail "apt-get remove $PKG failed"
say "removed $PKG"

# 1. Without the package, goals that compile say what to run, in one line.
for goal in "" examples bench "install DESTDIR=$tmp/dest"; do
	# shellcheck disable=SC2086
	out=$(cd "$tmp/cairn" && env -u DATABASE_URL make -j2 $goal 2>&1)
	rc=$?
	lines=$(printf '%s\n' "$out" | wc -l)
	name="make${goal:+ }${goal%% *}"
	if [ $rc -eq 0 ] || [ "$lines" -ne 1 ] || ! printf '%s' "$out" | grep -q "make deps" ||
		! printf '%s' "$out" | grep -q "$PKG"; then
		printf '%s\n' "$out" | tail -n 20
		installed && say "note: $PKG is installed again: another apt run on this machine reinstalled it"
		fail "$name without $PKG: expected one line naming $PKG and 'make deps' and a non-zero exit; got exit $rc, $lines lines (above)"
	fi
	say "$name without $PKG (exit $rc): $out"
done

# 2. `make demo` installs the package, then builds and runs.
log="$tmp/demo.log"
(cd "$tmp/cairn" && env -u DATABASE_URL make -j2 demo) >"$log" 2>&1
rc=$?
if [ $rc -ne 0 ] || ! grep -q '^demo: order .* completed' "$log"; then
	tail -n 40 "$log"
	fail "make demo in a fresh clone without $PKG exited $rc (log above)"
fi
grep -q "cairn: installing.*$PKG" "$log" ||
	fail "make demo did not install $PKG through scripts/deps.sh (did another apt run on this machine reinstall it first?)"
say "make demo without $PKG: $(grep '^demo: order' "$log")"
passed="a fresh clone without $PKG: plain make says what to run, make demo installs it and works"
