#!/usr/bin/env bash
# test.sh - build dvar and run every test twice: a Release build in build/,
# then an AddressSanitizer + UBSan build in build-asan/; then every fuzz
# target of the decoders for a short while (scripts/fuzz.sh, FUZZ_SECONDS
# each, default 10; 0 leaves them out). Stops at the first failure with a
# non-zero exit. CI runs this (.ci/run); extra arguments go to both ctest
# runs (e.g. -L unit, -R cli).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-2}

fuzz_seconds=${FUZZ_SECONDS:-10}
if [ "$fuzz_seconds" -gt 0 ]; then
	bash scripts/install-deps.sh --fuzz
else
	bash scripts/install-deps.sh
fi

# mpirun refuses to start as root without these, and CI runs as root.
if [ "$(id -u)" -eq 0 ]; then
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

# Tests and CLI are named ON: a cache left by a hand-made build must not turn
# them off, or ctest would pass with nothing to run.
# The GPU backend builds wherever the CUDA Toolkit is (its tests skip,
# saying why, on a machine without a GPU); the sanitized build leaves it out.
mapfile -t cuda < <(bash scripts/cuda-flags.sh)

echo "== Release build (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DDVAR_BUILD_TESTS=ON -DDVAR_BUILD_CLI=ON "${cuda[@]}"
cmake --build build -j"$jobs"
echo "== tests (build/)"
ctest --test-dir build --output-on-failure --no-tests=error "$@"

echo "== AddressSanitizer + UBSan build (build-asan/)"
cmake -S . -B build-asan -DDVAR_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDVAR_BUILD_BENCH=OFF \
	-DDVAR_BUILD_TESTS=ON -DDVAR_BUILD_CLI=ON -DDVAR_WITH_CUDA=OFF -DDVAR_WITH_NCCL=OFF
cmake --build build-asan -j"$jobs"
echo "== tests (build-asan/)"
# Leak reports from inside OpenMPI, if any appear, belong in an LSan
# suppressions file passed as LSAN_OPTIONS=suppressions=FILE.
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	ctest --test-dir build-asan --output-on-failure --no-tests=error "$@"

if [ "$fuzz_seconds" -gt 0 ]; then
	echo "== fuzz targets, ${fuzz_seconds} s each (build-fuzz/)"
	JOBS=$jobs bash scripts/fuzz.sh "$fuzz_seconds"
fi

echo "== all tests passed"
