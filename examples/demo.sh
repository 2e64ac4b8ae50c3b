#!/usr/bin/env bash
# demo.sh - the main job, end to end on a fresh Debian machine: install what
# is missing, build, train a click model on 2 workers x 2 replicas with a
# checkpoint every 50 steps (deltas, holding only what changed, between
# full checkpoints), resume it on another topology, check that a resume
# (from a delta) changes nothing, inspect and verify the checkpoint, reshard it to 3
# shards, export it as single tensors and serve queries from the export.
# Exits non-zero when any check fails. The files stay in DVAR_DEMO_DIR
# (default /tmp/dvar-demo); DVAR_BUILD_DIR picks the build tree (build/).
set -euo pipefail
cd "$(dirname "$0")/.."
build=$PWD/${DVAR_BUILD_DIR:-build}
work=${DVAR_DEMO_DIR:-/tmp/dvar-demo}
# Debian's interpreter (reads the JSON summaries); the python3 first on PATH
# may be another one.
py=/usr/bin/python3
t0=$SECONDS

section() { printf '\n== %s\n' "$*"; }
fail() {
	echo "demo: FAILED: $*" >&2
	exit 1
}
# Show a command before running it, as if typed (paths shortened); with
# -o FILE its output goes to FILE. Without it the output goes to the inherited
# stdout: redirecting to /dev/stdout would reopen, and so truncate, a log file.
show() {
	local out= line
	if [ "$1" = -o ]; then
		out=$2
		shift 2
	fi
	line="$*"
	line=${line//$build\//}
	line=${line//$work\//}
	if [ -z "$out" ]; then
		echo "\$ $line"
		"$@"
	else
		echo "\$ $line > $out"
		"$@" >"$out"
	fi
}
# Print a line of dvar-train's JSON summary in FILE: report FILE FORMAT,
# FORMAT in Python's str.format over the summary's fields.
report() { "$py" -c 'import json,sys; print(sys.argv[2].format(**json.load(open(sys.argv[1]))))' "$1" "$2"; }

section "dependencies"
bash scripts/install-deps.sh
# mpirun refuses to start as root without these.
if [ "$(id -u)" -eq 0 ]; then
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

section "build (Release, in ${DVAR_BUILD_DIR:-build}/)"
# With the CUDA Toolkit the replicas can live on a GPU (the resume below).
if [ ! -f "$build/CMakeCache.txt" ]; then
	mapfile -t cuda < <(bash scripts/cuda-flags.sh)
	cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "${cuda[@]}" >/dev/null
fi
cmake --build "$build" -j2 --target dvar_cli dvar_train dvar_serve >/dev/null
dvar=$build/cli/dvar
train=$build/examples/dvar-train
serve=$build/examples/dvar-serve
"$dvar" --version

rm -rf "$work"
mkdir -p "$work"
cd "$work"
mpi=(mpirun --oversubscribe --bind-to none)
progress=()
if [ -t 2 ]; then progress=(--progress --log-every 25); fi
cat >queries.txt <<'EOF'
# ids (their embedding rows are summed), then optionally ';' and 8 features
0 1 2 3
17 42 4242 199999 ; 0.5 -1 0.25 0 1 0 -0.5 2
123456
7 7 7 7 ; 1 1 1 1 1 1 1 1
EOF

section "train: 2 workers x 2 replicas, 4 embedding shards, to step 200, saving every 50"
show -o first.json "${mpi[@]}" -np 2 "$train" --ckpt "$work/ckpt" --replicas 2 --shards 4 \
	--steps 200 --save-every 50 --json "${progress[@]}"
report first.json 'step {step}: loss {loss:.4f}, accuracy {accuracy:.3f} (since step 0)'
# What each save wrote: a full checkpoint, then deltas holding only the
# embedding rows that changed (and the small dense variables whole).
"$py" - first.json <<'EOF'
import json, sys
saves = json.load(open(sys.argv[1]))["saves"]
full = next(s["bytes"] for s in saves if not s["delta"])
for s in saves:
    kind = "delta over %s, %d embedding rows" % (s["base"], s["rows_patched"]) if s["delta"] else "full"
    ratio = ", %.1fx smaller than the full one" % (full / s["bytes"]) if s["delta"] else ""
    print("ckpt-%-4d %-40s %6.2f MiB%s" % (s["step"], kind, s["bytes"] / 2**20, ratio))
EOF
show "$dvar" ls "$work/ckpt"
# Kept for the replay check below.
cp -r ckpt replay

section "resume on another topology: 1 worker x 3 replicas (on the GPU when there is one), 6 shards, to step 300"
show -o resumed.out "$train" --ckpt "$work/ckpt" --resume --replicas 3 --shards 6 --steps 300 \
	--save-every 50 --device auto --json --predict queries.txt "${progress[@]}"
grep '^{' resumed.out >resumed.json
grep '^ids=' resumed.out >trained-predictions.txt
where=CPU
[ "$(report resumed.json '{device}')" = cuda ] && where=GPU
report resumed.json "step {step}: loss {run_loss:.4f}, accuracy {run_accuracy:.3f} over steps {start_step}-{step}, replicas on the $where"

section "crash and resume: a worker dies at step 230; resuming ends bit for bit where an uninterrupted run does"
rc=0
show -o crash.out "${mpi[@]}" -np 2 "$train" --ckpt "$work/replay" --resume --replicas 2 \
	--shards 4 --steps 300 --save-every 50 --kill-at 230 --json 2>crash.log || rc=$?
[ "$rc" -ne 0 ] || fail "the run that was to crash at step 230 exited 0"
grep -h 'killing itself' crash.log || true
latest=$(sed -n 's/^model_checkpoint_path: *"\(.*\)"$/\1/p' replay/checkpoint)
echo "mpirun exited $rc; the latest checkpoint is $latest, $("$dvar" ls replay | awk -v n="$latest" '$2 == n { print ($0 ~ /delta over/ ? "a delta over " $NF : "a full one") }')"
show -o replay.json "${mpi[@]}" -np 2 "$train" --ckpt "$work/replay" --resume --replicas 2 \
	--shards 4 --steps 300 --save-every 50 --json
show -o straight.json "${mpi[@]}" -np 2 "$train" --ckpt "$work/straight" --replicas 2 --shards 4 \
	--steps 300 --save-every 50 --json
replay=$(report replay.json '{checksums}')
straight=$(report straight.json '{checksums}')
[ "$replay" = "$straight" ] || fail "crash + resume to 300 differs from 300 steps: $replay vs $straight"
report replay.json 'resumed at step {start_step}; CRC-32C of every variable at step 300, equal in both runs:'
report straight.json '{checksums}'

section "inspect and verify the latest checkpoint"
show "$dvar" inspect "$work/ckpt"
show "$dvar" verify "$work/ckpt"

section "reshard the embedding table offline: 6 shards -> 3"
show "$dvar" reshard "$work/ckpt" "$work/resharded" --shards 3
show "$dvar" diff "$work/ckpt" "$work/resharded"

section "export for serving: every variable one full tensor, mapped in place"
show "$dvar" export "$work/resharded" "$work/served" --single-shard --drop-prefix metrics/
show "$dvar" inspect "$work/served"

section "serve: predictions from the mapped export"
show "$serve" --rows "$work/served" queries.txt | cut -c1-110 | sed -n 1,6p
"$serve" "$work/served" queries.txt >served-predictions.txt
diff trained-predictions.txt served-predictions.txt >/dev/null ||
	fail "dvar-serve's predictions differ from the trained model's (see $work/*-predictions.txt)"
echo "the $(wc -l <served-predictions.txt) predictions equal the trained model's, bit for bit"

section "summary"
cat <<EOF
Trained the click model to step 200 on 2 workers x 2 replicas (4 shards),
resumed it to step 300 on 1 worker x 3 replicas (6 shards, on the $where), and checked
that a job whose worker was killed at step 230, resumed on its own
topology from a delta checkpoint, ends bit for bit where an uninterrupted
run does. Between full checkpoints the saves wrote deltas: only the
embedding rows that changed. The checkpoint
verified, was resharded to 3 shards and exported; dvar-serve mapped the
export and predicted what the trained model does.
Files, in $work:
  ckpt/                   the job's checkpoints ($(ls -d ckpt/ckpt-* | wc -l) kept; latest ckpt-300)
  resharded/              the latest checkpoint with the table in 3 shards
  served/                 the export dvar-serve maps
  queries.txt             the queries; *-predictions.txt the answers
  first.json, resumed.json  dvar-train's summaries
Done in $((SECONDS - t0)) s.
EOF
