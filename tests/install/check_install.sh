#!/usr/bin/env bash
# Install a built dvar into a scratch prefix, then build a consumer against it
# with find_package(dvar) and with pkg-config, and run both.
# Usage: check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
libdir=$(ls -d "$tmp"/prefix/lib*/ | head -n1)
test -f "$tmp/prefix/include/dvar/dvar.h"
test -f "$libdir/pkgconfig/dvar.pc"
test -f "$libdir/cmake/dvar/dvarConfig.cmake"

cmake -S "$src/tests/install/consumer" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cm" >/dev/null
LD_LIBRARY_PATH="$libdir" "$tmp/cm/consumer" "$tmp/ck1"

PKG_CONFIG_PATH="$libdir/pkgconfig" cc -std=c11 -o "$tmp/pc" "$src/tests/install/consumer/main.c" \
	$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs dvar)
LD_LIBRARY_PATH="$libdir" "$tmp/pc" "$tmp/ck2"
echo "install: find_package and pkg-config consumers OK"
