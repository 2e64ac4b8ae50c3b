#!/usr/bin/python3
"""tests/fault/py_alloc_ops.py - one operation of the dvar Python package,
for cli_alloc.py to run with each of libdvar's allocations failed in turn.
Prints what it read or wrote; a MemoryError (what the package raises for
DVAR_ENOMEM) exits with code 3 and says so on stderr, as the dvar command
does; any other exception is a failure and ends the usual way.

    py_alloc_ops.py read SRC | save DST | reshard SRC DST | export SRC DST
                    | digest SRC | verify SRC | diff A B
"""
import sys

import numpy as np

import dvar


def main(op, *args):
    if op == "read":
        with dvar.open(args[0]) as ck:
            for name in sorted(ck):
                a = np.asarray(ck[name])
                print(name, a.dtype, a.shape, a.tobytes().hex()[:64])
            print("rows", ck["emb"][3:9, 2:5].tobytes().hex())
    elif op == "save":
        rng = np.random.default_rng(7)
        dvar.save(args[0], {"w": rng.standard_normal((64, 32)).astype(np.float32),
                            "emb": np.arange(40 * 8, dtype=np.int64).reshape(40, 8)},
                  shards={"emb": 3}, attributes={"w": {"note": "x"}}, progress=False)
        print(sorted(dvar.digest(args[0]).items()))
    elif op == "reshard":
        print(sorted(dvar.reshard(args[0], args[1], shards=3, progress=False).written.items()))
    elif op == "export":
        print(sorted(dvar.export(args[0], args[1], progress=False).written.items()))
    elif op == "digest":
        print(sorted(dvar.digest(args[0]).items()))
    elif op == "verify":
        print(dvar.verify(args[0]).ok)
    elif op == "diff":
        rep = dvar.diff(args[0], args[1])
        print(rep.identical, [(v.name, v.status, v.num_different) for v in rep.variables])


if __name__ == "__main__":
    try:
        main(*sys.argv[1:])
    except MemoryError as e:
        print("out of memory: %s" % e, file=sys.stderr)
        sys.exit(3)
