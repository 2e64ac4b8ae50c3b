"""The offline operations through Python: reshard, export (dvar,
safetensors, tf, npy) and import (npy, npz, safetensors) round trips whose
digests equal the source's; verify (and --against); diff; progress and
cancellation."""

import json
import os
import struct

import numpy as np
import pytest

from conftest import fixture_path

import dvar


@pytest.fixture
def source(tmp_path, rng):
    arrays = {
        "emb": rng.standard_normal((1000, 16)).astype(np.float32),
        "dense/kernel": rng.standard_normal((16, 8)),
        "step": np.int64(42),
        "mask": rng.random(33) < 0.5,
        "counts": rng.integers(0, 1 << 30, size=(7, 3), dtype=np.int32),
    }
    path = str(tmp_path / "src")
    dvar.save(path, arrays, shards={"emb": 4}, chunk_size=4096, fsync=False)
    return path, arrays


def assert_same(path, arrays):
    with dvar.open(path) as ck:
        assert sorted(ck) == sorted(arrays)
        for name, a in arrays.items():
            np.testing.assert_array_equal(np.asarray(ck[name]), a, err_msg=name)


def test_reshard(tmp_path, source):
    src, arrays = source
    res = dvar.reshard(src, str(tmp_path / "r3"), shards=3, progress=False)
    assert res.path == str(tmp_path / "r3") and res.written["emb"] == 1000 * 16 * 4
    with dvar.open(str(tmp_path / "r3")) as ck:
        assert len(ck.info("emb").slices) == 3
    assert dvar.digest(str(tmp_path / "r3")) == dvar.digest(src)
    assert_same(str(tmp_path / "r3"), arrays)
    # One variable by name; more shards than rows by name is refused.
    dvar.reshard(src, str(tmp_path / "rv"), vars={"counts": 3}, progress=False)
    with dvar.open(str(tmp_path / "rv")) as ck:
        assert len(ck.info("counts").slices) == 3
        assert len(ck.info("emb").slices) == 4  # as saved
    with pytest.raises(dvar.InvalidArgument, match="7 rows"):
        dvar.reshard(src, str(tmp_path / "x"), vars={"counts": 100}, progress=False)
    # A shard count for every sharded variable is capped by the rows, with a note.
    res = dvar.reshard(src, str(tmp_path / "r5000"), shards=5000, progress=False)
    assert any("emb" in n and "1000 rows" in n for n in res.notes), res.notes
    assert dvar.verify(str(tmp_path / "rv"), against=src).ok
    dvar.reshard(src, str(tmp_path / "rp"), partitioner="fixed:2", progress=False)
    with dvar.open(str(tmp_path / "rp")) as ck:
        assert len(ck.info("emb").slices) == 2
    with pytest.raises(dvar.InvalidArgument):
        dvar.reshard(src, str(tmp_path / "x"))
    with pytest.raises(dvar.ExistsError):
        dvar.reshard(src, str(tmp_path / "r3"), shards=2)


def test_export_every_format(tmp_path, source):
    src, arrays = source
    digests = dvar.digest(src)
    out = str(tmp_path / "exp")
    dvar.export(src, out, format="dvar", progress=False)
    assert dvar.digest(out) == digests
    with dvar.open(out) as ck:
        assert len(ck.info("emb").slices) == 1
        np.testing.assert_array_equal(ck["emb"].map(), arrays["emb"])  # mappable
    st = str(tmp_path / "model.safetensors")
    dvar.export(src, st, progress=False)  # auto: by the name
    with open(st, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    assert header["emb"]["dtype"] == "F32" and header["emb"]["shape"] == [1000, 16]
    tf = str(tmp_path / "tf" / "model.ckpt")
    dvar.export(src, tf, format="tf", keep_shards=True, progress=False)
    with dvar.open(tf) as ck:
        assert len(ck.info("emb").slices) == 4
    assert dvar.digest(tf) == digests
    npy = str(tmp_path / "npy")
    dvar.export(src, npy, format="npy", progress=False)
    with open(os.path.join(npy, "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["format"] == "dvar-npy"
    for name, a in arrays.items():
        entry = manifest["variables"][name]
        np.testing.assert_array_equal(np.load(os.path.join(npy, entry["file"])), a)
    # Round trips back in: safetensors and npy import equal to the source.
    back = str(tmp_path / "back")
    dvar.import_(back, st, progress=False)
    assert dvar.digest(back) == digests
    assert dvar.diff(src, back).identical


def test_export_tf_fixture_to_safetensors(tmp_path):
    fx = fixture_path("tf", "vars_and_arithmetic", "variables")
    out = str(tmp_path / "m.safetensors")
    res = dvar.export(fx, out, short_names=True, progress=False)
    assert sorted(res.written) == ["child/z", "x", "y"]
    assert any("_CHECKPOINTABLE_OBJECT_GRAPH" in n for n in res.notes)
    back = str(tmp_path / "back")
    dvar.import_(back, out, progress=False)
    with dvar.open(back) as ck:
        assert ck["x"][()] == 1.0 and ck["child/z"][()] == 3.0


def test_import_npy_npz(tmp_path, rng):
    a = rng.standard_normal((50, 4)).astype(np.float32)
    b = np.arange(10, dtype=np.uint16)
    np.save(str(tmp_path / "a.npy"), a)
    np.savez(str(tmp_path / "plain.npz"), b=b, c=np.float64(1.5))
    np.savez_compressed(str(tmp_path / "packed.npz"), d=a[::2])
    out = str(tmp_path / "imp")
    res = dvar.import_(out, [str(tmp_path / "a.npy"), (str(tmp_path / "a.npy"), "renamed"),
                             str(tmp_path / "plain.npz"), (str(tmp_path / "packed.npz"), "p")],
                       shards={"renamed": 3}, compress="lz4", progress=False)
    assert sorted(res.written) == ["a", "b", "c", "p/d", "renamed"]
    assert_same(out, {"a": a, "renamed": a, "b": b, "c": np.float64(1.5), "p/d": a[::2]})
    with dvar.open(out) as ck:
        assert len(ck.info("renamed").slices) == 3
        assert ck["a"].digest() == ck["renamed"].digest()
    root = str(tmp_path / "root")
    dvar.import_(root, str(tmp_path / "a.npy"), step=5, progress=False)
    with dvar.open(root) as ck:
        assert ck.path.endswith("ckpt-5")
    bad = tmp_path / "bad.npy"
    np.save(str(bad), a)
    bad.write_bytes(bad.read_bytes()[:-10])  # truncated
    with pytest.raises(dvar.CorruptError):
        dvar.import_(str(tmp_path / "x"), str(bad), progress=False)
    assert not os.path.exists(str(tmp_path / "x"))
    np.save(str(tmp_path / "cplx.npy"), np.zeros(3, np.complex64))
    with pytest.raises(dvar.Unsupported):
        dvar.import_(str(tmp_path / "x"), str(tmp_path / "cplx.npy"), progress=False)


def test_verify_finds_corruption(tmp_path, source):
    src, _ = source
    assert dvar.verify(src).ok and dvar.verify(src).bad_chunks == []
    data = os.path.join(src, "data-00000-of-00001")
    with open(data, "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 1]))
    rep = dvar.verify(src)
    assert not rep and len(rep.bad_chunks) == 1
    bad = rep.bad_chunks[0]
    assert bad.code == dvar.ECORRUPT and bad.file == data and "checksum" in bad.message


def test_digest_against(tmp_path, source):
    src, arrays = source
    other = dict(arrays)
    other["counts"] = arrays["counts"] + 1
    del other["mask"]
    dvar.save(str(tmp_path / "o"), other, fsync=False)
    rep = dvar.verify(str(tmp_path / "o"), against=src)
    assert not rep.ok and rep.missing == ["mask"]
    assert [m[0] for m in rep.digest_mismatches] == ["counts"]


def test_diff(tmp_path):
    a = {"f": np.array([1.0, -0.0, np.nan, 4.0], np.float32), "i": np.arange(5),
         "only_a": np.zeros(1), "shape": np.zeros(3), "dt": np.zeros(2, np.int32),
         "big": np.arange(3 * 1024 * 1024, dtype=np.float32).reshape(3, -1)}
    b = {"f": np.array([1.0, 0.0, np.nan, 4.5], np.float32), "i": np.arange(5),
         "only_b": np.zeros(1), "shape": np.zeros(4), "dt": np.zeros(2, np.int64),
         "big": a["big"].copy()}
    b["big"][2, 123456] += 1
    dvar.save(str(tmp_path / "a"), a, attributes={"i": {"k": "1"}}, fsync=False)
    dvar.save(str(tmp_path / "b"), b, attributes={"i": {"k": "2"}}, fsync=False)
    rep = dvar.diff(str(tmp_path / "a"), str(tmp_path / "b"))
    assert not rep and rep.only_in_a == ["only_a"] and rep.only_in_b == ["only_b"]
    by = {v.name: v for v in rep.variables}
    f = by["f"]
    assert f.status == "values_differ" and f.num_different == 1 and f.num_elements == 4
    assert f.first_difference == ((3,), np.float32(4.0), np.float32(4.5))
    assert f.max_abs_diff == 0.5  # -0.0 vs 0.0 and NaN vs NaN are equal
    assert by["i"].status == "equal" and by["i"].attributes_differ == [("k", "1", "2")]
    assert by["shape"].status == "shape_differs" and by["dt"].status == "dtype_differs"
    big = by["big"]
    assert big.num_different == 1 and big.first_difference[0] == (2, 123456)
    assert big.max_abs_diff == 1.0
    # Bitwise: -0.0 and 0.0 differ too; tolerances accept 4.0 vs 4.5.
    bw = dvar.diff(str(tmp_path / "a"), str(tmp_path / "b"), bitwise=True, attrs=False)
    assert {v.name: v.num_different for v in bw.variables}["f"] == 2
    tol = dvar.diff(str(tmp_path / "a"), str(tmp_path / "b"), atol=0.5, attrs=False,
                    exclude=["big", "shape", "dt"])
    assert [v.name for v in tol.differing()] == [] and tol.excluded == 6
    assert tol.only_in_a == ["only_a"]
    with pytest.raises(dvar.InvalidArgument):
        dvar.diff(str(tmp_path / "a"), str(tmp_path / "b"), bitwise=True, atol=1)
    # A TF checkpoint against its conversion, by short names.
    fx = fixture_path("tf", "vars_and_arithmetic", "variables")
    dvar.export(fx, str(tmp_path / "conv"), short_names=True, progress=False)
    rep = dvar.diff(fx, str(tmp_path / "conv"), short_names=True, skip_tf_bookkeeping=True)
    assert rep.identical and len(rep.variables) == 3


def test_diff_memory_is_bounded(tmp_path):
    # libdvar reads both sides in pieces and reports progress after each:
    # no piece reads more than 8 MiB of the two.
    a = np.arange(2500 * 1000, dtype=np.int32).reshape(2500, 1000)
    dvar.save(str(tmp_path / "a"), {"a": a}, fsync=False)
    dvar.save(str(tmp_path / "b"), {"a": a}, fsync=False)
    steps = []
    assert dvar.diff(str(tmp_path / "a"), str(tmp_path / "b"),
                     progress=lambda done, total: steps.append((done, total))).identical
    done = [0] + [d for d, _ in steps]
    assert len(steps) > 1 and max(np.diff(done)) <= 8 << 20
    assert steps[-1] == (2 * a.nbytes, 2 * a.nbytes)


def test_progress_and_cancel(tmp_path, source):
    src, _ = source
    calls = []
    dvar.export(src, str(tmp_path / "e1"), progress=lambda d, t: calls.append((d, t)))
    assert calls and calls[-1][0] == calls[-1][1] > 0

    def stop(done, total):
        raise KeyboardInterrupt  # what Ctrl-C raises inside the callback
    with pytest.raises(KeyboardInterrupt):
        dvar.reshard(src, str(tmp_path / "e2"), shards=2, progress=stop)
    assert not os.path.exists(str(tmp_path / "e2"))
    with pytest.raises(TypeError):
        dvar.export(src, str(tmp_path / "e3"), progress="yes")
    # A real SIGINT (Ctrl-C) during the C call: the first callback after it
    # sees it; the call is cancelled, KeyboardInterrupt raised, nothing left.
    # (The signal goes to this process while the C code runs.)
    import signal
    sent = []

    def ctrl_c(done, total):
        if not sent:
            sent.append(done)
            os.kill(os.getpid(), signal.SIGINT)
    for op in (lambda out: dvar.reshard(src, out, shards=2, chunk_size=4096, progress=ctrl_c),
               lambda out: dvar.export(src, out, chunk_size=4096, progress=ctrl_c),
               lambda out: dvar.save(out, {"a": np.zeros(1 << 20)[::2]}, progress=ctrl_c)):
        sent.clear()
        out = str(tmp_path / "sigint")
        with pytest.raises(KeyboardInterrupt):
            op(out)
        assert sent and not os.path.exists(out)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back


def test_sigint_while_in_c(tmp_path):
    """Ctrl-C from outside, landing while the C code runs: its Python
    handler then runs on entry to the next callback, where an exception
    could not be caught; the call must still be cancelled cleanly."""
    import signal
    import threading
    src = str(tmp_path / "big")
    dvar.save(src, {"t": np.arange(8 << 20, dtype=np.float32)}, compress="none", fsync=False,
              progress=False)
    started = threading.Event()
    killer = threading.Thread(target=lambda: (started.wait(), os.kill(os.getpid(),
                                                                       signal.SIGINT)))
    killer.start()
    out = str(tmp_path / "out")
    with pytest.raises(KeyboardInterrupt):
        # 8192 pieces of 4 KiB: the signal arrives long before the end.
        dvar.reshard(src, out, vars={"t": 3}, chunk_size=4096,
                     progress=lambda done, total: started.set())
    killer.join()
    assert not os.path.exists(out)
    # The default: nothing when stderr is not a terminal (tqdm or not).
    assert dvar.default_progress_enabled() is False


def test_default_bar_on_a_terminal(tmp_path, source, monkeypatch):
    """progress=None draws a tqdm bar when tqdm imports and stderr is a
    terminal: both faked here, so that the path runs without tqdm installed."""
    import sys
    import types
    src, _ = source
    bars = []

    class FakeBar:
        def __init__(self, total, **kw):
            self.total, self.n, self.closed, self.kw = total, 0, False, kw
            bars.append(self)

        def update(self, k):
            self.n += k

        def close(self):
            self.closed = True
    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=FakeBar))

    class Tty:
        def isatty(self):
            return True

        def write(self, s):
            pass
    monkeypatch.setattr(sys, "stderr", Tty())
    assert dvar.default_progress_enabled()
    dvar.export(src, str(tmp_path / "e"))
    assert len(bars) == 1 and bars[0].closed and bars[0].kw["desc"] == "export"
    assert bars[0].n == bars[0].total > 0
    monkeypatch.setattr(sys, "stderr", open(os.devnull, "w"))
    assert not dvar.default_progress_enabled()
    dvar.export(src, str(tmp_path / "e2"))
    assert len(bars) == 1
