#!/usr/bin/python3
"""tests/fault/cli_alloc.py - the dvar command with each of its allocations
failed in turn (the fault shim, libdvar_fault.so, preloaded: it counts the
allocations from main on and fails the k-th, DVAR_FAULT_ALLOC_AT=k); with
--lib, the Python package's operations too (py_alloc_ops.py), each of
libdvar's own allocations failed in turn (DVAR_FAULT_ALLOC_FROM: the
interpreter's are left alone); with --train, a training run of two workers
under mpirun (dvar-train, asynchronous saves into a root), each of
libdvar's own allocations failed in turn in both (TrainSweep).

Every trial must end by itself (no signal, no hang), and either do what the
unarmed run did (same exit code and output; a written checkpoint whose
digests equal the unarmed one's) or fail with exit code 3 and a message that
says memory ran out. A command that writes leaves its output whole or
absent, and nothing else beside it.

    cli_alloc.py --dvar build/cli/dvar --shim build/tests/fault/libdvar_fault.so
                 --fixtures fixtures [--lib build/libdvar.so] [--work DIR] [--every N]
                 [--py-every N] [--train build/examples/dvar-train [--mpiexec mpirun]
                 [--train-every N]] [--what cli,python,train]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np


def run(argv, env=None):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120,
                       env=dict(os.environ, LC_ALL="C", **(env or {})))
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


class Sweep:
    """Runs `program argv` (program: a list, the dvar command by default)
    with env added, unarmed and under each allocation failed in turn."""

    def __init__(self, args, program=None, env=None):
        self.dvar = args.dvar
        self.program = program or [args.dvar]
        self.env = env or {}
        self.shim = args.shim
        self.every = args.every
        self.work = args.work
        self.failures = []

    def launch(self, argv, env=None):
        return run(self.program + argv, env)

    def armed(self, argv, k, count_file=None):
        env = dict(self.env, LD_PRELOAD=self.shim, DVAR_FAULT_ALLOC_AT=str(k))
        if count_file:
            env["DVAR_FAULT_COUNT"] = count_file
        return self.launch(argv, env)

    def trials(self, n):
        return range(1, n + 1, self.every)

    def report(self, argv, n, refused, bad):
        """The sweep's line: bad is how many failures there were before it."""
        print("%s: %d allocations, %d trials, %d out of memory, %d failures"
              % (self.name(argv), n, len(self.trials(n)), refused, len(self.failures) - bad))
        sys.stdout.flush()

    def count(self, argv):
        """The allocations an unarmed run of argv counts (the most any of
        its processes did: each appends its own count)."""
        count_file = os.path.join(self.work, "count")
        open(count_file, "w").close()
        self.armed(argv, 0, count_file)
        with open(count_file) as f:
            return max(int(line) for line in f)

    def fingerprint(self, out):
        """What out holds (with the files beside it named out.*: a TF prefix's):
        its variables' digests where dvar reads it, else its files' bytes;
        None when nothing is there."""
        paths = outputs(out)
        if not paths:
            return None
        code, text, err = run([self.dvar, "digest", out])
        if code == 0:
            return text
        files = {}
        for p in paths:
            for root, dirs, names in os.walk(p) if os.path.isdir(p) else [("", [], [p])]:
                for name in names:
                    with open(os.path.join(root, name), "rb") as f:
                        files[os.path.relpath(os.path.join(root, name), os.path.dirname(out))] = f.read()
        return files

    def fail(self, what, k, why):
        self.failures.append("%s, allocation %d: %s" % (self.name(what), k, why))

    def name(self, argv):
        return " ".join([os.path.basename(self.program[-1])] + argv)

    def sweep(self, argv, out=None):
        """Every allocation of `dvar argv` failed in turn; out: what it writes."""
        remove(out)
        want_code, want_out, want_err = self.launch(argv, self.env)
        want = self.fingerprint(out) if out else None
        if out and (want_code != 0 or want is None):
            self.fail(argv, 0, "the unarmed run failed (%d): %s" % (want_code, want_err.strip()))
            return
        remove(out)
        n = self.count(argv)
        remove(out)
        parent = os.path.dirname(out) if out else None
        before = sorted(os.listdir(parent)) if parent else None
        bad, refused = len(self.failures), 0
        for k in self.trials(n):
            try:
                code, got, err = self.armed(argv, k)
            except subprocess.TimeoutExpired:
                self.fail(argv, k, "did not end within 120 s")
                continue
            if code < 0:
                self.fail(argv, k, "killed by signal %d; stderr: %s" % (-code, err[-300:]))
            elif code == want_code:
                if got != want_out:
                    self.fail(argv, k, "exit code %d as unarmed, but other output" % code)
            elif code != 3 or "memory" not in err.lower():
                self.fail(argv, k, "exit code %d (unarmed: %d), stderr: %s"
                          % (code, want_code, err.strip()[-300:]))
            else:
                refused += 1
            if out:
                have = self.fingerprint(out)
                if code == 0 and have != want:
                    self.fail(argv, k, "%s was written with other contents" % out)
                elif code != 0 and have is not None and have != want:
                    self.fail(argv, k, "failed, and left %s, not whole" % out)
                remove(out)
                left = sorted(os.listdir(parent))
                if left != before:
                    self.fail(argv, k, "left behind: %s" % sorted(set(left) - set(before)))
                    for name in set(left) - set(before):
                        remove(os.path.join(parent, name))
        self.report(argv, n, refused, bad)


class TrainSweep(Sweep):
    """dvar-train under mpirun -np 2, saving into a root, with each of
    libdvar's own allocations failed in turn in both workers. A trial that
    fails must end (no hang), say memory ran out, leave every checkpoint it
    shows whole and nothing else in the root but a save's staging, and a
    run resumed from there must end with the unarmed run's variables and
    the root as the unarmed run left it: a failed save loses nothing."""

    def __init__(self, args, mpiexec, train):
        Sweep.__init__(self, args, [train], {"DVAR_FAULT_ALLOC_FROM": "/libdvar.so"})
        self.mpiexec = mpiexec
        self.train = train

    def launch(self, argv, env=None):
        # -x gives the workers the variables, not mpirun itself.
        xs = [a for kv in sorted((env or {}).items()) for a in ("-x", "%s=%s" % kv)]
        return run([self.mpiexec, "-np", "2", "--oversubscribe", "--bind-to", "none"] + xs +
                   [self.train] + argv,
                   {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})

    def sweep_root(self, argv, root):
        run_argv = ["--ckpt", root] + argv
        shutil.rmtree(root, ignore_errors=True)
        code, _, err = self.launch(run_argv)
        want = self.fingerprint(root)
        if code != 0 or want is None:
            self.fail(argv, 0, "the unarmed run failed (%d): %s" % (code, err.strip()[-300:]))
            return
        want_entries = sorted(os.listdir(root))
        shutil.rmtree(root)
        n = self.count(run_argv)
        bad, refused = len(self.failures), 0
        for k in self.trials(n):
            shutil.rmtree(root, ignore_errors=True)
            try:
                code, got, err = self.armed(run_argv, k)
            except subprocess.TimeoutExpired:
                self.fail(argv, k, "did not end within 120 s")
                continue
            text = got.decode("utf-8", "replace") + err
            if code == 0:
                if self.fingerprint(root) != want:
                    self.fail(argv, k, "succeeded with other variables")
                continue
            if "signal" in text or "memory" not in text.lower():
                self.fail(argv, k, "exit code %d: %s" % (code, text.strip()[-400:]))
                continue
            refused += 1
            # A save's staging may stay: mpirun kills the other worker as soon as
            # one exits with an error, as a crash would; the next save clears it.
            entries = sorted(os.listdir(root)) if os.path.isdir(root) else []
            extra = [e for e in entries if e not in want_entries and not e.startswith("ckpt-")
                     and not (e.startswith(".ckpt-") and ".dvartmp-" in e)]
            if extra:
                self.fail(argv, k, "left in the root: %s" % extra)
            for e in entries:
                if e.startswith("ckpt-") and run([self.dvar, "verify", os.path.join(root, e)])[0]:
                    self.fail(argv, k, "left %s, not whole" % e)
            code, _, err = self.launch(run_argv + ["--resume"])
            if code != 0 or self.fingerprint(root) != want:
                self.fail(argv, k, "the resumed run %s" % ("failed: " + err.strip()[-300:]
                                                           if code else "ended with other variables"))
            elif sorted(os.listdir(root)) != want_entries:
                self.fail(argv, k, "the resumed run left %s" % sorted(os.listdir(root)))
        shutil.rmtree(root, ignore_errors=True)
        self.report(argv, n, refused, bad)


def outputs(out):
    """out and the files beside it named out.* (a TF prefix's)."""
    parent, base = os.path.split(out)
    return [os.path.join(parent, n) for n in sorted(os.listdir(parent))
            if n == base or n.startswith(base + ".")]


def remove(out):
    for p in outputs(out) if out else []:
        if os.path.isdir(p):
            shutil.rmtree(p)
        else:
            os.unlink(p)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dvar", required=True)
    ap.add_argument("--shim", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--lib", help="libdvar.so: sweep the Python package's operations too")
    ap.add_argument("--train", help="dvar-train: sweep a training run of two workers too")
    ap.add_argument("--mpiexec", default="mpirun")
    ap.add_argument("--train-every", type=int, default=1,
                    help="the same for the training run (a trial starts two workers)")
    ap.add_argument("--what", default="cli,python,train",
                    help="which sweeps, of those whose programs are given")
    ap.add_argument("--work")
    ap.add_argument("--every", type=int, default=1, help="fail every N-th allocation only")
    ap.add_argument("--py-every", type=int, default=1,
                    help="the same for the Python operations (a trial starts an interpreter)")
    args = ap.parse_args()
    made = args.work is None
    args.work = args.work or tempfile.mkdtemp(prefix="dvar-cli-alloc-")
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(os.path.join(args.work, "out"))
    try:
        s = Sweep(args)
        v1 = os.path.join(args.fixtures, "v1")
        v2 = os.path.join(args.fixtures, "v2")
        tf = os.path.join(args.fixtures, "tf", "two_shards", "variables")
        out = os.path.join(args.work, "out")
        npy = os.path.join(args.work, "a.npy")
        np.save(npy, np.arange(3 * 1024, dtype=np.float32).reshape(3, 1024))
        what = args.what.split(",")
        if "cli" in what:
            for argv in (["inspect", v2], ["inspect", tf], ["verify", v2], ["digest", v2],
                         ["cat", v2, "emb"], ["diff", v1, v2]):
                s.sweep(argv)
            for argv, dst in ((["reshard", v2, "R", "--shards", "3"], "R"),
                              (["export", v2, "E", "--single-shard"], "E"),
                              (["export", v2, "S.safetensors", "--single-shard"], "S.safetensors"),
                              (["export", tf, "T", "--format", "tf", "--keep-shards"], "T"),
                              (["export", v2, "N", "--format", "npy", "--single-shard"], "N"),
                              (["import", "I", "a=" + npy, "b=" + npy, "--shards", "b=3"], "I")):
                path = os.path.join(out, dst)
                s.sweep([path if a == dst else a for a in argv], path)
        failures = s.failures
        if args.lib and "python" in what:
            here = os.path.dirname(os.path.abspath(__file__))
            py = Sweep(args, [sys.executable, os.path.join(here, "py_alloc_ops.py")],
                       {"DVAR_LIBRARY": args.lib, "DVAR_FAULT_ALLOC_FROM": "/libdvar.so",
                        "PYTHONPATH": os.path.join(here, "..", "..", "python"),
                        "PYTHONDONTWRITEBYTECODE": "1"})
            py.every = args.py_every
            for argv in (["read", v2], ["digest", v2], ["verify", v2], ["diff", v1, v2]):
                py.sweep(argv)
            for op, src, dst in (("save", None, "P"), ("reshard", v2, "Q"),
                                 ("export", v2, "X.safetensors")):
                path = os.path.join(out, dst)
                py.sweep([op] + ([src] if src else []) + [path], path)
            failures += py.failures
        if args.train and "train" in what:
            tr = TrainSweep(args, args.mpiexec, args.train)
            tr.every = args.train_every
            tr.sweep_root(["--steps", "4", "--save-every", "2", "--vocab", "2000",
                           "--examples", "2048", "--batch", "64"], os.path.join(out, "root"))
            failures += tr.failures
        for f in failures:
            print("FAILED: " + f)
        return 1 if failures else 0
    finally:
        if made:
            shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
