#!/usr/bin/python3
"""tests/examples/test_serve.py - runs the built dvar-serve on a click model
made from numpy arrays (`dvar import`, then `dvar export --single-shard`) and
checks its predictions against a float32 numpy reimplementation of
model_logit (examples/model.c), its rows bit for bit, its JSON, and its exit
codes and messages.

    test_serve.py --serve build/examples/dvar-serve --dvar build/cli/dvar
                  [--train build/examples/dvar-train] [unittest args]

With --train, it also checks that dvar-serve, on the export of what
dvar-train saved, prints dvar-train --predict's lines byte for byte.
"""
import argparse
import glob
import json
import math
import os
import pty
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import zlib

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from ptyrun import run_with_tty_stderr  # noqa: E402

SERVE = None  # dvar-serve, under test
DVAR = None   # the dvar command, to make checkpoints
TRAIN = None  # dvar-train, to compare predictions with (optional)

VOCAB, DIM, FEATURES = 1000, 8, 8
PREDICTION = re.compile(r"^ids=(\d+(?:,\d+)*) p=(\S+) logit=(\S+)$")
ROW = re.compile(r"^  row (\d+):((?: \S+)*)$")


def reference(emb, kernel, bias, ids, features):
    """model_logit and model_sigmoid in float32, in model.c's order: each
    pooled value summed over the ids in order, then the dot product
    accumulated c = 0..dim-1, then the features."""
    f32 = np.float32
    z = f32(bias[0])
    for c in range(emb.shape[1]):
        s = f32(0)
        for k in ids:
            s = f32(s + emb[k, c])
        z = f32(z + f32(s * kernel[c, 0]))
    if features is not None:
        for f in range(FEATURES):
            z = f32(z + f32(features[f] * kernel[emb.shape[1] + f, 0]))
    p = f32(f32(1) / f32(f32(1) + np.exp(f32(-z))))
    return float(p), float(z)


def close(got, want):
    return math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-6)


class ServeCase(unittest.TestCase):
    """Each test runs in a fresh temporary directory with a random model."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="dvar-serve-")
        # A cleanup, not tearDown: it runs even when a setUp skips or fails.
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.rng = np.random.default_rng(zlib.crc32(self.id().encode()))
        self.emb = (self.rng.standard_normal((VOCAB, DIM)) * 0.5).astype(np.float32)
        self.kernel = self.rng.standard_normal((DIM + FEATURES, 1)).astype(np.float32)
        self.bias = np.array([self.rng.standard_normal()], np.float32)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def run_prog(self, prog, args, code, stdin=None):
        p = subprocess.run([prog] + [str(a) for a in args], input=stdin, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=dict(os.environ, LC_ALL="C"))
        out = p.stdout.decode("utf-8", "replace")
        err = p.stderr.decode("utf-8", "replace")
        self.assertEqual(p.returncode, code,
                         "%s %s exited %d, expected %d\nstdout: %s\nstderr: %s"
                         % (os.path.basename(prog), " ".join(map(str, args)), p.returncode,
                            code, out[-2000:], err[-2000:]))
        return out, err

    def dvar(self, *args, code=0):
        return self.run_prog(DVAR, args, code)

    def serve(self, *args, code=0, stdin=None):
        return self.run_prog(SERVE, args, code, stdin=stdin)

    def model_arrays(self, **changes):
        """The model's variables plus some that serve ignores; changes
        replace (or, given None, drop) variables."""
        arrays = {"embedding": self.emb, "dense/kernel": self.kernel, "dense/bias": self.bias,
                  "global_step": np.array(1234, np.int64),
                  "metrics/loss_nanos": np.array(5, np.int64)}
        for name, value in changes.items():
            name = name.replace("__", "/")
            if value is None:
                del arrays[name]
            else:
                arrays[name] = value
        return arrays

    def import_arrays(self, out, arrays, *opts):
        pairs = []
        for k, (name, arr) in enumerate(arrays.items()):
            npy = self.path("a%d-%d.npy" % (len(os.listdir(self.dir)), k))
            np.save(npy, arr)
            pairs.append("%s=%s" % (name, npy))
        self.dvar("import", out, *pairs, *opts)
        return out

    def export(self, arrays=None, *import_opts):
        """Import (embedding in 4 shards unless told otherwise), then export."""
        src = self.path("src%d" % len(os.listdir(self.dir)))
        opts = import_opts or ("--shards", "embedding=4")
        self.import_arrays(src, arrays or self.model_arrays(), *opts)
        out = src + "-export"
        self.dvar("export", src, out, "--single-shard")
        return out

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def queries(self, n):
        """n random queries: (ids, features or None) and their text, with
        comments, blank lines and odd spacing mixed in."""
        qs, lines = [], ["# queries", ""]
        for k in range(n):
            nids = int(self.rng.integers(1, 7))
            ids = [int(i) for i in self.rng.integers(0, VOCAB, nids)]
            if k % 5 == 0:
                ids.append(ids[0])  # a repeated id counts twice
            if k == 0:
                ids = [0, VOCAB - 1]
            feats = None
            text = " ".join(map(str, ids))
            if k % 2:
                feats = self.rng.standard_normal(FEATURES).astype(np.float32)
                text += " ; " + " ".join("%.9g" % f for f in feats)
            if k % 7 == 3:
                text = "\t " + text.replace(" ", "   ") + "  "
            qs.append((ids, feats))
            lines.append(text)
            if k % 11 == 5:
                lines += ["", "   # a comment"]
        return qs, "\n".join(lines) + "\n"

    def check_predictions(self, out, qs, rows=False):
        lines = out.splitlines()
        k = 0
        for ids, feats in qs:
            m = PREDICTION.match(lines[k])
            self.assertIsNotNone(m, lines[k])
            self.assertEqual([int(i) for i in m.group(1).split(",")], ids)
            p, z = reference(self.emb, self.kernel, self.bias, ids, feats)
            self.assertTrue(close(float(m.group(2)), p), (lines[k], p, z))
            self.assertTrue(close(float(m.group(3)), z), (lines[k], p, z))
            k += 1
            if rows:
                for i in ids:
                    r = ROW.match(lines[k])
                    self.assertIsNotNone(r, lines[k])
                    self.assertEqual(int(r.group(1)), i)
                    got = np.array([float(v) for v in r.group(2).split()], np.float32)
                    self.assertEqual(got.tobytes(), self.emb[i].tobytes(), lines[k])
                    k += 1
        self.assertEqual(k, len(lines))


class PredictTest(ServeCase):
    def test_predictions_match_numpy(self):
        exp = self.export()
        qs, text = self.queries(200)
        out, err = self.serve(exp, self.write("q.txt", text))
        self.assertEqual(err, "")  # quiet off a terminal
        self.check_predictions(out, qs)

    def test_rows_are_exact(self):
        exp = self.export()
        qs, text = self.queries(40)
        out, _ = self.serve("--rows", exp, self.write("q.txt", text))
        self.check_predictions(out, qs, rows=True)

    def test_json(self):
        exp = self.export()
        qs, text = self.queries(50)
        q = self.write("q.txt", text)
        plain, _ = self.serve(exp, q)
        for opts in ([], ["--rows"]):
            out, err = self.serve("--json", *opts, exp, q)
            self.assertEqual(err, "")
            docs = [json.loads(line) for line in out.splitlines()]
            self.assertEqual(len(docs), len(qs))
            for doc, (ids, feats), line in zip(docs, qs, plain.splitlines()):
                want = {"ids", "p", "logit"} | ({"rows"} if opts else set())
                self.assertEqual(set(doc), want)
                self.assertEqual(doc["ids"], ids)
                # The same numbers as the text line, digit for digit.
                m = PREDICTION.match(line)
                self.assertEqual((doc["p"], doc["logit"]), (float(m.group(2)), float(m.group(3))))
                p, z = reference(self.emb, self.kernel, self.bias, ids, feats)
                self.assertTrue(close(doc["p"], p) and close(doc["logit"], z))
                if opts:
                    got = np.array(doc["rows"], np.float32)
                    self.assertEqual(got.tobytes(), self.emb[ids].tobytes())

    def test_stdin(self):
        exp = self.export()
        qs, text = self.queries(30)
        want, _ = self.serve(exp, self.write("q.txt", text))
        self.check_predictions(want, qs)
        for args in ([exp], [exp, "-"], ["--", exp, "-"]):
            out, err = self.serve(*args, stdin=text.encode())
            self.assertEqual((out, err), (want, ""), args)
        out, _ = self.serve(exp, stdin=b"")
        self.assertEqual(out, "")

    def test_root_and_plain_checkpoint(self):
        # An uncompressed checkpoint saved as one slice per variable maps as
        # an export does; a root serves its latest checkpoint.
        root = self.path("root")
        self.import_arrays(root, self.model_arrays(), "--no-compress", "--step", "7")
        qs, text = self.queries(20)
        q = self.write("q.txt", text)
        out, _ = self.serve(root, q)
        self.check_predictions(out, qs)
        self.assertEqual(out, self.serve(self.export(), q)[0])

    def peak_memory(self, export, queries):
        """Run dvar-serve on queries; its resident memory once it has
        answered them all, from /proc/PID/status while stdin stays open
        (wait4's ru_maxrss would count this Python's memory: Linux keeps the
        peak from before exec): {"RssAnon": bytes, "RssFile": bytes}. stdout
        is a terminal, so each line comes out at once."""
        master, slave = pty.openpty()
        p = subprocess.Popen([SERVE, export], stdin=subprocess.PIPE, stdout=slave,
                             stderr=subprocess.DEVNULL)
        os.close(slave)
        p.stdin.write(queries)
        p.stdin.flush()
        out = b""
        while out.count(b"\n") < queries.count(b"\n"):
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: it exited early
                chunk = b""
            if not chunk:
                p.stdin.close()
                p.wait()
                self.fail("dvar-serve exited %d after %r" % (p.returncode, out[-500:]))
            out += chunk
        with open("/proc/%d/status" % p.pid) as f:
            mem = {k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in f)
                   if k in ("RssAnon", "RssFile")}
        p.stdin.close()
        while True:
            try:
                if not os.read(master, 65536):
                    break
            except OSError:  # EIO: the terminal has no writer left
                break
        os.close(master)
        self.assertEqual(p.wait(), 0)
        self.assertEqual(out.count(b" p="), queries.count(b"\n"))
        return mem

    def test_memory_stays_small(self):
        # A 128 MiB table: 100 queries copy out their rows only. (The file
        # pages they touch count too, RssFile, but how much the kernel maps
        # around each fault varies: only the private memory is checked.)
        small = self.export()
        vocab, dim = 1 << 19, 64
        self.emb = self.rng.random((vocab, dim), np.float32)
        self.kernel = self.rng.random((dim + FEATURES, 1), np.float32)
        big = self.export(self.model_arrays(), "--no-compress")
        ids = self.rng.integers(0, vocab, (100, 4))

        def text(ids):
            return "".join(" ".join(map(str, row)) + "\n" for row in ids).encode()

        base = self.peak_memory(small, text(ids % VOCAB))
        mem = self.peak_memory(big, text(ids))
        self.assertLess(mem["RssAnon"] - base["RssAnon"], 4 << 20, (base, mem))

    def test_verify_and_terminal_line(self):
        exp = self.export()
        q = self.write("q.txt", "1 2 3\n")
        want, _ = self.serve(exp, q)
        self.assertEqual(self.serve("--verify", exp, q), (want, ""))
        # On a terminal one line says what was mapped.
        for opts, extra in (([], ""), (["--verify"], ", verified")):
            code, out, err = run_with_tty_stderr([SERVE] + opts + [exp, q])
            self.assertEqual(code, 0)
            self.assertEqual(out.decode(), want)
            self.assertEqual(err.decode().replace("\r\n", "\n"),
                             "dvar-serve: mapped embedding %d x %d (%d bytes%s) from %s\n"
                             % (VOCAB, DIM, VOCAB * DIM * 4, extra, exp))


class TrainTest(ServeCase):
    def test_same_lines_as_dvar_train(self):
        if not TRAIN:
            self.skipTest("no --train given")
        qs, text = self.queries(60)
        q = self.write("q.txt", text.replace(str(VOCAB - 1), "4999"))
        root = self.path("root")
        out, _ = self.run_prog(TRAIN, ["--ckpt", root, "--steps", 30, "--save-every", 15,
                                       "--vocab", 5000, "--dim", 12, "--shards", 3,
                                       "--predict", q], 0)
        want = [line for line in out.splitlines() if line.startswith("ids=")]
        self.assertEqual(len(want), len(qs))
        exp = self.path("export")
        self.dvar("export", root, exp, "--single-shard")
        out, err = self.serve(exp, q)
        self.assertEqual((out.splitlines(), err), (want, ""))


class ErrorTest(ServeCase):
    def assert_fails(self, args, message, code=1, stdout="", stdin=None):
        out, err = self.serve(*args, code=code, stdin=stdin)
        self.assertEqual(out, stdout)
        self.assertIn(message, err)
        self.assertTrue(err.startswith("dvar-serve: "), err)
        return err

    def test_bad_queries(self):
        exp = self.export()
        first = "1 2 ; " + " ".join(["0.5"] * FEATURES)
        good, _ = self.serve(exp, stdin=(first + "\n").encode())
        cases = [
            ("# ids\n\n3 %d\n" % VOCAB, ":3: id %d is out of range (vocab %d)" % (VOCAB, VOCAB)),
            ("1 x 3\n", ":1: 'x' is not an id"),
            ("1 -2\n", ":1: '-2' is not an id"),
            ("1 2 ; 0.5 1\n", ":1: 2 features after ';', expected 8"),
            ("1 ; " + " ".join(["1"] * 9) + "\n", ":1: more than 8 features"),
            ("; 1 2 3 4 5 6 7 8\n", ":1: no ids before ';'"),
            ("1 2 ; 1 1 1 1 1 1 1 y\n", ":1: 'y' is not a finite number"),
            ("1 2 ; 1 1 1 1 1 1 1 1e50\n", ":1: '1e50' is not a finite number"),
            ("1 2 ; nan 1 1 1 1 1 1 1\n", ":1: 'nan' is not a finite number"),
        ]
        for text, message in cases:
            with self.subTest(text=text):
                # After the good first line: its prediction stays, then the error.
                q = self.write("q.txt", first + "\n" + text + "5 6\n")
                lineno = re.match(r":(\d+):", message)
                shifted = ":%d:" % (int(lineno.group(1)) + 1) + message[lineno.end():]
                err = self.assert_fails([exp, q], q + shifted, stdout=good)
                self.assertEqual(err.count("\n"), 1, err)
                # From stdin the place is <stdin>.
                self.assert_fails([exp], "<stdin>" + message, stdin=text.encode())

    def test_missing_variables(self):
        for name in ("embedding", "dense/kernel", "dense/bias"):
            with self.subTest(name=name):
                exp = self.export(self.model_arrays(**{name.replace("/", "__"): None}),
                                  "--no-compress")
                self.assert_fails([exp], "%s: no variable '%s'" % (exp, name), stdin=b"1\n")

    def test_wrong_shapes_and_dtypes(self):
        cases = [
            ({"dense__kernel": np.zeros((40, 1), np.float32)},
             "dense/kernel has shape [40,1], expected [dim + 8, 1] = [16,1]"),
            ({"dense__kernel": np.zeros(16, np.float32)},
             "dense/kernel has shape [16], expected [dim + 8, 1] = [16,1]"),
            ({"dense__bias": np.zeros((1, 1), np.float32)},
             "dense/bias has shape [1,1], expected [1]"),
            ({"embedding": np.zeros(10, np.float32)},
             "embedding has shape [10], expected [vocab, dim]"),
            ({"embedding": self.emb.astype(np.float64)}, "embedding is float64, expected float32"),
            ({"dense__kernel": self.kernel.astype(np.float16)},
             "dense/kernel is float16, expected float32"),
        ]
        for changes, message in cases:
            with self.subTest(message=message):
                exp = self.export(self.model_arrays(**changes), "--no-compress")
                self.assert_fails([exp], "%s: %s" % (exp, message), stdin=b"1\n")

    def test_not_mappable_says_export_first(self):
        emb = self.emb.copy()
        emb[::2] = 0  # half the rows zero: lz4 takes the chunks
        lz4 = self.import_arrays(self.path("lz4"), self.model_arrays(embedding=emb),
                                 "--compress", "lz4", "--chunk-size", "4096")
        doc = json.loads(self.dvar("inspect", lz4, "--json")[0])
        v = [v for v in doc["variables"] if v["name"] == "embedding"][0]
        self.assertLess(v["stored_bytes"], v["raw_bytes"])
        sharded = self.import_arrays(self.path("sharded"), self.model_arrays(),
                                     "--no-compress", "--shards", "embedding=4")
        for ckpt in (lz4, sharded):
            with self.subTest(ckpt=ckpt):
                err = self.assert_fails([ckpt], "%s: cannot map embedding: " % ckpt, stdin=b"1\n")
                # The library's message says how to fix it; the hint comes once.
                self.assertEqual(err.count("dvar export --single-shard"), 1, err)

    def test_cannot_open(self):
        exp = self.export()
        missing = self.path("nothing")
        err = self.assert_fails([missing], "cannot open export %s: " % missing, stdin=b"1\n")
        self.assertGreater(len(err.strip()), len("dvar-serve: cannot open export %s: " % missing))
        os.mkdir(self.path("empty"))
        self.assert_fails([self.path("empty")], "cannot open export %s: " % self.path("empty"),
                          stdin=b"1\n")
        self.assert_fails([exp, self.path("no-queries")],
                          "cannot open queries %s: No such file or directory"
                          % self.path("no-queries"))

    def test_verify_finds_a_flipped_byte(self):
        exp = self.export()
        files = glob.glob(os.path.join(exp, "data-*"))
        self.assertEqual(len(files), 1)
        with open(files[0], "rb") as f:
            data = bytearray(f.read())
        off = bytes(data).find(self.emb.tobytes())
        self.assertGreaterEqual(off, 0)
        self.assertEqual(off % 4096, 0)  # the export is page-aligned
        pos = off + (500 * DIM + 3) * 4 + 1
        data[pos] ^= 0x40
        with open(files[0], "wb") as f:
            f.write(data)
        err = self.assert_fails(["--verify", exp], "cannot map embedding: ", stdin=b"500\n")
        self.assertIn("checksum", err.lower())
        # Without --verify nothing is checked: the flipped value is served.
        out, _ = self.serve("--rows", exp, stdin=b"500\n")
        row = np.array([float(v) for v in out.splitlines()[1].split(":")[1].split()], np.float32)
        want = self.emb[500].copy()
        want.view(np.uint8)[3 * 4 + 1] ^= 0x40
        self.assertEqual(row.tobytes(), want.tobytes())

    def test_usage(self):
        out, err = self.serve("--help")
        self.assertTrue(out.startswith("usage: dvar-serve [options] EXPORT [QUERIES]\n"), out)
        self.assertEqual(err, "")
        self.assertEqual(self.serve("-h")[0], out)
        out, _ = self.serve("--version")
        self.assertTrue(out.startswith("dvar-serve "), out)
        for args, message in (([], "missing EXPORT"), (["--rowz", "x"], "unknown option '--rowz'"),
                              (["a", "b", "c"], "unexpected argument 'c'")):
            with self.subTest(args=args):
                _, err = self.serve(*args, code=2)
                self.assertEqual(err, "dvar-serve: %s\nSee 'dvar-serve --help'.\n" % message)


def main():
    global SERVE, DVAR, TRAIN
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", required=True, help="the dvar-serve program to test")
    parser.add_argument("--dvar", required=True, help="the dvar command")
    parser.add_argument("--train", help="dvar-train, to compare predictions with")
    args, rest = parser.parse_known_args()
    SERVE = os.path.abspath(args.serve)
    DVAR = os.path.abspath(args.dvar)
    TRAIN = args.train and os.path.abspath(args.train)
    unittest.main(argv=[sys.argv[0], "-v"] + rest)


if __name__ == "__main__":
    main()
