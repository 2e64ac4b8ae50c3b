#!/usr/bin/python3
"""tests/cli/test_firstday.py - what a new user ran into on a first day (issue 18).

--json prints exactly one document on stdout, an error too ({"ok":false,
"error":{"code","message"}}, or a begun document ended with them); verify
exits 3 with the OS's reason for a chunk it cannot read (missing file, a
directory, mode 000) and 1 only for corruption; `cat --npy -` writes to
stdout; every writing command refuses an existing output and replaces it with
--force; a failed write names the OS's reason; counts are pluralized; a
misspelled command, option or variable gets "did you mean"; demo.sh's output
survives a redirection.

    test_firstday.py --dvar build/cli/dvar --helper build/tests/cli/dvar_cli_helper
                     [--lib build/libdvar.so | --sanitized] [unittest args]
"""
import io
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli  # noqa: E402
from test_cli import CliCase, flip_byte  # noqa: E402

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class FirstDayCase(CliCase):
    def setUp(self):
        super().setUp()
        self.ckpt = self.path("ckpt")
        self.arrays = {"embedding": np.arange(12, dtype=np.float32).reshape(4, 3),
                       "dense/kernel": np.ones(5)}
        self.import_arrays(self.ckpt, self.arrays)

    def one_document(self, out):
        """out is exactly one JSON document on one line; return it."""
        self.assertTrue(out.endswith("\n") and out.count("\n") == 1, repr(out))
        doc = json.loads(out)
        self.assertEqual(doc["schema_version"], 1)
        return doc

    def assert_json_error(self, args, code, err_code, message=None):
        out, err = self.dvar(*args, "--json", code=code)
        doc = self.one_document(out)
        self.assertIs(doc["ok"], False)
        self.assertEqual(doc["error"]["code"], err_code)
        self.assertTrue(doc["error"]["message"], doc)
        self.assertIn(doc["error"]["message"], err)
        if message:
            self.assertIn(message, doc["error"]["message"])
        return doc


class JsonErrorTest(FirstDayCase):
    def test_missing_path_is_one_error_document(self):
        missing = self.path("nothing")
        for args in (["inspect", missing], ["verify", missing], ["digest", missing],
                     ["cat", missing, "x"], ["diff", missing, self.ckpt],
                     ["diff", self.ckpt, missing], ["ls", missing]):
            with self.subTest(args=args):
                doc = self.assert_json_error(args, 3, "DVAR_ENOTFOUND", "nothing")
                self.assertEqual(sorted(doc), ["error", "ok", "schema_version"])

    def test_usage_errors_too(self):
        for args in (["verify"], ["inspect", self.ckpt, "--jsn"], ["cat", self.ckpt],
                     ["cat", self.ckpt, "embedding", "--slice", "9,9:-"],
                     ["diff", self.ckpt, self.ckpt, "--atol", "x"]):
            with self.subTest(args=args):
                self.assert_json_error(args, 2, "usage")

    def test_unknown_variable(self):
        self.assert_json_error(["cat", self.ckpt, "embeding"], 3, "runtime", "did you mean")
        self.assert_json_error(["digest", self.ckpt, "nope"], 3, "runtime", "nope")

    def test_success_is_still_one_document(self):
        for args in (["inspect", self.ckpt], ["verify", self.ckpt], ["digest", self.ckpt],
                     ["cat", self.ckpt, "embedding"], ["diff", self.ckpt, self.ckpt],
                     ["ls", self.dir]):
            with self.subTest(args=args):
                out, _ = self.dvar(*args, "--json")
                self.assertNotIn("error", self.one_document(out))

    def test_error_after_the_document_began_ends_it(self):
        # verify: the chunks found so far, then the error, in the same document.
        data = self.data_files(self.ckpt)[0]
        os.unlink(data)
        doc = self.assert_json_error(["verify", self.ckpt], 3, "runtime",
                                     "No such file or directory")
        self.assertEqual(len(doc["bad_chunks"]), 2)
        self.assertTrue(all(b["unreadable"] for b in doc["bad_chunks"]))
        self.assertEqual((doc["num_bad"], doc["num_unreadable"]), (0, 2))
        # diff and cat read the values after printing the head of their documents.
        doc = self.assert_json_error(["diff", self.ckpt, self.ckpt], 3, "DVAR_ECORRUPT")
        self.assertEqual(doc["a"], self.ckpt)
        doc = self.assert_json_error(["cat", self.ckpt, "embedding"], 3, "DVAR_ECORRUPT")
        self.assertEqual(doc["name"], "embedding")
        self.assertNotIn("values", doc)

    def test_help_states_it(self):
        for cmd in ("inspect", "cat", "verify", "diff", "ls", "digest"):
            with self.subTest(cmd=cmd):
                out, _ = self.dvar(cmd, "--help")
                self.assertIn('With --json, an error (usage errors too) prints '
                              '{"schema_version":1,"ok":false,', out)


class UnreadableTest(FirstDayCase):
    def verify_unreadable(self, reason):
        out, err = self.dvar("verify", self.ckpt, code=3)
        self.assertRegex(out, r"^(unreadable chunk: variable '[a-z/]+', file \S+, offset \d+, "
                              r"chunk 0: .+\n){2}2 variables, 2 chunks, \d+ bytes checked: "
                              r"2 unreadable chunks\n$")
        # The first chunk's reason: the file's error, or what a read of it met.
        self.assertTrue(err.startswith("dvar verify: 2 chunks could not be read, so they were not "
                                       "checked (%s: " % self.data_files(self.ckpt)[0]), err)
        self.assertTrue(err.endswith(": %s)\n" % reason), err)

    def test_missing_data_file(self):
        os.unlink(self.data_files(self.ckpt)[0])
        out, err = self.dvar("verify", self.ckpt, code=3)
        self.assertIn("unreadable chunk: ", out)
        self.assertIn("No such file or directory", err)

    def test_data_file_replaced_by_a_directory(self):
        # Unreadable even for root, unlike mode 000.
        data = self.data_files(self.ckpt)[0]
        os.unlink(data)
        os.mkdir(data)
        self.verify_unreadable("Is a directory")

    def test_mode_000(self):
        if os.geteuid() == 0:
            self.skipTest("running as root, which reads a mode-000 file anyway; "
                          "test_data_file_replaced_by_a_directory covers unreadable files")
        data = self.data_files(self.ckpt)[0]
        os.chmod(data, 0)
        try:
            self.verify_unreadable("Permission denied")
        finally:
            os.chmod(data, 0o644)

    def test_corruption_still_exits_1(self):
        flip_byte(self.data_files(self.ckpt)[0], 5)
        out, err = self.dvar("verify", self.ckpt, code=1)
        self.assertEqual(err, "")
        self.assertRegex(out, r"^bad chunk: .+\n2 variables, 2 chunks, \d+ bytes checked: "
                              r"1 bad chunk\n$")
        doc = json.loads(self.dvar("verify", self.ckpt, "--json", code=1)[0])
        self.assertEqual((doc["ok"], doc["num_bad"], doc["num_unreadable"]), (False, 1, 0))
        self.assertIs(doc["bad_chunks"][0]["unreadable"], False)

    def test_truncation_still_exits_1(self):
        data = self.data_files(self.ckpt)[0]
        with open(data, "r+b") as f:
            f.truncate(10)
        out, _ = self.dvar("verify", self.ckpt, code=1)
        self.assertIn("bad chunk: ", out)
        self.assertNotIn("unreadable", out)


class OutputTest(FirstDayCase):
    def run_raw(self, *args):
        return subprocess.run([test_cli.DVAR] + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, cwd=self.dir)

    def test_npy_dash_is_stdout(self):
        for opt in ("--npy", "--raw"):
            with self.subTest(opt=opt):
                p = self.run_raw("cat", self.ckpt, "embedding", opt, "-")
                self.assertEqual((p.returncode, p.stderr), (0, b""))
                if opt == "--npy":
                    got = np.load(io.BytesIO(p.stdout))
                else:
                    got = np.frombuffer(p.stdout, np.float32).reshape(4, 3)
                self.assert_same_array(got, self.arrays["embedding"])
                self.assertFalse(os.path.exists(self.path("-")))

    def test_write_failure_names_the_reason(self):
        if not os.path.exists("/dev/full"):
            self.skipTest("no /dev/full")
        for opt in ("--npy", "--raw"):
            with self.subTest(opt=opt):
                _, err = self.dvar("cat", self.ckpt, "embedding", opt, "/dev/full", code=3)
                self.assertEqual(err, "dvar cat: writing '/dev/full' failed: No space left on "
                                      "device\n")
        with open("/dev/full", "wb") as full:
            p = subprocess.run([test_cli.DVAR, "cat", self.ckpt, "embedding", "--npy", "-"],
                               stdout=full, stderr=subprocess.PIPE)
        self.assertEqual((p.returncode, p.stderr),
                         (3, b"dvar cat: writing stdout failed: No space left on device\n"))

    def assert_refused_then_forced(self, cmd, out, paths, write, check):
        """write(*opts) runs cmd writing out; an existing out is refused without --force
        and left alone, replaced with it; no temporary sibling is left."""
        _, err = write(code=3)
        self.assertEqual(err, "dvar %s: '%s' already exists; give a new %s, or --force to "
                              "replace it\n" % (cmd, paths[0], "prefix" if paths[0] != out
                                                else "path"))
        write("--force")
        check()
        before = sorted(os.listdir(self.dir))
        write("--force")
        check()
        self.assertEqual(sorted(os.listdir(self.dir)), before)
        self.assertEqual([n for n in os.listdir(self.dir) if ".dvar-" in n], [])
        help_out, _ = self.dvar(cmd, "--help")
        self.assertIn("--force", help_out)

    def test_writing_commands_refuse_and_force(self):
        other = {"other": np.full(3, 7, np.int16)}
        npy = self.save_npy(other["other"])

        def has_other(path):
            return lambda: self.assertEqual(
                [v["name"] for v in self.inspect_json(path)["variables"]], ["other"])

        # import
        out = self.path("imp")
        self.import_arrays(out, {"old": np.zeros(2)})
        self.assert_refused_then_forced(
            "import", out, [out],
            lambda *o, code=0: self.dvar("import", out, "other=" + npy, *o, code=code),
            has_other(out))
        self.dvar("import", out, "x=" + npy, "--force", "--step", "1", code=2)
        # reshard and export (dvar, safetensors, tf)
        src = self.path("src")
        self.import_arrays(src, other)
        for cmd, out, extra in (("reshard", "rs", ["--shards", "2"]),
                                ("export", "ex", ["--single-shard"]),
                                ("export", "ex.safetensors", []),
                                ("export", "tfp", ["--single-shard", "--format", "tf"])):
            with self.subTest(cmd=cmd, out=out):
                target = self.path(out)
                tf = "--format" in extra
                paths = [target + ".index", target + ".data-00000-of-00001"] if tf else [target]
                self.dvar(cmd, self.ckpt, target, *extra)
                if tf:
                    check = has_other(target)
                else:
                    check = has_other(target) if not out.endswith(".safetensors") else (
                        lambda: self.assertIn(b'"other"', open(target, "rb").read()))
                self.assert_refused_then_forced(
                    cmd, target, paths,
                    lambda *o, code=0: self.dvar(cmd, src, target, *extra, *o, code=code),
                    check)

    def test_cat_file_refused_and_forced(self):
        dst = self.path("e.npy")
        with open(dst, "w") as f:
            f.write("old")
        _, err = self.dvar("cat", self.ckpt, "embedding", "--npy", dst, code=3)
        self.assertIn("already exists; give a new FILE, or --force to replace it", err)
        self.dvar("cat", self.ckpt, "embedding", "--npy", dst, "--force")
        self.assert_same_array(np.load(dst), self.arrays["embedding"])


class FrictionTest(FirstDayCase):
    def test_plural_counts(self):
        one = self.path("one")
        self.import_arrays(one, {"x": np.zeros(3)})
        self.assertEqual(self.dvar("inspect", one)[0].splitlines()[-1],
                         "1 variable, 1 chunk, 24 B raw, 24 B stored, ratio 1.00")
        self.assertEqual(self.dvar("verify", one)[0], "1 variable, 1 chunk, 24 bytes checked: OK\n")
        self.assertEqual(self.dvar("diff", one, one)[0], "identical: 1 variable, 3 elements\n")
        self.assertRegex(self.dvar("verify", self.ckpt)[0], r"^2 variables, 2 chunks, ")

    def test_did_you_mean_command(self):
        out, err = self.dvar("inspct", self.ckpt, code=2)
        self.assertEqual(err, "dvar: 'inspct' is not a dvar command; did you mean 'inspect'? "
                              "See 'dvar help'.\n")
        _, err = self.dvar("frobnicate", code=2)
        self.assertEqual(err, "dvar: 'frobnicate' is not a dvar command. See 'dvar help'.\n")

    def test_did_you_mean_option(self):
        _, err = self.dvar("verify", self.ckpt, "--jsn", code=2)
        self.assertEqual(err, "dvar verify: unknown option '--jsn'; did you mean '--json'?\n"
                              "See 'dvar help verify'.\n")
        _, err = self.dvar("verify", self.ckpt, "--zzzzzz", code=2)
        self.assertNotIn("did you mean", err)

    def test_did_you_mean_variable(self):
        for typed, want in (("embeding", "embedding"), ("Embedding", "embedding"),
                            ("dense/kernal", "dense/kernel"), ("DENSE/KERNEL", "dense/kernel")):
            with self.subTest(typed=typed):
                _, err = self.dvar("cat", self.ckpt, typed, code=3)
                self.assertTrue(err.endswith("; did you mean '%s'?\n" % want), err)
        _, err = self.dvar("cat", self.ckpt, "zzzzzzzz", code=3)
        self.assertNotIn("did you mean", err)

    def test_case_insensitive_match_comes_first(self):
        near = self.path("near")
        self.import_arrays(near, {"Embedding": np.zeros(2), "embeddings": np.zeros(2)})
        _, err = self.dvar("cat", near, "embedding", code=3)
        self.assertTrue(err.endswith("; did you mean 'Embedding'?\n"), err)


class DemoScriptTest(CliCase):
    def test_show_writes_to_the_inherited_stdout(self):
        # demo.sh's show(), run with stdout redirected to a file: a `> /dev/stdout`
        # would reopen and truncate the file, losing what came before.
        with open(os.path.join(SOURCE_DIR, "examples", "demo.sh")) as f:
            text = f.read()
        show = re.search(r"^show\(\) \{\n.*?^\}\n", text, re.M | re.S).group(0)
        log = self.path("demo.log")
        script = "build=/b; work=/w\n%s\necho before\nshow echo during\necho after\n" % show
        with open(log, "w") as f:
            subprocess.run(["bash", "-c", script], stdout=f, check=True)
        with open(log) as f:
            self.assertEqual(f.read(), "before\n$ echo during\nduring\nafter\n")
        for name in ("demo.sh", "cli-tour.sh"):
            with open(os.path.join(SOURCE_DIR, "examples", name)) as f:
                self.assertNotRegex(f.read(), r">\s*/dev/stdout", name)


if __name__ == "__main__":
    test_cli.run(lambda args: [JsonErrorTest, UnreadableTest, OutputTest, FrictionTest,
                               DemoScriptTest])
