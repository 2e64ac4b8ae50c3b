#!/usr/bin/env bash
# fuzz.sh - build the libFuzzer targets (fuzz/) with clang, under
# AddressSanitizer and UBSan, in build-fuzz/, and run each one for SECONDS
# over its seed corpus (fuzz/corpus/TARGET, read only: new inputs go to
# build-fuzz/corpus/TARGET), from the random seed FUZZ_SEED (default 1, so a
# run repeats itself on one machine). Prints each target's executions; a crash, a
# leak or a failed check stops it with the input saved in build-fuzz/ and
# exits non-zero.
#
#   bash scripts/fuzz.sh SECONDS [TARGET ...]     (default: every target)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:?usage: scripts/fuzz.sh SECONDS [TARGET ...]}
shift
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
	targets=(index parts state tf npy zip safetensors specs)
fi
if ! command -v clang >/dev/null || ! command -v clang++ >/dev/null; then
	echo "fuzz.sh: clang is needed (apt-get install clang libclang-rt-14-dev)" >&2
	exit 1
fi
jobs=${JOBS:-2}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DDVAR_BUILD_FUZZ=ON -DDVAR_SANITIZE=ON -DDVAR_WITH_MPI=OFF -DDVAR_WITH_CUDA=OFF \
	-DDVAR_WITH_NCCL=OFF -DDVAR_BUILD_TESTS=OFF -DDVAR_BUILD_CLI=OFF -DDVAR_BUILD_BENCH=OFF \
	-DDVAR_BUILD_EXAMPLES=OFF >/dev/null
targets_built=()
for t in "${targets[@]}"; do targets_built+=(--target "fuzz_$t"); done
cmake --build build-fuzz -j"$jobs" "${targets_built[@]}" >/dev/null

status=0
for t in "${targets[@]}"; do
	work=build-fuzz/corpus/$t
	mkdir -p "$work"
	log=build-fuzz/fuzz_$t.log
	# Leaks are failures too; UBSan stops at the first report.
	if ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		"build-fuzz/fuzz/fuzz_$t" -max_total_time="$seconds" -rss_limit_mb=2048 \
		-artifact_prefix="build-fuzz/crash-$t-" -print_final_stats=1 -seed="${FUZZ_SEED:-1}" \
		"$work" "fuzz/corpus/$t" >"$log" 2>&1; then
		runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
		echo "fuzz_$t: ${runs:-?} executions in ${seconds} s, no failure"
	else
		echo "fuzz_$t: FAILED (log: $log)"
		grep -m5 -E 'ERROR|check failed|runtime error|SUMMARY' "$log" || tail -20 "$log"
		status=1
	fi
done
exit "$status"
