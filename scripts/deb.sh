#!/bin/sh
# deb.sh VERSION MODULE... - `make deb`: builds the Debian packages of
# `make install PREFIX=/usr` (the library in Debian's multiarch directory,
# the unit in /lib/systemd/system, the environment file in /etc/cairn) in
# build/deb/ and prints their paths, one a line:
#
#   libcairn0     the shared library, with its shlibs and symbols files
#   libcairn-dev  cairn.h, libcairn.a, the libcairn.so link, the pkg-config
#                 files and cairn(3)
#   cairn         cairn and cairn-worker, the systemd unit, the environment
#                 file (a conffile), cairn(1), cairn-worker(8), completion
#
# PACKAGES below says which installed path goes in which package; a file no
# row claims stops the build. The binaries are stripped as Debian's tools
# strip them; each package has the DEP-5 copyright file, the changelog and
# the lintian overrides (each with its reason) of scripts/debian/, and its
# control paragraph from scripts/debian/control.
# Depends are computed by dpkg-shlibdeps from the binaries and the library
# (libpq5, libcurl4, ... at the versions built against); libcairn-dev
# depends on libcairn0 of the same version and on the development packages
# of the pkg-config MODULEs the static library links (the packages that
# hold their .pc files here). `lintian` reports nothing on them (make test,
# tests/test_install.c).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
version=$1
shift
for tool in dpkg-deb dpkg-shlibdeps dpkg-gensymbols dpkg-architecture dpkg-parsechangelog \
	strip; do
	command -v $tool >/dev/null 2>&1 ||
		{ echo "cairn: make deb needs $tool (Debian's dpkg-dev); run: make deps" >&2; exit 1; }
done
deb="$top/scripts/debian"
# The package's version is the changelog's: VERSION and a Debian revision.
debver=$(dpkg-parsechangelog -l "$deb/changelog" -S Version)
maintainer=$(dpkg-parsechangelog -l "$deb/changelog" -S Maintainer)
[ "${debver%-*}" = "$version" ] || {
	echo "deb.sh: scripts/debian/changelog's latest entry is $debver, not of cairn $version: add one" >&2
	exit 1
}
arch=$(dpkg --print-architecture)
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null)
soname=libcairn.so.${version%%.*}
out="$top/build/deb"
work=$(mktemp -d /tmp/cairn-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT

# package  paths it holds (installed paths, relative to /)
PACKAGES="libcairn0 usr/lib/$ma/$soname usr/lib/$ma/libcairn.so.$version
libcairn-dev usr/include/cairn.h usr/lib/$ma/libcairn.a usr/lib/$ma/libcairn.so usr/lib/$ma/pkgconfig usr/share/man/man3
cairn usr/bin usr/share/man/man1 usr/share/man/man8 usr/share/bash-completion usr/share/zsh lib/systemd etc/cairn"

stage="$work/install"
make -C "$top" --no-print-directory install PREFIX=/usr LIBDIR="/usr/lib/$ma" \
	UNITDIR=/lib/systemd/system DESTDIR="$stage" >"$work/install.log" 2>&1 ||
	{ cat "$work/install.log" >&2; exit 1; }
# As dh_strip does: no debugging symbols, no .comment or .note sections;
# the library's mode is not executable.
strip --remove-section=.comment --remove-section=.note --strip-unneeded \
	"$stage/usr/bin/cairn" "$stage/usr/bin/cairn-worker" "$stage/usr/lib/$ma/libcairn.so.$version"
strip --strip-debug --remove-section=.comment --remove-section=.note \
	--enable-deterministic-archives "$stage/usr/lib/$ma/libcairn.a"
chmod 644 "$stage/usr/lib/$ma/libcairn.so.$version"
gzip -9n "$stage"/usr/share/man/man*/*

# dpkg-shlibdeps and dpkg-gensymbols read debian/control of the current
# directory: a minimal one.
mkdir "$work/debian"
printf 'Source: cairn\n\nPackage: libcairn0\nArchitecture: any\n\nPackage: cairn\nArchitecture: any\n' \
	>"$work/debian/control"
shlibdeps() {
	(cd "$work" && dpkg-shlibdeps -O "$@") | sed -n 's/^shlibs:Depends=//p'
}

rm -f "$out"/*.deb
mkdir -p "$out"
printf '%s\n' "$PACKAGES" | while read -r pkg paths; do
	root="$work/$pkg"
	mkdir -p "$root/DEBIAN" "$root/usr/share/doc/$pkg"
	for p in $paths; do
		[ -e "$stage/$p" ] || [ -L "$stage/$p" ] ||
			{ echo "deb.sh: $p was not installed" >&2; exit 1; }
		mkdir -p "$root/$(dirname "$p")"
		mv "$stage/$p" "$root/$p"
	done
	install -m 644 "$deb/copyright" "$root/usr/share/doc/$pkg/copyright"
	gzip -9nc "$deb/changelog" >"$root/usr/share/doc/$pkg/changelog.Debian.gz"
	chmod 644 "$root/usr/share/doc/$pkg/changelog.Debian.gz"
	# The same overrides for every package; the file says why.
	install -D -m 644 "$deb/lintian-overrides" "$root/usr/share/lintian/overrides/$pkg"
	case $pkg in
	libcairn0)
		depends=$(shlibdeps -e"$root/usr/lib/$ma/libcairn.so.$version")
		# Programs linked against it depend on this version or later.
		echo "libcairn ${version%%.*} libcairn0 (>= $version)" >"$root/DEBIAN/shlibs"
		(cd "$work" && dpkg-gensymbols -plibcairn0 -v"$version" -P"$root" \
			-e"$root/usr/lib/$ma/libcairn.so.$version" -O"$root/DEBIAN/symbols" -q)
		# Which -dev package a build depending on these symbols needs.
		sed -i '1a * Build-Depends-Package: libcairn-dev' "$root/DEBIAN/symbols"
		# The library is in a directory of ld.so's cache.
		echo "activate-noawait ldconfig" >"$root/DEBIAN/triggers"
		;;
	libcairn-dev)
		depends="libcairn0 (= $debver)"
		for m in "$@"; do
			d=$(dpkg-query -S "$(pkg-config --variable=pcfiledir "$m")/$m.pc" | sed 's/:.*//')
			depends="$depends, ${d%%:*}"
		done
		;;
	cairn)
		depends=$(shlibdeps -e"$root/usr/bin/cairn" -e"$root/usr/bin/cairn-worker")
		echo /etc/cairn/cairn-worker.env >"$root/DEBIAN/conffiles"
		;;
	esac
	[ -n "$depends" ] || { echo "deb.sh: no dependencies found for $pkg" >&2; exit 1; }
	# Its paragraph of scripts/debian/control, with the fields made here.
	size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
	awk -v RS= -v pkg="$pkg" '$0 ~ "^Package: " pkg "\n" { print; exit }' "$deb/control" |
		sed -e "s|@DEPENDS@|$depends|" -e "/^Package:/a Version: $debver\\
Architecture: $arch\\
Maintainer: $maintainer\\
Installed-Size: $size" >"$root/DEBIAN/control"
	(cd "$root" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z |
		xargs -0 md5sum) >"$root/DEBIAN/md5sums"
	chmod 644 "$root/DEBIAN"/*
	dpkg-deb --root-owner-group -Zxz --build "$root" "$out/${pkg}_${debver}_$arch.deb" >/dev/null
	echo "$out/${pkg}_${debver}_$arch.deb"
done
left=$(cd "$stage" && find . ! -type d)
[ -z "$left" ] || { echo "deb.sh: installed but in no package: $left" >&2; exit 1; }
