#!/usr/bin/env bash
# faults.sh - the full fault-injection sweep: every file-system call of each
# writing operation (a save with retention, a delta save, an asynchronous
# save, import, reshard, export in every format, a write of chunks large
# enough for O_DIRECT, and a save of two workers
# under mpirun -np 2 with the fault in worker 1, in the chief writing its
# part or committing, synchronous and asynchronous) failed in turn with
# every fault kind (EIO, ENOSPC, EDQUOT, a short write or read, a crash,
# EINTR, a partial write), and of each reading one (every way of reading a checkpoint, and a
# restore) with EIO, a short read and EINTR, each followed by the checks of
# tests/fault/fault_driver.c; then every allocation of each one-process
# operation, failed in turn (out of memory); and every allocation of the
# dvar command's operations, and of libdvar's under the Python package's
# and in both workers of a training run (tests/fault/cli_alloc.py). The test command (ctest -L fault) runs a
# sample of the first, the second but for a sample of read's, and the
# third but for a fifth of the Python trials; this runs them all. Builds in
# build-faults/; MPIEXEC (default mpirun) runs the two-worker jobs.
#
#   bash scripts/faults.sh [OP ...]
set -euo pipefail
cd "$(dirname "$0")/.."
ops=("$@")
if [ ${#ops[@]} -eq 0 ]; then
	ops=(save delta async import reshard export-dvar export-safetensors export-tf export-npy
		write read restore diff runtime w2-rank1 w2-rank0 w2-commit w2-async-rank1 w2-async-rank0)
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Every option it needs is named: a build-faults/ configured otherwise before keeps its cache.
cmake -S . -B build-faults -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDVAR_WITH_CUDA=OFF \
	-DDVAR_BUILD_BENCH=OFF -DDVAR_BUILD_TESTS=ON -DDVAR_BUILD_CLI=ON -DDVAR_WITH_MPI=ON \
	-DDVAR_BUILD_EXAMPLES=ON -DDVAR_SANITIZE=OFF >/dev/null
cmake --build build-faults -j"${JOBS:-2}" --target fault_driver dvar_fault dvar_cli dvar_train >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for op in "${ops[@]}"; do
	LD_PRELOAD=$PWD/build-faults/tests/fault/libdvar_fault.so \
		build-faults/tests/fault/fault_driver "$op" "$work/$op" --mpiexec "${MPIEXEC:-mpirun}" |
		grep -v '^  (' || status=1
	# Every allocation, where the operation runs in one process.
	case $op in w2-*) continue ;; esac
	LD_PRELOAD=$PWD/build-faults/tests/fault/libdvar_fault.so \
		build-faults/tests/fault/fault_driver "$op" "$work/alloc-$op" --alloc 1 |
		grep -v '^  (' || status=1
done
# The dvar command and the Python package, when no operation was named.
if [ $# -eq 0 ]; then
	/usr/bin/python3 tests/fault/cli_alloc.py --dvar build-faults/cli/dvar \
		--shim build-faults/tests/fault/libdvar_fault.so --fixtures fixtures \
		--lib "$PWD/build-faults/libdvar.so" --train build-faults/examples/dvar-train \
		--mpiexec "${MPIEXEC:-mpirun}" --work "$work/cli" || status=1
fi
exit "$status"
