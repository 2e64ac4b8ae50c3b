#!/usr/bin/python3
"""tests/cli/test_firstday2.py - more of what a new user ran into (issue 18).

diff: --rtol, the first differing element, --exclude, attributes, -0.0 vs
0.0 and NaN vs NaN (with and without --bitwise), --skip-tf-bookkeeping on a
TensorFlow checkpoint against its conversion; cat --slice in NumPy's text.

    test_firstday2.py --dvar build/cli/dvar --helper build/tests/cli/dvar_cli_helper
                      [--lib build/libdvar.so | --sanitized] [unittest args]
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli  # noqa: E402
from test_cli import CliCase, HelperMixin  # noqa: E402

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"


class DiffTest(CliCase, HelperMixin):
    def make(self, name, arrays):
        ckpt = self.path(name)
        self.import_arrays(ckpt, arrays)
        return ckpt

    def test_signed_zero_and_nan(self):
        nan2 = np.array([np.nan])
        nan2.view(np.uint64)[0] |= np.uint64(1)
        a = self.make("a", {"z": np.array([0.0, 1.0]), "n": np.array([np.nan]),
                            "h": np.array([0.0], np.float16)})
        b = self.make("b", {"z": np.array([-0.0, 1.0]), "n": nan2,
                            "h": np.array([-0.0], np.float16)})
        self.assertEqual(self.dvar("diff", a, b)[0], "identical: 3 variables, 4 elements\n")
        out, _ = self.dvar("diff", a, b, "--bitwise", code=1)
        self.assertIn("values differ: z: 1 of 2 elements, max abs diff 0\n"
                      "    first difference at [0]: 0 vs -0\n", out)
        self.assertIn("values differ: n: 1 of 1 elements, max abs diff 0\n"
                      "    first difference at [0]: nan vs nan\n", out)
        self.assertIn("values differ: h: 1 of 1 elements", out)
        doc = json.loads(self.dvar("diff", a, b, "--bitwise", "--json", code=1)[0])
        self.assertIs(doc["bitwise"], True)
        z = [v for v in doc["variables"] if v["name"] == "z"][0]
        self.assertEqual(z["first_difference"], {"index": [0], "a": "0", "b": "-0"})
        _, err = self.dvar("diff", a, b, "--bitwise", "--rtol", "0.1", code=2)
        self.assertIn("--bitwise wants equal bytes: it cannot go with a tolerance", err)

    def test_integers_compare_exactly(self):
        big = np.array([2 ** 60], np.int64)
        a = self.make("a", {"i": big})
        b = self.make("b", {"i": big + 1})
        out, _ = self.dvar("diff", a, b, code=1)
        self.assertIn("    first difference at [0]: %d vs %d\n" % (2 ** 60, 2 ** 60 + 1), out)

    def test_rtol_and_first_index(self):
        w = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
        w2 = w.copy()
        w2[1, 2] *= 1.01
        w2[2, 3] *= 1.001
        a = self.make("a", {"w": w})
        b = self.make("b", {"w": w2})
        out, _ = self.dvar("diff", a, b, code=1)
        self.assertIn("values differ: w: 2 of 12 elements, max abs diff ", out)
        self.assertIn("    first difference at [1,2]: 7 vs %s\n" % np.float32(7 * 1.01), out)
        out, _ = self.dvar("diff", a, b, "--rtol", "0.005", code=1)
        self.assertIn("values differ: w: 1 of 12 elements", out)
        self.assertIn("    first difference at [1,2]: ", out)
        self.assertEqual(self.dvar("diff", a, b, "--rtol", "0.02")[0],
                         "identical: 1 variable, 12 elements\n")
        # atol and rtol add up, as numpy.isclose's.
        self.dvar("diff", a, b, "--rtol", "0.005", "--atol", "0.07")
        doc = json.loads(self.dvar("diff", a, b, "--rtol", "0.005", "--json", code=1)[0])
        self.assertEqual((doc["rtol"], doc["atol"]), (0.005, None))
        fd = doc["variables"][0]["first_difference"]
        self.assertEqual((fd["index"], fd["a"]), ([1, 2], "7"))
        _, err = self.dvar("diff", a, b, "--rtol", "-1", code=2)
        self.assertIn("--rtol '-1'", err)

    def test_exclude(self):
        a = self.make("a", {"opt/m": np.zeros(2), "opt/v": np.zeros(2), "w": np.ones(3),
                            "step": np.zeros(1)})
        b = self.make("b", {"opt/m": np.ones(2), "w": np.ones(3)})
        self.dvar("diff", a, b, code=1)
        out, _ = self.dvar("diff", a, b, "--exclude", "opt/", "--exclude", "step")
        self.assertEqual(out, "identical: 1 variable, 3 elements; 4 left out\n")
        doc = json.loads(self.dvar("diff", a, b, "--exclude", "opt", "--exclude", "st",
                                   "--json")[0])
        self.assertEqual((doc["excluded"], doc["only_in_a"], doc["identical"]), (4, [], True))
        out, _ = self.dvar("diff", a, b, "--exclude", "opt/v", "--exclude", "step", code=1)
        self.assertEqual(out.splitlines()[-1],
                         "different: 0 only in A, 0 only in B, 0 with another dtype or shape, "
                         "1 with other values (of 2 in both; 2 left out)")

    def test_attributes(self):
        v = np.arange(6, dtype=np.float32)
        a, b = self.path("a"), self.path("b")
        self.helper_write(a, [("m", "float32", (6,), [("all", v)],
                               {"kind": "mirrored", "synchronization": "ON_WRITE",
                                "aggregation": "NONE"}),
                              ("p", "float32", (6,), [("all", v)], {"kind": "plain"})])
        self.helper_write(b, [("m", "float32", (6,), [("all", v)],
                               {"kind": "mirrored", "synchronization": "ON_WRITE",
                                "aggregation": "SUM"}),
                              ("p", "float32", (6,), [("all", v)], {"kind": "mirrored"})])
        out, _ = self.dvar("diff", a, b, code=1)
        self.assertEqual(out.splitlines(), [
            "attribute differs: m: aggregation: NONE vs SUM",
            "attribute differs: p: kind: plain vs mirrored",
            "different: 0 only in A, 0 only in B, 0 with another dtype or shape, 0 with other "
            "values, 2 with other attributes (of 2 in both)"])
        self.assertEqual(self.dvar("diff", a, b, "--no-attrs")[0],
                         "identical: 2 variables, 12 elements\n")
        self.dvar("diff", a, b, "--no-attrs", "--attrs", code=1)
        doc = json.loads(self.dvar("diff", a, b, "--json", code=1)[0])
        got = {x["name"]: x for x in doc["variables"]}
        self.assertEqual(got["m"]["status"], "equal")
        self.assertEqual(got["m"]["attributes_differ"], [{"key": "aggregation", "a": "NONE",
                                                          "b": "SUM"}])
        self.assertEqual(got["p"]["attributes_differ"], [{"key": "kind", "a": "plain",
                                                          "b": "mirrored"}])
        self.assertNotIn("attributes_differ",
                         json.loads(self.dvar("diff", a, a, "--json")[0])["variables"][0])

    def test_tf_conversion(self):
        tf = os.path.join(SOURCE_DIR, "fixtures", "tf", "optimizer_slots", "variables")
        conv = self.path("conv")
        self.dvar("export", "--single-shard", tf, conv)
        out, _ = self.dvar("diff", tf, conv, code=1)
        self.assertEqual(out.splitlines()[0], "only in A: %s" % GRAPH)
        self.assertEqual(self.dvar("diff", tf, conv, "--skip-tf-bookkeeping")[0],
                         "identical: 8 variables, 8 elements; 1 left out\n")
        # save_counter/... is bookkeeping too, on either side.
        counter = self.path("counter")
        self.import_arrays(counter, {"save_counter/.ATTRIBUTES/VARIABLE_VALUE":
                                     np.array(3, np.int64), "x": np.zeros(1)})
        self.dvar("diff", counter, self.make("plainx", {"x": np.zeros(1)}), code=1)
        self.assertEqual(self.dvar("diff", counter, self.path("plainx"),
                                   "--skip-tf-bookkeeping")[0],
                         "identical: 1 variable, 1 element; 1 left out\n")
        self.assertIn("--skip-tf-bookkeeping", self.dvar("diff", "--help")[0])

    def test_first_string_difference(self):
        a = os.path.join(SOURCE_DIR, "fixtures", "tf", "optimizer_slots", "variables")
        b = os.path.join(SOURCE_DIR, "fixtures", "tf", "vars_and_arithmetic", "variables")
        out, _ = self.dvar("diff", a, b, code=1)
        lines = out.splitlines()
        at = lines.index("values differ: %s: 1 of 1 strings" % GRAPH)
        # A long string is cut off after 64 bytes.
        self.assertRegex(lines[at + 1], r'^    first difference at \[\]: ".*"\.\.\. vs ".*"\.\.\.$')


class SliceTest(CliCase):
    def setUp(self):
        super().setUp()
        self.table = np.arange(40, dtype=np.int32).reshape(10, 4)
        self.ckpt = self.path("ckpt")
        self.import_arrays(self.ckpt, {"t": self.table, "v": np.arange(5.0)})

    def test_numpy_text(self):
        for spec, want in (("3:5", self.table[3:5]), ("3:5,:", self.table[3:5]),
                           ("2:4,1:", self.table[2:4, 1:]), (":,3", self.table[:, 3:4]),
                           ("-2:", self.table[-2:]), ("7", self.table[7:8]),
                           ("-1,-1", self.table[-1:, -1:]), ("0,2:-", self.table[0:2]),
                           ("1,3:1,2", self.table[1:4, 1:3])):
            with self.subTest(spec=spec):
                self.assert_same_array(self.cat_npy(self.ckpt, "t", "--slice", spec), want)
        # "1,2" is TensorFlow's: of a vector, 2 elements from 1.
        self.assertEqual(self.dvar("cat", self.ckpt, "v", "--slice", "1,2")[0], "[1, 2]\n")
        self.assertEqual(self.dvar("cat", self.ckpt, "v", "--slice", "1:2")[0], "[1]\n")
        doc = json.loads(self.dvar("cat", self.ckpt, "t", "--slice", "8:", "--json")[0])
        self.assertEqual(doc["slice"], {"start": [8, 0], "length": [2, 4]})

    def test_numpy_errors(self):
        for spec, message in (("5:3", "dimension 0 ('5:3') is not within its size 10"),
                              ("0:11", "is not within its size 10"),
                              ("1:2:3", "has a step"),
                              ("1:2,1:2,1:2", "has 3 dimensions but the shape [10,4] has 2"),
                              ("x", "is not NumPy's 'start:stop'")):
            with self.subTest(spec=spec):
                _, err = self.dvar("cat", self.ckpt, "t", "--slice", spec, code=2)
                self.assertTrue(err.startswith("dvar cat: --slice '%s': " % spec), err)
                self.assertIn(message, err)
        self.assertIn("NumPy's", self.dvar("cat", "--help")[0])


class ReshardHelpTest(CliCase):
    def test_partitioner_default_is_stated(self):
        out, _ = self.dvar("reshard", "--help")
        self.assertIn("min-size's MAX_SHARDS defaults to\n", out)
        self.assertIn("min-size:4M alone gives", out)


if __name__ == "__main__":
    test_cli.run(lambda args: [DiffTest, SliceTest, ReshardHelpTest])
