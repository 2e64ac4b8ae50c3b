#!/usr/bin/env bash
# tests/unit/store/kill_during_save.sh - a worker SIGKILLed in the middle of
# dvar_save (test_store_kill.c says how), then a check of what survives.
#
#   kill_during_save.sh MPIEXEC PROGRAM WORKDIR abort|recover|delta
#
# abort: `mpirun -np 2 PROGRAM --save WORKDIR`, no timeout. OpenMPI 4.1 ends
#   the job when worker 1 dies: its daemon sends worker 0 SIGCONT, then
#   SIGTERM a second later (odls_base_sigkill_timeout), then SIGKILL; mpirun
#   exits with 128 + 9. A status of 0 is a failure.
# recover: `mpirun --enable-recovery ... --save WORKDIR --timeout-ms 3000`:
#   OpenMPI leaves worker 0 running, its collective times out and its save
#   must return DVAR_ECOMM (checked with --survivor); mpirun's status then
#   depends on how worker 0 left and is not checked.
# delta: abort's run with delta saves (DVAR_KILL_DELTA=1): the kill comes
#   while worker 1 writes a row patch of a delta over ckpt-1.
# Either way `PROGRAM --check WORKDIR`, run alone, decides the test.
set -u

if [ $# -ne 4 ] || { [ "$4" != abort ] && [ "$4" != recover ] && [ "$4" != delta ]; }; then
	echo "usage: $0 MPIEXEC PROGRAM WORKDIR abort|recover|delta" >&2
	exit 2
fi
mpiexec=$1
program=$2
work=$3
mode=$4

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

rm -rf "$work"
mkdir -p "$work" || exit 1

if [ "$mode" = delta ]; then
	export DVAR_KILL_DELTA=1
fi
if [ "$mode" = abort ] || [ "$mode" = delta ]; then
	run=("$mpiexec" -np 2 --oversubscribe --bind-to none "$program" --save "$work")
	check=("$program" --check "$work")
else
	run=("$mpiexec" -np 2 --oversubscribe --bind-to none --enable-recovery
	     "$program" --save "$work" --timeout-ms 3000)
	check=("$program" --check "$work" --survivor)
fi

echo "== ${run[*]}"
start=$(date +%s%N)
"${run[@]}"
status=$?
end=$(date +%s%N)
echo "== mpirun exited with status $status after $(((end - start) / 1000000)) ms"
if [ "$mode" != recover ] && [ "$status" -eq 0 ]; then
	echo "FAIL: mpirun succeeded, but worker 1 should have been killed" >&2
	exit 1
fi

echo "== ${check[*]}"
"${check[@]}"
status=$?
if [ "$status" -eq 0 ]; then
	rm -rf "$work"
fi
exit "$status"
