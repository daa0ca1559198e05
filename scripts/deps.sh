#!/bin/sh
# Installs the Debian packages cairn needs to build, test and run its demo.
# One script for `make test`, `make demo` and CI: as root it runs apt-get for
# whatever is missing; otherwise it prints the exact apt-get line and stops.
set -eu

PACKAGES="build-essential pkg-config libpq-dev libcjson-dev libcurl4-openssl-dev
libsodium-dev libmicrohttpd-dev libcriterion-dev postgresql postgresql-client curl"

missing=""
for p in $PACKAGES; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "cairn: missing Debian packages:$missing" >&2
	echo "install them with: sudo apt-get install -y$missing" >&2
	exit 1
fi
echo "cairn: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
