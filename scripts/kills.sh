#!/usr/bin/env bash
# kills.sh - the full sweep of worker kills: TRIALS (default 60) runs of
# tests/unit/store/kill_random.sh, a third each killing one worker of three at
# a random moment of a save, a restore and a collective, with the checks of
# what survives and a summary (trials per operation, kill moments, mpirun's
# exit statuses, the longest time to the job's end). The test command runs
# six (ctest -R mpi/store/kill/random). Builds in build-kills/ (BUILD=DIR
# for another build directory).
#
#   bash scripts/kills.sh [TRIALS [SEED]]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build-kills}
if [ ! -f "$build/CMakeCache.txt" ]; then
	cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDVAR_BUILD_TESTS=ON -DDVAR_BUILD_CLI=ON \
		-DDVAR_WITH_CUDA=OFF -DDVAR_BUILD_BENCH=OFF -DDVAR_BUILD_EXAMPLES=OFF >/dev/null
fi
cmake --build "$build" -j"${JOBS:-2}" --target test_unit_store_kill_random dvar_cli >/dev/null
mpiexec=$(sed -n 's/^MPIEXEC_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bash tests/unit/store/kill_random.sh "${mpiexec:-mpiexec}" \
	"$build/tests/unit/store/test_unit_store_kill_random" "$build/cli/dvar" "$work" \
	"${1:-60}" ${2:+"$2"}
