#!/usr/bin/env bash
# install-deps.sh - install the Debian packages dvar builds and tests with;
# with --fuzz also clang and its runtimes, which the fuzz targets need
# (scripts/fuzz.sh; scripts/test.sh runs them).
#
# Quick when everything is there: each package is checked with dpkg first and
# apt-get runs only for what is missing. As root it installs them; otherwise
# it prints the command to run and exits 1.
set -euo pipefail

# make is only a recommendation of cmake, and recommendations are not
# installed. libsnappy-dev is not a dependency of libleveldb-dev, yet
# LevelDB's CMake package links -lsnappy.
packages=(cmake make g++ pkg-config libleveldb-dev libsnappy-dev liblz4-dev zlib1g-dev
	libopenmpi-dev openmpi-bin libcmocka-dev python3-numpy python3-pytest)
if [ "${1:-}" = --fuzz ]; then
	packages+=(clang libclang-rt-14-dev)
fi

if ! command -v dpkg >/dev/null 2>&1; then
	echo "install-deps: not a Debian-based system; install these (or their equivalents):" >&2
	echo "  ${packages[*]}" >&2
	exit 1
fi

missing=()
for p in "${packages[@]}"; do
	# dpkg -s also succeeds for removed packages that left config files behind.
	if ! dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed'; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "install-deps: all ${#packages[@]} packages present"
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "install-deps: missing packages: ${missing[*]}" >&2
	echo "run as root:" >&2
	echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
	exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
