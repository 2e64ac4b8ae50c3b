#!/usr/bin/env bash
# cli-tour.sh - the dvar command on a fresh Debian machine: install the
# dependencies, build, then checkpoint a few NumPy arrays with the dvar
# command and read them back: list, inspect, verify, read a slice, diff two
# steps, reshard and export for serving, and catch a corrupted byte. Exits
# non-zero when any check fails.
# DVAR_BUILD_DIR picks the build tree (default build/).
set -euo pipefail
cd "$(dirname "$0")/.."
build=$PWD/${DVAR_BUILD_DIR:-build}
# Debian's interpreter, the one python3-numpy installs into; the python3 first
# on PATH may be another one without numpy.
py=/usr/bin/python3

section() { printf '\n== %s\n' "$*"; }
fail() {
	echo "demo: FAILED: $*" >&2
	exit 1
}
# Show each dvar command before its output, as if typed.
dvar() {
	echo "\$ dvar $*"
	"$build/cli/dvar" "$@"
}
# Run a dvar command that must exit with the given status.
expect_exit() {
	local want=$1 rc=0
	shift
	dvar "$@" || rc=$?
	[ "$rc" -eq "$want" ] || fail "'dvar $*' exited $rc, expected $want"
}

section "dependencies"
bash scripts/install-deps.sh

# Only the command is built; scripts/test.sh builds the rest in the same tree.
section "build (Release, in ${DVAR_BUILD_DIR:-build}/)"
if [ ! -f "$build/CMakeCache.txt" ]; then
	cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" -j2 --target dvar_cli >/dev/null
"$build/cli/dvar" --version

work=$(mktemp -d "${TMPDIR:-/tmp}/dvar-demo-XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

section "arrays made with numpy"
"$py" - <<'EOF'
import numpy as np

rng = np.random.default_rng(7)
emb = rng.standard_normal((10000, 64), dtype=np.float32)
emb[rng.permutation(10000)[:5000]] = 0    # half of the rows never trained
w = rng.standard_normal((256, 300))          # float64
ids = rng.integers(0, 1 << 40, 50000, dtype=np.int64)
np.save("emb.npy", emb)
np.save("w.npy", w)
np.save("ids.npy", ids)
# step 200: one training step changed 100 rows of the table
emb[100:200] += np.float32(0.5)
np.save("emb-200.npy", emb)
for name, a in (("emb", emb), ("w", w), ("ids", ids)):
    print(f"{name:4} {str(a.dtype):8} {str(a.shape):12} {a.nbytes:>9} bytes")
EOF

section "import two steps into a checkpoint root, keeping the last 2"
dvar import ckpt emb=emb.npy w=w.npy ids=ids.npy --step 100 --keep 2
dvar import ckpt emb=emb-200.npy w=w.npy ids=ids.npy --step 200 --keep 2

section "ls: the checkpoints under the root"
dvar ls ckpt

section "inspect: the latest checkpoint's variables"
dvar inspect ckpt

section "verify: every chunk's checksum"
expect_exit 0 verify ckpt/ckpt-100
expect_exit 0 verify ckpt

section "cat --slice: rows 100-349 of emb back to .npy"
dvar cat ckpt emb --slice 100,250:- --npy slice.npy
dvar cat ckpt/ckpt-100 w --slice 10,2:20,3
"$py" - <<'EOF' || fail "the slice read back differs from the array saved"
import numpy as np

got, want = np.load("slice.npy"), np.load("emb-200.npy")[100:350]
assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape)
assert np.array_equal(got, want)
print(f"slice.npy {got.dtype} {got.shape} equals emb[100:350] of step 200")
EOF

section "diff: step 100 against step 200 (exit 1: they differ)"
expect_exit 1 diff ckpt/ckpt-100 ckpt/ckpt-200
expect_exit 0 diff ckpt/ckpt-200 ckpt

section "reshard: emb into 3 shards, then 5, and back to one"
dvar reshard ckpt sharded3 --var emb=3
dvar inspect sharded3
dvar reshard sharded3 sharded5 --shards 5
expect_exit 0 diff sharded5 ckpt
dvar reshard sharded5 merged --var emb=1
expect_exit 0 diff merged ckpt

section "export: one full tensor per variable, for serving"
dvar export sharded5 serve.dvar --single-shard
dvar export sharded5 model.safetensors --single-shard --format safetensors
expect_exit 0 diff serve.dvar ckpt
"$py" - <<'EOF' || fail "the safetensors export differs from the arrays saved"
import json, struct
import numpy as np

with open("model.safetensors", "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    body = f.read()
want = {"emb": np.load("emb-200.npy"), "w": np.load("w.npy"), "ids": np.load("ids.npy")}
kinds = {"F32": np.float32, "F64": np.float64, "I64": np.int64}
for name, a in want.items():
    h = header[name]
    b, e = h["data_offsets"]
    got = np.frombuffer(body[b:e], dtype=kinds[h["dtype"]]).reshape(h["shape"])
    assert np.array_equal(got, a), name
print(f"model.safetensors: {len(want)} tensors equal the arrays saved")
EOF

section "verify catches a flipped byte"
cp -r ckpt/ckpt-200 broken
data=(broken/data-*)
"$py" - "${data[0]}" <<'EOF'
import os, sys

path = sys.argv[1]
with open(path, "r+b") as f:
    f.seek(os.path.getsize(path) // 2)
    b = f.read(1)
    f.seek(-1, os.SEEK_CUR)
    f.write(bytes([b[0] ^ 0xFF]))
print(f"flipped one byte in the middle of {os.path.basename(path)}")
EOF
expect_exit 1 verify broken

section "all checks passed"
