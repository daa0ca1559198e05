#!/bin/sh
# deb.sh VERSION - `make deb`: builds build/deb/cairn_VERSION_ARCH.deb from
# `make install PREFIX=/usr` (the library in Debian's multiarch directory,
# the unit in /lib/systemd/system, the environment file in /etc/cairn as a
# conffile) and prints its path. Its Depends are computed by dpkg-shlibdeps
# from the binaries and the library, so they name the Debian packages of the
# libraries they link (libpq5, libcurl4, ...) at the versions built against.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
version=$1
for tool in dpkg-deb dpkg-shlibdeps dpkg-architecture; do
	command -v $tool >/dev/null 2>&1 ||
		{ echo "cairn: make deb needs $tool (Debian's dpkg-dev); run: make deps" >&2; exit 1; }
done
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null)
out="$top/build/deb"
stage="$out/cairn_${version}_$arch"
work=$(mktemp -d /tmp/cairn-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT

rm -rf "$stage"
mkdir -p "$stage/DEBIAN"
make -C "$top" --no-print-directory install PREFIX=/usr LIBDIR="/usr/lib/$multiarch" \
	UNITDIR=/lib/systemd/system DESTDIR="$stage" >"$work/install.log" ||
	{ cat "$work/install.log" >&2; exit 1; }
gzip -9n "$stage"/usr/share/man/man*/*

# dpkg-shlibdeps reads debian/control of the current directory: a minimal one.
mkdir "$work/debian"
printf 'Source: cairn\n\nPackage: cairn\nArchitecture: any\n' >"$work/debian/control"
depends=$(cd "$work" && dpkg-shlibdeps -O -e"$stage/usr/bin/cairn" -e"$stage/usr/bin/cairn-worker" \
	-e"$stage/usr/lib/$multiarch/libcairn.so.$version" | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "deb.sh: dpkg-shlibdeps found no dependencies" >&2; exit 1; }

size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@SIZE@|$size|" \
	-e "s|@DEPENDS@|$depends|" "$top/scripts/debian/control.in" >"$stage/DEBIAN/control"
echo /etc/cairn/cairn-worker.env >"$stage/DEBIAN/conffiles"
# The shared library is in a directory of ld.so's cache.
echo "activate-noawait ldconfig" >"$stage/DEBIAN/triggers"
dpkg-deb --root-owner-group --build "$stage" "$out/cairn_${version}_$arch.deb" >/dev/null
rm -rf "$stage"
echo "$out/cairn_${version}_$arch.deb"
