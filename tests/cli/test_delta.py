#!/usr/bin/python3
"""tests/cli/test_delta.py - every read command on delta checkpoints.

A root holds ckpt-1 (full: a sharded table, a vector, a scalar), ckpt-2 (a
delta over it: rows of the table replaced, the vector unchanged, the scalar
rewritten) and ckpt-3 (a delta over ckpt-2), written by cli_helper through
dvar_writer_set_base / _add_rows / _add_unchanged. `cat` gives the values a
full checkpoint of the same state would; `inspect` shows the chain and each
link's bytes; `verify` checks every link and names a damaged base's file;
a missing base is named; `export` and `reshard` write self-contained
checkpoints with the same digests; `diff` finds no difference from the
export; `ls` shows what depends on what.

    test_delta.py --dvar build/cli/dvar --helper build/tests/cli/dvar_cli_helper
                  [--lib build/libdvar.so | --sanitized] [unittest args]
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli  # noqa: E402
from test_cli import CliCase, HelperMixin  # noqa: E402


class DeltaTest(CliCase, HelperMixin):
    group = "delta"

    def setUp(self):
        super().setUp()
        self.root = self.path("root")
        os.mkdir(self.root)
        self.emb = self.rng.standard_normal((40, 3)).astype(np.float32)
        self.bias = np.arange(5, dtype=np.float64)
        self.helper_write(self.ck(1), [
            ("emb", "float32", (40, 3), [("0,20:-", self.emb[:20]), ("20,20:-", self.emb[20:])],
             {"kind": "sharded"}),
            ("bias", "float64", (5,), [("all", self.bias)], {}),
            ("step", "int64", (), [("all", np.array(1, np.int64))], {}),
        ])
        self.states = {1: (self.emb.copy(), self.bias.copy(), 1)}
        self.delta(2, 1, [2, 7, 33], bias_rows=None)
        self.delta(3, 2, [0, 7, 39], bias_rows=[4])

    def ck(self, step):
        return os.path.join(self.root, "ckpt-%d" % step)

    def raw(self, arr):
        path = self.path("raw-%d.bin" % len(os.listdir(self.dir)))
        with open(path, "wb") as f:
            f.write(np.ascontiguousarray(arr).tobytes())
        return path

    def delta(self, step, base, rows, bias_rows):
        emb, bias, s = (a.copy() if isinstance(a, np.ndarray) else a for a in self.states[base])
        emb[rows] = self.rng.standard_normal((len(rows), 3)).astype(np.float32)
        lines = ["base %s" % self.ck(base), "var emb float32 40,3",
                 "rows %s %s" % (",".join(map(str, rows)), self.raw(emb[rows])),
                 "attr kind sharded", "var bias float64 5"]
        if bias_rows is None:
            lines.append("unchanged")
        else:
            bias[bias_rows] = -float(step)
            lines.append("rows %s %s" % (",".join(map(str, bias_rows)), self.raw(bias[bias_rows])))
        s = step
        lines += ["var step int64 -", "slice all %s" % self.raw(np.array(s, np.int64))]
        spec = self.path("spec-%d.txt" % step)
        with open(spec, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.helper("write", self.ck(step), spec)
        self.states[step] = (emb, bias, s)

    def assert_state(self, ckpt, step):
        emb, bias, s = self.states[step]
        self.assert_same_array(self.cat_npy(ckpt, "emb"), emb)
        self.assert_same_array(self.cat_npy(ckpt, "bias"), bias)
        self.assert_same_array(self.cat_npy(ckpt, "step"), np.array(s, np.int64))

    def test_cat_reads_every_link(self):
        for step in (1, 2, 3):
            self.assert_state(self.ck(step), step)
        # A row range and a column, read through two patches.
        got = self.cat_npy(self.ck(3), "emb", "--slice", "5:9,1:2")
        self.assert_same_array(got, self.states[3][0][5:9, 1:2])

    def test_inspect_shows_the_chain(self):
        out, err = self.dvar("inspect", self.ck(3))
        self.assertEqual(err, "")
        self.assertIn("a delta: 3 checkpoints are read for it, this one first", out)
        lines = [l.split() for l in out.splitlines() if l.startswith("  %s" % self.root)]
        self.assertEqual([(l[0], l[1]) for l in lines],
                         [(self.ck(3), "delta"), (self.ck(2), "delta"), (self.ck(1), "full")])
        doc = self.inspect_json(self.ck(3))
        self.assertEqual([(c["path"], c["delta"], c["whole"], c["unchanged"], c["patched"])
                          for c in doc["chain"]],
                         [(self.ck(3), True, 1, 0, 2), (self.ck(2), True, 1, 1, 1),
                          (self.ck(1), False, 3, 0, 0)])
        for c in doc["chain"]:
            files = self.data_files(c["path"])
            self.assertEqual(c["bytes"], sum(os.path.getsize(f) for f in files))
        by_name = {v["name"]: v for v in doc["variables"]}
        self.assertEqual(by_name["emb"]["delta"]["kind"], "patched")
        self.assertEqual(by_name["emb"]["delta"]["rows"], 3)
        self.assertEqual(by_name["emb"]["delta"]["raw_bytes"], 3 * 8 + 3 * 3 * 4)
        self.assertEqual(by_name["step"]["delta"]["kind"], "full")
        # Described as saved in full: the table's two slices, its attributes.
        self.assertEqual(len(by_name["emb"]["slices"]), 2)
        self.assertEqual(by_name["emb"]["attributes"], {"kind": "sharded"})
        self.assertEqual(self.inspect_json(self.ck(2))["variables"][0]["delta"]["kind"],
                         "unchanged")
        self.assertNotIn("chain", self.inspect_json(self.ck(1)))

    def test_verify_checks_every_link(self):
        out, err = self.dvar("verify", self.ck(3))
        data = self.data_files(self.ck(1))[0]
        with open(data, "r+b") as f:
            f.seek(8)
            b = f.read(1)
            f.seek(8)
            f.write(bytes([b[0] ^ 0xFF]))
        out, err = self.dvar("verify", self.ck(3), code=1)
        self.assertIn(data, out + err)
        _, err = self.dvar("cat", self.ck(3), "emb", code=3)
        self.assertIn(data, err)

    def test_missing_base_is_named(self):
        os.rename(self.ck(1), self.path("away"))
        _, err = self.dvar("cat", self.ck(3), "bias", code=3)
        self.assertIn("it is a delta over '%s', which is missing" % self.ck(1), err)
        _, err = self.dvar("verify", self.ck(2), code=3)
        self.assertIn("which is missing", err)

    def test_export_and_reshard_are_self_contained(self):
        exported, resharded = self.path("exported"), self.path("resharded")
        self.dvar("export", self.ck(3), exported, "--single-shard")
        self.dvar("reshard", self.ck(3), resharded, "--shards", "3")
        digests = self.dvar("digest", self.ck(3))[0]
        for out in (exported, resharded):
            self.assertNotIn("chain", self.inspect_json(out))
            self.assert_state(out, 3)
            self.assertEqual(self.dvar("digest", out)[0], digests)
        self.assertEqual(len(self.layout(resharded)["emb"][2]), 3)
        out, _ = self.dvar("diff", self.ck(3), exported)
        self.dvar("diff", self.ck(2), exported, code=1)

    def test_ls_shows_what_depends_on_what(self):
        out, _ = self.dvar("ls", self.root)
        rows = {l.split()[1]: l.split()[-1] for l in out.splitlines()[1:]}
        self.assertEqual(rows["ckpt-3"].split(",")[-1], "ckpt-2")
        self.assertIn("delta over ckpt-2", out)
        self.assertIn("delta over ckpt-1", out)
        doc = json.loads(self.dvar("ls", self.root, "--json")[0])
        self.assertEqual([(c["name"], c["base"]) for c in doc["checkpoints"]],
                         [("ckpt-1", None), ("ckpt-2", "ckpt-1"), ("ckpt-3", "ckpt-2")])


if __name__ == "__main__":
    test_cli.run(lambda args: [DeltaTest])
