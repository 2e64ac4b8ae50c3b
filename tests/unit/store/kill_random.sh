#!/usr/bin/env bash
# tests/unit/store/kill_random.sh - trials of one worker of three SIGKILLed at
# a random moment of a save, a restore or a collective (test_store_kill_random.c
# says how), each followed by the checks of what survives.
#
#   kill_random.sh MPIEXEC PROGRAM DVAR_CLI WORKDIR TRIALS [SEED]
#
# Trial t runs with seed S = SEED + t the operation S mod 3 (save, restore,
# collective): `mpirun -np 3 PROGRAM --run WORK OP SEED+t`, without
# --enable-recovery or timeout_ms, as a job normally runs. OpenMPI 4.1 ends
# the job when a worker dies: its daemon sees the child exit, and mpirun has
# every other worker sent SIGCONT and SIGTERM, then SIGKILL after
# odls_base_sigkill_timeout (1 s) if it is still there; mpirun then exits
# non-zero. So the job ends a few seconds after the kill; it runs under
# `timeout KILL_BOUND` (default 60 s: mpirun's start on busy cores, the
# timed iteration, at most two more until the kill and the abort all fit
# many times over), and reaching the bound is a hang, a failure. A status
# of 0 is a failure too. Then `DVAR_CLI ls` of the root must list neither a
# checkpoint nor a leftover other than what PROGRAM --check accepts, and
# `PROGRAM --check WORK OP`, alone, decides the trial.
#
# SEED defaults to KILL_SEED from the environment, else a fresh one; it is
# printed, and `kill_random.sh ... 1 S` repeats the trial of seed S (the
# same victim and moment, as a fraction of the timed iteration). Prints one
# line per trial and a summary: trials per operation, the kill moments (how
# far into an iteration of the operation, as a fraction of the iteration
# before it), mpirun's exit statuses, the longest time from the kill to
# mpirun's end and to every worker's process gone, what the survivors saw,
# and how many saves were killed after their commit or left a leftover.
set -u

if [ $# -lt 5 ] || [ $# -gt 6 ]; then
	echo "usage: $0 MPIEXEC PROGRAM DVAR_CLI WORKDIR TRIALS [SEED]" >&2
	exit 2
fi
mpiexec=$1
program=$2
cli=$3
work=$4
trials=$5
seed=${6:-${KILL_SEED:-$(( $(date +%s%N) % 1000000000 ))}}
bound=${KILL_BOUND:-60}
ops=(save restore collective)

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "== $trials trials from seed $seed (mpirun bound ${bound} s)"
declare -A per_op statuses
failed=0
max_end_ms=0
max_gone_ms=0
survivors_term=0
survivors_returned=0
after_commit=0
with_leftover=0
fractions=()
for ((t = 0; t < trials; t++)); do
	s=$((seed + t))
	op=${ops[$((s % 3))]}
	dir=$work/trial-$t
	rm -rf "$dir"
	mkdir -p "$dir" || exit 1
	log=$dir/mpirun.log
	timeout -k 10 "$bound" "$mpiexec" -np 3 --oversubscribe --bind-to none \
		"$program" --run "$dir" "$op" "$s" >"$log" 2>&1
	status=$?
	end_ns=$(date +%s%N)
	# mpirun may return before its dead workers are reaped (zombies until
	# init collects them), and the next save sweeps a leftover only once
	# its writer's process id is gone: wait for that, within the bound too.
	pids=$(cat "$dir"/pid-* 2>/dev/null)
	for ((w = 0; w < bound * 10; w++)); do
		alive=0
		for p in $pids; do
			kill -0 "$p" 2>/dev/null && alive=1
		done
		[ "$alive" -eq 0 ] && break
		sleep 0.1
	done
	gone_ns=$(date +%s%N)
	per_op[$op]=$((${per_op[$op]:-0} + 1))
	statuses[$status]=$((${statuses[$status]:-0} + 1))
	why=""
	if [ "$status" -eq 124 ]; then
		why="mpirun did not end within ${bound} s: a hang"
	elif [ "$alive" -ne 0 ]; then
		why="a worker of the job still runs ${bound} s after mpirun ended"
	elif [ "$status" -eq 0 ]; then
		why="mpirun succeeded, but a worker should have been killed"
	fi
	killed=$(cat "$dir/killed" 2>/dev/null)
	end_ms=-1
	gone_ms=-1
	if [[ $killed =~ realtime_ns=([0-9]+) ]]; then
		end_ms=$(((end_ns - BASH_REMATCH[1]) / 1000000))
		gone_ms=$(((gone_ns - BASH_REMATCH[1]) / 1000000))
		((end_ms > max_end_ms)) && max_end_ms=$end_ms
		((gone_ms > max_gone_ms)) && max_gone_ms=$gone_ms
	fi
	if [[ $killed =~ into_us=([0-9-]+)\ last_us=([0-9]+) ]]; then
		fractions+=("$(awk -v a="${BASH_REMATCH[1]}" -v b="${BASH_REMATCH[2]}" \
			'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')")
	fi
	# What a user's `dvar ls` shows: no checkpoint of the interrupted step.
	"$cli" ls "$dir/root" >"$dir/ls.txt" 2>&1 || why=${why:-"dvar ls failed: $(cat "$dir/ls.txt")"}
	if [ -z "$why" ]; then
		"$program" --check "$dir" "$op" >"$dir/check.log" 2>&1 || why="the check failed"
	fi
	result=$(grep '^RESULT' "$dir/check.log" 2>/dev/null)
	# What the two survivors saw: SIGTERM from mpirun, or a call returning.
	term=$(grep -c 'SIGTERM during' "$dir/check.log" 2>/dev/null)
	returned=$(grep -c "survivor's call returned" "$dir/check.log" 2>/dev/null)
	survivors_term=$((survivors_term + ${term:-0}))
	survivors_returned=$((survivors_returned + ${returned:-0}))
	if [[ $result =~ committed=([0-9]+)\ latest=([0-9]+)\ leftovers=([0-9]+) ]]; then
		((BASH_REMATCH[2] > BASH_REMATCH[1])) && after_commit=$((after_commit + 1))
		((BASH_REMATCH[3] > 0)) && with_leftover=$((with_leftover + 1))
	fi
	# `dvar ls` agrees: the latest marked, nothing past the last listed.
	if [ -z "$why" ] && [[ $result =~ latest=([0-9]+).*listed=([0-9]+) ]]; then
		latest=${BASH_REMATCH[1]}
		listed=${BASH_REMATCH[2]}
		if [ -n "$(awk -v n="ckpt-$((listed + 1))" '$2 == n' "$dir/ls.txt")" ]; then
			why="dvar ls lists ckpt-$((listed + 1)), which was never committed"
		elif [ -z "$(awk -v n="ckpt-$latest" '$2 == n && /latest/' "$dir/ls.txt")" ]; then
			why="dvar ls does not mark ckpt-$latest the latest"
		fi
	fi
	echo "trial $t seed $s $op: mpirun status $status, ended ${end_ms} ms after the kill," \
		"its workers ${gone_ms} ms;" \
		"${killed:-no kill recorded}"
	echo "  ${result:-no result}"
	if [ -n "$why" ]; then
		failed=$((failed + 1))
		echo "  FAIL: $why; reproduce with: $0 $mpiexec $program $cli $work 1 $s"
		sed 's/^/  | /' "$log" "$dir/ls.txt" "$dir/check.log" 2>/dev/null | tail -60
	else
		rm -rf "$dir"
	fi
done

echo "== summary of $trials trials from seed $seed"
for op in "${ops[@]}"; do
	echo "  $op: ${per_op[$op]:-0} trials"
done
for st in "${!statuses[@]}"; do
	echo "  mpirun exit status $st: ${statuses[$st]} trials"
done
if [ ${#fractions[@]} -gt 0 ]; then
	printf '%s\n' "${fractions[@]}" | sort -n | awk '
		{ v[NR] = $1 }
		END { printf "  kill moments (fraction of an iteration): min %s, median %s, max %s; ",
		             v[1], v[int((NR + 1) / 2)], v[NR]
		      n1 = 0; for (i = 1; i <= NR; i++) if (v[i] < 0.5) n1++
		      printf "%d of %d in its first half\n", n1, NR }'
fi
echo "  survivors that died of mpirun's SIGTERM: $survivors_term; whose call returned: $survivors_returned"
echo "  saves killed after their commit (the latest is the new step): $after_commit;" \
	"trials that left a leftover for the next save: $with_leftover"
echo "  longest time from the kill to mpirun's end: ${max_end_ms} ms, to every worker gone: ${max_gone_ms} ms"
echo "  failed: $failed of $trials"
[ "$failed" -eq 0 ]
