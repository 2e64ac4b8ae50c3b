#!/usr/bin/python3
"""tests/examples/test_train.py - runs dvar-train at small sizes, under
mpirun and alone, and checks what the main job promises: a resume on the
same topology ends bit for bit where an uninterrupted run does (an epoch
boundary and a partial batch included); a resume on another topology
restores every value exactly and trains on; the checkpoint holds what the
model says; a reshard + export + dvar-serve predicts what the trained model
does; bad options and mismatched resumes fail with a clear message.

    test_train.py --train dvar-train --serve dvar-serve --dvar dvar
                  --mpirun mpirun [unittest args]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

TRAIN = SERVE = DVAR = MPIRUN = None

# Small: 47 steps make an epoch (the last one a partial batch of 56), so 60
# steps cross an epoch boundary.
SMALL = ["--vocab", "5000", "--dim", "8", "--examples", "3000", "--batch", "64",
         "--save-every", "10", "--keep", "0"]

QUERIES = """# a comment, then queries
0 1 2 3
17 42 4242 4999 ; 0.5 -1 0.25 0 1 0 -0.5 2

123
7 7 7 7 ; 1 1 1 1 1 1 1 1
"""


class TrainCase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="dvar-train-")
        # A cleanup, not tearDown: it runs even when a setUp skips or fails.
        self.addCleanup(shutil.rmtree, self.dir, True)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def run_cmd(self, argv, code=0):
        p = subprocess.run([str(a) for a in argv], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, cwd=self.dir)
        out = p.stdout.decode("utf-8", "replace")
        err = p.stderr.decode("utf-8", "replace")
        if code is not None:
            self.assertEqual(p.returncode, code, "%s exited %d, expected %d\nstdout: %s\nstderr: %s"
                             % (" ".join(map(str, argv)), p.returncode, code, out[-3000:],
                                err[-3000:]))
        return out, err

    def train(self, ckpt, *args, workers=1, code=0):
        """Run dvar-train (under mpirun when workers > 1); return (summary or None, stdout, stderr)."""
        argv = [TRAIN, "--ckpt", self.path(ckpt), "--json"] + SMALL + list(args)
        if workers > 1:
            argv = [MPIRUN, "-np", str(workers), "--oversubscribe", "--bind-to", "none"] + argv
        out, err = self.run_cmd(argv, code)
        summary = None
        for line in out.splitlines():
            if line.startswith("{"):
                summary = json.loads(line)
        return summary, out, err

    def dvar(self, *args, code=0):
        return self.run_cmd([DVAR] + list(args), code)

    def write_queries(self):
        with open(self.path("queries.txt"), "w") as f:
            f.write(QUERIES)
        return self.path("queries.txt")


class Resume(TrainCase):
    def check_resume(self, workers, replicas, stop, end):
        topo = ["--replicas", str(replicas)]
        straight, _, _ = self.train("a", "--steps", end, *topo, workers=workers)
        first, _, _ = self.train("b", "--steps", stop, *topo, workers=workers)
        resumed, _, _ = self.train("b", "--steps", end, "--resume", *topo, workers=workers)
        self.assertEqual(first["step"], stop)
        self.assertEqual(resumed["start_step"], stop)
        self.assertEqual(resumed["step"], end)
        self.assertEqual(resumed["checksums"], straight["checksums"])
        self.assertEqual(resumed["examples"], straight["examples"])
        self.assertEqual(resumed["loss"], straight["loss"])
        # The two checkpoints at `end` hold the same bytes for every value
        # (not the same file layout: the resumed one was saved by other runs).
        self.dvar("diff", self.path("a"), self.path("b"))

    def test_same_topology_mpi(self):
        # W = 2 x R = 2: stopped at 30, resumed across the epoch boundary (47).
        self.check_resume(2, 2, 30, 60)

    def test_same_topology_alone(self):
        # Stopped at the last (partial) batch of the first epoch.
        self.check_resume(1, 3, 47, 55)

    def test_crash_and_resume(self):
        # A worker dies at step 27, two steps after a save was started in the
        # background: whichever checkpoint was committed last, resuming from
        # it ends where an uninterrupted run does.
        straight, _, _ = self.train("a", "--steps", 40, "--replicas", 2, workers=2)
        _, _, err = self.train("b", "--steps", 40, "--replicas", 2, "--save-every", 5,
                               "--kill-at", 27, workers=2, code=None)
        self.assertIn("worker 1: killing itself after step 27", err)
        out, _ = self.dvar("ls", self.path("b"))
        self.assertNotIn("ckpt-30", out)
        resumed, _, _ = self.train("b", "--steps", 40, "--replicas", 2, "--resume", workers=2)
        self.assertIn(resumed["start_step"], (20, 25))
        self.assertEqual(resumed["checksums"], straight["checksums"])
        self.dvar("verify", self.path("b"))

    def test_resume_without_checkpoint_starts_fresh(self):
        summary, _, err = self.train("fresh", "--steps", 10, "--resume")
        self.assertIn("no checkpoint under", err)
        self.assertEqual(summary["start_step"], 0)
        self.assertEqual(summary["step"], 10)


class Topology(TrainCase):
    def test_other_topology(self):
        straight, _, _ = self.train("a", "--steps", 60, "--replicas", 2, workers=2)
        saved, _, _ = self.train("b", "--steps", 30, "--replicas", 2, "--shards", 4, workers=2)
        # Restored onto 1 worker x 3 replicas and 6 shards, with no step made:
        # every value reads back exactly, the int64 metrics split over the
        # new replicas included.
        same, _, _ = self.train("b", "--steps", 30, "--resume", "--replicas", 3, "--shards", 6)
        self.assertEqual(same["checksums"], saved["checksums"])
        self.assertEqual((same["start_step"], same["step"]), (30, 30))
        # Then 3 workers x 1 replica train on to 60: the same examples, the
        # same data, sums in another order.
        end, _, _ = self.train("b", "--steps", 60, "--resume", "--shards", 5, workers=3)
        self.assertEqual(end["step"], 60)
        self.assertEqual(end["examples"], straight["examples"])
        self.assertEqual(end["examples"], 60 * 64 - 8)  # the partial batch at step 47
        self.assertAlmostEqual(end["loss"], straight["loss"], delta=1e-4)
        self.assertAlmostEqual(end["accuracy"], straight["accuracy"], delta=2e-3)
        self.assertNotEqual(end["checksums"]["embedding"], saved["checksums"]["embedding"])


class Device(TrainCase):
    """--device cuda: the dense layer and the metrics on the GPU (three
    replicas sharing GPU 0 add in the CPU's order), so a GPU run, a CPU run
    and every resume from one onto the other end on the same bytes."""

    def setUp(self):
        super().setUp()
        # --device auto takes the GPU when dvar sees one; 0 steps train nothing.
        probe, _, _ = self.train("probe", "--steps", 0, "--device", "auto")
        if probe["device"] != "cuda":
            self.skipTest("no CUDA device (or a build without CUDA): "
                          "dvar-train --device auto chose the CPU")

    def test_gpu_equals_cpu_and_resumes_across(self):
        topo = ["--replicas", "3"]
        cpu, _, _ = self.train("cpu", "--steps", 60, "--device", "cpu", *topo)
        gpu, _, _ = self.train("gpu", "--steps", 60, "--device", "cuda", *topo)
        self.assertEqual(gpu["device"], "cuda")
        self.assertEqual(cpu["device"], "cpu")
        self.assertEqual(gpu["checksums"], cpu["checksums"])
        self.assertEqual(gpu["loss"], cpu["loss"])
        self.dvar("diff", self.path("cpu"), self.path("gpu"))
        # Saved on the GPU, resumed on the CPU, and the other way round.
        for first, then in (("cuda", "cpu"), ("cpu", "cuda")):
            ckpt = "from-" + first
            self.train(ckpt, "--steps", 30, "--device", first, *topo)
            resumed, _, _ = self.train(ckpt, "--steps", 60, "--resume", "--device", then, *topo)
            self.assertEqual(resumed["start_step"], 30)
            self.assertEqual(resumed["checksums"], cpu["checksums"], ckpt)
            self.assertEqual(resumed["loss"], cpu["loss"], ckpt)

    def test_gpu_workers(self):
        # Two workers (on one GPU they exchange through the host): the same
        # bytes as on the CPU, and a resume on the CPU from the GPU's save.
        topo = ["--replicas", "2"]
        cpu, _, _ = self.train("cpu", "--steps", 30, "--device", "cpu", *topo, workers=2)
        gpu, _, _ = self.train("gpu", "--steps", 20, "--device", "cuda", *topo, workers=2)
        resumed, _, _ = self.train("gpu", "--steps", 30, "--resume", "--device", "cpu", *topo,
                                   workers=2)
        self.assertEqual(gpu["device"], "cuda")
        self.assertEqual(resumed["checksums"], cpu["checksums"])
        self.assertEqual(resumed["loss"], cpu["loss"])

    def test_gpu_onto_other_replicas(self):
        # One replica on the GPU, resumed as two: the metrics split exactly.
        gpu, _, _ = self.train("g", "--steps", 20, "--device", "cuda")
        resumed, _, _ = self.train("g", "--steps", 30, "--resume", "--device", "cuda",
                                   "--replicas", "2")
        cpu, _, _ = self.train("c", "--steps", 20, "--device", "cpu")
        cpu2, _, _ = self.train("c", "--steps", 30, "--resume", "--device", "cpu",
                                "--replicas", "2")
        self.assertEqual(gpu["checksums"], cpu["checksums"])
        self.assertEqual(resumed["checksums"], cpu2["checksums"])


class Checkpoint(TrainCase):
    def test_contents(self):
        summary, _, _ = self.train("c", "--steps", 25, "--replicas", 2, "--shards", 3, workers=2)
        out, _ = self.dvar("ls", self.path("c"))
        for step in (10, 20, 25):
            self.assertIn("ckpt-%d" % step, out)
        out, _ = self.dvar("inspect", self.path("c"), "--json")
        doc = json.loads(out)
        found = {v["name"]: v for v in doc["variables"]}
        self.assertEqual(found["embedding"]["shape"], [5000, 8])
        self.assertEqual(len(found["embedding"]["slices"]), 3)
        self.assertEqual(found["embedding"]["attributes"]["kind"], "sharded")
        self.assertEqual(found["dense/kernel"]["shape"], [16, 1])
        self.assertEqual(found["dense/kernel"]["attributes"]["kind"], "mirrored")
        self.assertEqual(found["metrics/examples"]["attributes"]["aggregation"], "SUM")
        self.assertEqual(found["metrics/examples"]["attributes"]["kind"], "sync_on_read")
        self.assertEqual(found["input"]["attributes"]["kind"], "iterator")
        out, _ = self.dvar("cat", self.path("c"), "global_step")
        self.assertEqual(out.split()[-1], "25")
        out, _ = self.dvar("cat", self.path("c"), "config/seed")
        self.assertEqual(out.split()[-1], "1")
        out, _ = self.dvar("cat", self.path("c"), "metrics/examples")
        self.assertEqual(out.split()[-1], str(25 * 64))
        self.assertEqual(summary["examples"], 25 * 64)
        self.dvar("verify", self.path("c"))

    def test_delta_across_epoch(self):
        # The iterator starts again at step 47 (a new epoch) and the manager
        # goes on: the save at step 50 is a delta over ckpt-40.
        summary, _, _ = self.train("c", "--steps", 50, "--full-every", 10)
        saves = {s["step"]: s for s in summary["saves"]}
        self.assertTrue(saves[50]["delta"])
        self.assertEqual(saves[50]["base"], "ckpt-40")

    def test_loss_falls(self):
        summary, _, _ = self.train("c", "--steps", 100, "--vocab", "20000", "--examples", "20000")
        # A model that learns nothing stays at ln 2 = 0.693 and 50%.
        self.assertLess(summary["loss"], 0.62)
        self.assertGreater(summary["accuracy"], 0.66)


class Serve(TrainCase):
    def test_reshard_export_serve(self):
        queries = self.write_queries()
        _, out, _ = self.train("c", "--steps", 30, "--replicas", 2, "--shards", 4,
                               "--predict", queries, workers=2)
        trained = [l for l in out.splitlines() if l.startswith("ids=")]
        self.assertEqual(len(trained), 4)
        self.dvar("reshard", self.path("c"), self.path("r"), "--shards", 3)
        self.dvar("export", self.path("r"), self.path("e"), "--single-shard")
        out, _ = self.run_cmd([SERVE, self.path("e"), queries])
        self.assertEqual(out.splitlines(), trained)
        # The same model resumed alone predicts the same.
        _, out, _ = self.train("c", "--steps", 30, "--resume", "--predict", queries)
        self.assertEqual([l for l in out.splitlines() if l.startswith("ids=")], trained)


class Errors(TrainCase):
    def test_existing_root_needs_resume(self):
        self.train("c", "--steps", 10)
        _, _, err = self.train("c", "--steps", 20, code=1)
        self.assertIn("already holds checkpoints", err)
        self.assertIn("--resume", err)

    def test_resume_with_other_batch(self):
        self.train("c", "--steps", 10)
        _, _, err = self.train("c", "--steps", 20, "--resume", "--batch", "32", code=1)
        self.assertIn("restoring", err)
        self.assertIn("batch", err)

    def test_resume_with_other_seed(self):
        self.train("c", "--steps", 10, "--seed", "7")
        _, _, err = self.train("c", "--steps", 20, "--resume", code=1)
        self.assertIn("was trained on the data of --seed 7; resume it with that seed", err)
        summary, _, _ = self.train("c", "--steps", 20, "--resume", "--seed", "7")
        self.assertEqual((summary["start_step"], summary["step"]), (10, 20))

    def test_resume_with_other_dim(self):
        self.train("c", "--steps", 10)
        _, _, err = self.train("c", "--steps", 20, "--resume", "--dim", "4", code=1)
        self.assertIn("'dense/kernel'", err)
        self.assertIn("holds float32 [16,1], the variable is float32 [12,1]", err)

    def test_resume_beyond_steps(self):
        self.train("c", "--steps", 20)
        _, _, err = self.train("c", "--steps", 10, "--resume", code=1)
        self.assertIn("beyond --steps 10", err)

    def test_predict_bad_query(self):
        with open(self.path("q"), "w") as f:
            f.write("1 2\n3 x\n")
        _, _, err = self.train("c", "--steps", 5, "--predict", self.path("q"), code=1)
        self.assertIn("q:2: 'x' is not an id", err)
        with open(self.path("q"), "w") as f:
            f.write("5000\n")
        _, _, err = self.train("d", "--steps", 5, "--predict", self.path("q"), code=1)
        self.assertIn("q:1: id 5000 is out of range (vocab 5000)", err)

    def test_cuda_without_gpu(self):
        probe, _, _ = self.train("probe", "--steps", 0, "--device", "auto")
        if probe["device"] == "cuda":
            self.skipTest("a CUDA device is there (the Device tests run instead)")
        _, _, err = self.train("c", "--steps", 5, "--device", "cuda", code=1)
        self.assertIn("creating the strategy", err)
        self.assertTrue("built without CUDA" in err or "no CUDA device" in err, err)
        self.assertFalse(os.path.exists(self.path("c", "checkpoint")))

    def test_usage(self):
        _, err = self.run_cmd([TRAIN], code=2)
        self.assertIn("--ckpt DIR is required", err)
        _, err = self.run_cmd([TRAIN, "--ckpt", "x", "--bogus"], code=2)
        self.assertIn("unknown option '--bogus'", err)
        _, err = self.run_cmd([TRAIN, "--ckpt", "x", "--steps", "-1"], code=2)
        self.assertIn("--steps", err)
        _, err = self.run_cmd([TRAIN, "--ckpt", "x", "--vocab", str(1 << 25)], code=2)
        self.assertIn("--vocab", err)
        _, err = self.run_cmd([TRAIN, "--ckpt"], code=2)
        self.assertIn("--ckpt needs a value", err)
        _, err = self.run_cmd([TRAIN, "--ckpt", "x", "--device", "tpu"], code=2)
        self.assertIn("--device: 'tpu' is not cpu, cuda or auto", err)
        out, _ = self.run_cmd([TRAIN, "--help"])
        self.assertIn("--save-every K", out)


def main():
    global TRAIN, SERVE, DVAR, MPIRUN
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--serve", required=True)
    ap.add_argument("--dvar", required=True)
    ap.add_argument("--mpirun", required=True)
    args, rest = ap.parse_known_args()
    TRAIN, SERVE, DVAR, MPIRUN = (os.path.abspath(args.train), os.path.abspath(args.serve),
                                  os.path.abspath(args.dvar), args.mpirun)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
