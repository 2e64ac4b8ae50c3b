#!/usr/bin/python3
"""bench/bench_python_read.py - the dvar Python package's reads next to
NumPy's own, on the same bytes, in the same run:

  (a) a whole float32 variable (1 GiB) into NumPy: np.asarray(ck[name])
      (the open included) next to np.load of a .npy file of the same bytes;
  (b) one row range (1 %) of a 2 GiB table: ck[name][a:b] next to
      np.load(mmap_mode="r")[a:b] copied into memory (np.array), the open
      and the mapping included.

For (a), a third side reads the very bytes dvar reads: NumPy reading
dvar's own data file, which holds exactly the variable's float32 bytes,
with np.fromfile, the call np.load makes after parsing a .npy header. On
a VM the host serves two files at different speeds whatever reads them
(see below), so only this side compares the readers on the same bytes;
np.load of the .npy is shown beside it, and the goal is judged on both.

Each case runs cold (the files' pages dropped from the page cache with
posix_fadvise(POSIX_FADV_DONTNEED) before every timed read; the files were
fsynced, so the pages are clean and can go) and warm (after an untimed read).
The two sides take turns going first. Every figure is the median over the
runs, with min and max; the ratio is the median of the per-run ratios
np.load time / dvar time (>= 1: dvar is faster). Goal for (a): >= 0.9.
Every read is checked against the data written.

    DVAR_LIBRARY=build/libdvar.so PYTHONPATH=python /usr/bin/python3 bench/bench_python_read.py
    ... bench/bench_python_read.py --small --runs 3    # 64 MiB and 128 MiB

The checkpoints are written with compress="none" (raw chunks, what an
export for serving holds; random floats do not compress anyway). Needs
about 2x (size + table) of disk under --dir, and size + 2 x range of memory.

Both sides' files get the same write history before they are timed: each
is replaced by a buffered copy of itself (--as-written keeps them as the
writers left them). On a VM, a "cold" read is served by the host's cache
as fast as it holds the blocks, and that depends on how they were written:
here, data written with O_DIRECT (as dvar's writer does) read back at
1.2-3 GB/s for minutes after, a buffered copy of the same bytes at 5 GB/s.
A raw read() of each side's files (into a new array, as np.load does) is
timed next to them in every cold run, so the host's speed for each file is
on the same line, and so are the read requests each side's cold reads made
and the time the disk was busy with them (/sys/dev/block/.../stat of the
scratch disk; other programs' reads count too): a side that splits its
reads into many small requests shows there.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

try:
    import dvar
except ImportError as e:  # say how to point at the package and the library
    sys.exit("bench_python_read: cannot import dvar (%s); run with "
             "DVAR_LIBRARY=build/libdvar.so PYTHONPATH=python" % e)

MiB = 1 << 20


def drop_cache(paths):
    """Ask the kernel to drop the cached pages of these files (or of every
    file under these directories)."""
    for f in data_files(paths):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def data_files(paths):
    """The files under these paths (a path, or a directory's files)."""
    out = []
    for p in paths:
        if os.path.isdir(p):
            out += sorted(os.path.join(p, f) for f in os.listdir(p))
        else:
            out.append(p)
    return out


def same_history(paths):
    """Replace every file under paths by a buffered copy of itself, fsynced,
    so that the files compared were all last written the same way."""
    for f in data_files(paths):
        tmp = f + ".copy"
        shutil.copyfile(f, tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, f)
    os.sync()


def raw_read(paths):
    """Every byte of the files under paths read into new arrays with one
    read() each, as np.load reads: the host's speed for those files."""
    for f in data_files(paths):
        with open(f, "rb", buffering=0) as fh:
            buf = np.empty(os.fstat(fh.fileno()).st_size, dtype=np.uint8)
            fh.readinto(memoryview(buf))


def disk_counters(path):
    """(read requests, milliseconds busy) so far of the block device that
    holds path (/sys/dev/block/MAJ:MIN/stat), or None (tmpfs, no sysfs)."""
    dev = os.stat(path).st_dev
    try:
        with open("/sys/dev/block/%d:%d/stat" % (os.major(dev), os.minor(dev))) as f:
            v = f.read().split()
        return int(v[0]), int(v[9])
    except (OSError, IndexError, ValueError):
        return None


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def median_range(xs):
    return "%5.2f (%4.2f-%4.2f)" % (statistics.median(xs), min(xs), max(xs))


def row(case, mode, runs, times, nbytes, raw=None, disk=None):
    """One line: each side's median, min and max time and GB/s; then the
    ratio of every NumPy side's time to dvar's (median of the per-run ratios);
    with disk, each side's median read requests and disk busy time."""
    def fmt(ts):
        return "%7.3f %7.3f %7.3f %6.2f" % (statistics.median(ts), min(ts), max(ts),
                                            nbytes / statistics.median(ts) / 1e9)
    line = "%-28s %-5s %4d" % (case, mode, runs)
    for name, ts in times.items():
        line += " | %s %s" % (name, fmt(ts))
    ratios = {}
    for name, ts in times.items():
        if name != "dvar":
            ratios[name] = [n / d for n, d in zip(ts, times["dvar"])]
            line += " | %s/dvar %s" % (name, median_range(ratios[name]))
    if raw:
        line += " | read() GB/s: dvar's files %.2f, .npy %.2f" % (
            raw[0] / statistics.median(raw[1]) / 1e9, raw[2] / statistics.median(raw[3]) / 1e9)
    if disk:
        line += " | disk requests (busy ms): " + ", ".join(
            "%s %d (%d)" % (name, statistics.median(r for r, _ in d),
                            statistics.median(b for _, b in d)) for name, d in disk.items())
    print(line)
    return {name: statistics.median(rs) for name, rs in ratios.items()}


def bench(label, runs, sides, check, dvar_files, np_files, nbytes, raw=False):
    """Time every side of sides ({name: fn}, dvar's named "dvar"), cold then
    warm, in a rotating order. With raw, cold runs also time a raw read of
    each side's files. Returns {mode: {side: median ratio side/dvar}}."""
    results = {}
    files = dvar_files + np_files
    sizes = [sum(os.path.getsize(f) for f in data_files(fs)) for fs in (dvar_files, np_files)]
    names = list(sides)
    for mode in ("cold", "warm"):
        times = {name: [] for name in names}
        disk = {name: [] for name in names}
        raw_d, raw_n = [], []
        if mode == "warm":
            for fn in sides.values():
                check(fn())
        for r in range(runs):
            order = names[r % len(names):] + names[:r % len(names)]
            if r // len(names) % 2:
                order.reverse()
            for name in order:
                if mode == "cold":
                    drop_cache(files)
                before = disk_counters(files[0]) if mode == "cold" else None
                t, out = timed(sides[name])
                after = disk_counters(files[0]) if before else None
                if after:
                    disk[name].append((after[0] - before[0], after[1] - before[1]))
                check(out)
                del out
                times[name].append(t)
            if mode == "cold" and raw:
                for fs, ts in ((dvar_files, raw_d), (np_files, raw_n)):
                    drop_cache(fs)
                    ts.append(timed(lambda: raw_read(fs))[0])
        limits = (sizes[0], raw_d, sizes[1], raw_n) if raw_d else None
        counted = disk if all(len(d) == runs for d in disk.values()) else None
        results[mode] = row(label, mode, runs, times, nbytes, limits, counted)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=1024, help="(a): the variable (MiB)")
    ap.add_argument("--table-mib", type=int, default=2048, help="(b): the table (MiB)")
    ap.add_argument("--small", action="store_true", help="64 MiB and 128 MiB: a quick run")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", default=os.environ.get("TMPDIR", "/tmp"))
    ap.add_argument("--threads", type=int, default=0, help="reader threads (0: all CPUs)")
    ap.add_argument("--as-written", action="store_true",
                    help="time the files as each writer left them (no buffered copies)")
    args = ap.parse_args()
    if args.small:
        args.size_mib, args.table_mib = 64, 128
    work = tempfile.mkdtemp(prefix="dvar-pybench-", dir=args.dir)
    try:
        run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args, work):
    rng = np.random.default_rng(1)
    print("dvar %s (%s), numpy %s, %d CPUs, scratch %s" % (
        dvar.__version__, dvar.library_path, np.__version__, os.cpu_count(), work))
    print("%-28s %-5s %4s | each side: median min max (s), GB/s | ratios: a NumPy side's "
          "time / dvar's, median (min-max) of the runs" % ("case", "mode", "runs"))

    # (a) a whole variable
    n = args.size_mib * MiB // 4
    x = rng.random(n, dtype=np.float32)
    npy = os.path.join(work, "x.npy")
    ck_a = os.path.join(work, "a")
    np.save(npy, x)
    dvar.save(ck_a, {"x": x}, compress="none", progress=False)
    os.sync()
    if not args.as_written:
        same_history([npy, ck_a])
    crc = dvar.digest(ck_a)["x"]

    def read_dvar():
        with dvar.open(ck_a, threads=args.threads) as ck:
            return np.asarray(ck["x"])

    stride = max(1, n // 4096)
    probe, last = x[::stride].copy(), x[-1]

    def check_a(out):
        assert out.shape == (n,) and np.array_equal(out[::stride], probe) and out[-1] == last
    check_a(read_dvar())
    assert dvar.digest(ck_a)["x"] == crc
    nbytes = x.nbytes
    del x
    data = [os.path.join(ck_a, f) for f in os.listdir(ck_a) if f.startswith("data-")]
    assert len(data) == 1 and os.path.getsize(data[0]) == nbytes, data
    res_a = bench("(a) %d MiB float32 whole" % args.size_mib, args.runs,
                  {"dvar": read_dvar, "np.load": lambda: np.load(npy),
                   "np.fromfile(dvar's file)": lambda: np.fromfile(data[0], dtype=np.float32)},
                  check_a, [ck_a], [npy], nbytes, raw=True)
    os.remove(npy)
    shutil.rmtree(ck_a)

    # (b) one row range of a table
    cols = 1024
    rows = args.table_mib * MiB // (4 * cols)
    table = rng.random((rows, cols), dtype=np.float32)
    tnpy = os.path.join(work, "t.npy")
    ck_b = os.path.join(work, "b")
    np.save(tnpy, table)
    dvar.save(ck_b, {"t": table}, compress="none", progress=False)
    os.sync()
    if not args.as_written:
        same_history([tnpy, ck_b])
    k = max(1, rows // 100)
    a = int(rng.integers(0, rows - k))
    want = table[a:a + k].copy()
    del table

    def slice_dvar():
        with dvar.open(ck_b, threads=args.threads) as ck:
            return ck["t"][a:a + k]

    def slice_np():
        return np.array(np.load(tnpy, mmap_mode="r")[a:a + k])

    def check_b(out):
        assert np.array_equal(out, want)
    res_b = bench("(b) rows %d:%d of %d MiB" % (a, a + k, args.table_mib), args.runs,
                  {"dvar": slice_dvar, "np.load(mmap)": slice_np}, check_b, [ck_b], [tnpy],
                  want.nbytes)
    for side in ("np.load", "np.fromfile(dvar's file)"):
        print("goal (a): dvar >= 0.9x %s: %s" % (side, ", ".join(
            "%s %.2f %s" % (mode, res_a[mode][side], "met" if res_a[mode][side] >= 0.9
                            else "NOT met") for mode in ("cold", "warm"))))
    print("(b) np.load(mmap) / dvar slice: cold %.2f, warm %.2f" % (
        res_b["cold"]["np.load(mmap)"], res_b["warm"]["np.load(mmap)"]))


if __name__ == "__main__":
    main()
